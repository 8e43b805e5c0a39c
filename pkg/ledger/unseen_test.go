package ledger

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The unseen bytes the agent writes count against the cap of every
// charging process, exactly; they are no process's charge (the slots and
// the total keep to those), and Peek and Usage report them.
func TestUnseenCountsAgainstTheCap(t *testing.T) {
	const capBytes = 16 * mib
	path, l := newLedger(t, capBytes)
	a := spawn(t, path, 0)
	require.NoError(t, a.charge(4*mib))

	require.NoError(t, WriteUnseen(path, 5*mib))
	assert.Error(t, a.charge(7*mib+1), "4 charged and 5 unseen leave 7")
	require.NoError(t, a.charge(7*mib))
	assert.Error(t, a.charge(1))
	s, err := Peek(path)
	require.NoError(t, err)
	assert.Equal(t, Snapshot{Used: 11 * mib, Cap: capBytes, Procs: 1, Total: 11 * mib, Unseen: 5 * mib}, s)
	used, _, err := l.Usage()
	require.NoError(t, err)
	assert.Equal(t, uint64(capBytes), used, "the vGPU's use counts them")
	assert.Equal(t, uint64(11*mib), usage(t, l), "the total is the slots'")

	// More than the cap: nothing fits, uncharges still work.
	require.NoError(t, WriteUnseen(path, capBytes+1))
	a.ok("uncharge %d", mib)
	assert.Error(t, a.charge(1))
	require.NoError(t, WriteUnseen(path, 0))
	require.NoError(t, a.charge(6*mib), "nothing unseen: the whole cap again")
}

// A process holding the ledger's lock forever does not delay WriteUnseen.
func TestWriteUnseenIgnoresTheLock(t *testing.T) {
	path, _ := newLedger(t, 16*mib)
	hog := spawn(t, path, 0)
	require.Equal(t, "locked", hog.do("lockhang %d", mib))
	done := make(chan error, 1)
	go func() { done <- WriteUnseen(path, 2*mib) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("WriteUnseen waited for the ledger's lock")
	}
	s, err := Peek(path)
	require.NoError(t, err)
	assert.Equal(t, uint64(2*mib), s.Unseen)
}

// What a container can put in the ledger's place is refused, a hard link
// to the ledger too, and nothing is written.
func TestWriteUnseenRefuses(t *testing.T) {
	good, _ := newLedger(t, 16*mib)
	hard := filepath.Join(t.TempDir(), "hard")
	require.NoError(t, os.Link(good, hard))
	cases := append(refusals(t, good), refusal{"hard link", hard, syscall.EINVAL, "not a ledger file"})
	for i := range cases {
		if cases[i].name == "a directory" { // opened for writing: refused earlier
			cases[i].want, cases[i].msg = syscall.EISDIR, "is a directory"
		}
	}
	checkRefusals(t, cases, func(path string) error { return WriteUnseen(path, mib) })
	require.NoError(t, os.Remove(hard))
	s, err := Peek(good)
	require.NoError(t, err)
	assert.Zero(t, s.Unseen, "nothing was written through the refused paths")
}

// A file truncated under the mapping is an error, not a SIGBUS.
func TestWriteUnseenTruncated(t *testing.T) {
	path, _ := newLedger(t, 16*mib)
	fd, err := unix.Open(path, unix.O_RDWR, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	mem, err := unix.Mmap(fd, 0, peekFileSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(mem)
	require.NoError(t, unix.Ftruncate(fd, 0))
	require.ErrorIs(t, storeUnseen(mem, mib), errTruncated)
}
