package interposer_test

import (
	"os"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

// libc's open calls the shim wraps (src/devopen.c), every one a way a
// driver built against some glibc, fortified or not, opens its nodes.
var openCalls = []string{"open", "open64", "openat", "openat64", "__open_2", "__open64_2", "__openat_2", "__openat64_2"}

// errnoOf is how gstest devopen prints an errno.
func errnoOf(e syscall.Errno) string { return strconv.Itoa(int(e)) }

// In module mode, an open of a path under /dev/nvidia attaches the process
// first, through every open call. There is no module here: the attach
// fails and says so (which is how this test sees it was tried), and the
// open goes on with its own answer. That it lets a process past the guard
// is the qemu guest's test (pkg/guard, TestGuestGuard's shim cases).
// Every other path passes straight through, errno untouched.
func TestDevOpenAttachesFirst(t *testing.T) {
	t.Parallel()
	m := newMachine(t, "GPUSLICE_ENFORCE", "module")
	for _, how := range openCalls {
		r := m.ok("devopen", how, "/dev/nvidia-gstest")
		assert.Equal(t, "0", r.kv()["ok"], "%s: %s", how, r)
		assert.Equal(t, errnoOf(syscall.ENOENT), r.kv()["errno"], "%s: %s", how, r)
		assert.Len(t, r.lines("gpuslice[", "/dev/gpuslice"), 1, "%s: one attach tried, saying why it failed: %s", how, r)

		r = m.ok("devopen", how, "/dev/null")
		assert.Equal(t, "1", r.kv()["ok"], "%s: %s", how, r)
		assert.Equal(t, errnoOf(syscall.EXDEV), r.kv()["errno"], "%s: errno left as it was: %s", how, r)
		assert.Empty(t, r.lines("gpuslice["), "%s: nothing attached for /dev/null: %s", how, r)
	}
	// A NULL path still reaches the kernel.
	r := m.ok("devopen", "open", "-")
	assert.Equal(t, errnoOf(syscall.EFAULT), r.kv()["errno"], "%s", r)
}

// The mode argument of O_CREAT and O_TMPFILE gets through the wrappers.
func TestDevOpenMode(t *testing.T) {
	t.Parallel()
	m := newMachine(t, "GPUSLICE_ENFORCE", "module")
	for _, how := range openCalls[:4] {
		path := m.dir + "/created-by-" + how
		r := m.ok("devopen", how, path, "creat")
		assert.Equal(t, "1", r.kv()["ok"], "%s: %s", how, r)
		assert.Equal(t, "640", r.kv()["mode"], "%s: %s", how, r)
		st, err := os.Stat(path)
		if assert.NoError(t, err, how) {
			assert.Equal(t, os.FileMode(0o640), st.Mode().Perm(), how)
		}
		r = m.ok("devopen", how, m.dir, "tmpfile")
		assert.Equal(t, "1", r.kv()["ok"], "%s: %s", how, r)
		assert.Equal(t, "600", r.kv()["mode"], "%s: %s", how, r)
	}
}

// In the no-module mode (and the default mode without /dev/gpuslice) an
// open of a path under /dev/nvidia opens the card's ledger file first: an
// open file of the container's ledger directory is the guard's proof there
// (pkg/guard, the file mode). Another path opens none.
func TestDevOpenFileLedgerFirst(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		kv   []string
	}{
		{"file", []string{"GPUSLICE_ENFORCE", "file"}},
		{"auto", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := newMachine(t, c.kv...)
			r := m.ok("devopen", "open", "/dev/null")
			assert.Equal(t, "1", r.kv()["ok"], "%s", r)
			_, err := os.Stat(m.ledgerPath(0))
			assert.ErrorIs(t, err, os.ErrNotExist, "no ledger opened for /dev/null")
			for _, how := range openCalls {
				r := m.ok("devopen", how, "/dev/nvidia-gstest")
				assert.Equal(t, "0", r.kv()["ok"], "%s: %s", how, r)
				assert.Equal(t, errnoOf(syscall.ENOENT), r.kv()["errno"], "%s: the open's own errno: %s", how, r)
				_, err := os.Stat(m.ledgerPath(0))
				assert.NoError(t, err, "%s: the ledger opened first", how)
			}
		})
	}
}

// Nothing attaches where there is nothing to attach to: a process without
// a cap.
func TestDevOpenNoAttach(t *testing.T) {
	t.Parallel()
	m := newMachine(t, "GPUSLICE_ENFORCE", "module", "GPU_CONTAINER_MEM", "", "GPU_IDX", "")
	for _, how := range openCalls {
		r := m.ok("devopen", how, "/dev/nvidia-gstest")
		assert.Equal(t, "0", r.kv()["ok"], "%s: %s", how, r)
		assert.Empty(t, r.lines("gpuslice["), "%s: %s", how, r)
	}
	_, err := os.Stat(m.ledgerPath(0))
	assert.ErrorIs(t, err, os.ErrNotExist, "no ledger was opened")
}
