package ledger

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Peek's constants are the C header's.
func TestPeekLayout(t *testing.T) {
	want := [13]uint64{peekVersion, peekHeaderSize, peekSlotSize, peekFileSize, peekSlotUsed,
		offVersion, offNSlots, offSize, offCap, offUsed, offSlotSt, offSlotB, offUnseen}
	assert.Equal(t, want, cLayout())
}

// Peek sees the live processes' bytes, drops a dead one's at once (before
// any reap), and leaves the file as it was.
func TestPeekUsage(t *testing.T) {
	const capBytes = 64 * mib
	path, l := newLedger(t, capBytes)

	s, err := Peek(path)
	require.NoError(t, err)
	assert.Equal(t, Snapshot{Cap: capBytes}, s, "a fresh ledger")

	a := spawn(t, path, 0)
	require.NoError(t, a.charge(3*mib))
	b := spawn(t, path, 0)
	require.NoError(t, b.charge(5*mib))
	s, err = Peek(path)
	require.NoError(t, err)
	assert.Equal(t, Snapshot{Used: 8 * mib, Cap: capBytes, Procs: 2, Total: 8 * mib}, s)

	b.ok("uncharge %d", 2*mib)
	s, err = Peek(path)
	require.NoError(t, err)
	assert.Equal(t, uint64(6*mib), s.Used)

	b.kill()
	s, err = Peek(path)
	require.NoError(t, err)
	assert.Equal(t, Snapshot{Used: 3 * mib, Cap: capBytes, Procs: 1, Total: 6 * mib}, s,
		"the dead process's bytes are not counted, and Peek reaps nothing")
	assert.Equal(t, uint64(6*mib), usage(t, l), "the file is unchanged")
}

// A process holding the ledger's lock forever (stopped, or hung) does not
// delay Peek, which takes no lock; Usage would wait for it.
func TestPeekIgnoresTheLock(t *testing.T) {
	path, _ := newLedger(t, 16*mib)
	a := spawn(t, path, 0)
	require.NoError(t, a.charge(mib))
	hog := spawn(t, path, 0)
	require.NoError(t, hog.charge(2*mib))
	require.Equal(t, "locked", hog.do("lockhang %d", 2*mib))

	done := make(chan Snapshot, 1)
	go func() {
		s, err := Peek(path)
		assert.NoError(t, err)
		done <- s
	}()
	select {
	case s := <-done:
		assert.Equal(t, uint64(3*mib), s.Used)
		assert.Equal(t, 2, s.Procs)
	case <-time.After(30 * time.Second):
		t.Fatal("Peek waited for the ledger's lock")
	}
}

// refusal is a file a container can put in a ledger's place, and what
// reading it must answer.
type refusal struct {
	name, path string
	want       error
	msg        string
}

// refusals makes them in a scratch directory, next to the good ledger.
func refusals(t *testing.T, good string) []refusal {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	require.NoError(t, os.WriteFile(short, []byte("gsledger"), 0o644))
	wrongMagic := filepath.Join(dir, "magic")
	require.NoError(t, os.WriteFile(wrongMagic, make([]byte, peekFileSize), 0o644))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(good, link))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	return []refusal{
		{"missing", filepath.Join(dir, "none"), os.ErrNotExist, "no such file"},
		{"too short", short, syscall.EINVAL, "not a ledger file of this version"},
		{"not a ledger", wrongMagic, syscall.EPROTO, "no ledger magic"},
		{"symbolic link", link, syscall.ELOOP, "too many levels"},
		{"a FIFO does not block", fifo, syscall.EINVAL, "not a ledger file"},
		{"a directory", dir, syscall.EINVAL, "not a ledger file"},
	}
}

func checkRefusals(t *testing.T, cases []refusal, read func(path string) error) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := read(tc.path)
			require.Error(t, err)
			assert.True(t, errors.Is(err, tc.want), "%v is not %v", err, tc.want)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}

func TestPeekRefuses(t *testing.T) {
	good, _ := newLedger(t, 16*mib)
	checkRefusals(t, refusals(t, good), func(path string) error {
		_, err := Peek(path)
		return err
	})
}

// A file truncated under the mapping (a container may do that to its
// ledger) is an error, not a SIGBUS that kills the agent.
func TestPeekTruncated(t *testing.T) {
	path, _ := newLedger(t, 16*mib)
	fd, err := unix.Open(path, unix.O_RDWR, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	mem, err := unix.Mmap(fd, 0, peekFileSize, unix.PROT_READ, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(mem)
	require.NoError(t, unix.Ftruncate(fd, 0))
	_, err = peekMapped(fd, mem)
	require.ErrorIs(t, err, errTruncated)
}
