package guard

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// fakeLedgerMap stands in for the programs' ledger_dirs map.
type fakeLedgerMap struct {
	m   map[guardGuardDir]uint64
	max uint32
}

func (f *fakeLedgerMap) Update(key, value any, flags ebpf.MapUpdateFlags) error {
	k := key.(guardGuardDir)
	if _, ok := f.m[k]; !ok && uint32(len(f.m)) >= f.max {
		return unix.E2BIG // what a full BPF hash map answers
	}
	f.m[k] = value.(uint64)
	return nil
}

func (f *fakeLedgerMap) Delete(key any) error {
	k := key.(guardGuardDir)
	if _, ok := f.m[k]; !ok {
		return ebpf.ErrKeyNotExist
	}
	delete(f.m, k)
	return nil
}

func (f *fakeLedgerMap) MaxEntries() uint32 { return f.max }

func newLedgers(max uint32) (*ledgerDirs, *fakeLedgerMap) {
	f := &fakeLedgerMap{m: map[guardGuardDir]uint64{}, max: max}
	return &ledgerDirs{m: f}, f
}

// plainTempDir is a temporary directory on a filesystem ledgerDirKey
// takes: t.TempDir, or one under /dev/shm (tmpfs) where TMPDIR is on
// btrfs or overlayfs (a container's root), which it refuses, as this
// checks.
func plainTempDir(t *testing.T) string {
	dir := t.TempDir()
	var fs unix.Statfs_t
	require.NoError(t, unix.Statfs(dir, &fs))
	name := statDevNotSuper(fs.Type)
	if name == "" {
		return dir
	}
	_, err := ledgerDirKey(dir)
	assert.ErrorContains(t, err, "is on "+name)
	shm, err := os.MkdirTemp("/dev/shm", "guard-test")
	if err != nil {
		t.Skipf("TMPDIR is on %s and there is no /dev/shm: %v", name, err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	return shm
}

// The key is what the kernel's inode says: the inode number and the
// kernel's encoding of the device (major << 20 | minor), not user space's.
func TestLedgerDirKey(t *testing.T) {
	dir := plainTempDir(t)
	var st unix.Stat_t
	require.NoError(t, unix.Stat(dir, &st))
	k, err := ledgerDirKey(dir)
	require.NoError(t, err)
	assert.Equal(t, st.Ino, k.Ino)
	assert.Equal(t, unix.Major(st.Dev), uint32(k.Dev>>20))
	assert.Equal(t, unix.Minor(st.Dev), uint32(k.Dev&(1<<20-1)))

	file := filepath.Join(dir, "card0.ledger")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err = ledgerDirKey(file)
	assert.ErrorContains(t, err, "is not a directory")
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(dir, link))
	_, err = ledgerDirKey(link)
	assert.ErrorContains(t, err, "not a file or a symbolic link")
	_, err = ledgerDirKey(filepath.Join(dir, "gone"))
	assert.ErrorContains(t, err, "make it before registering it")
}

func TestStatDevNotSuper(t *testing.T) {
	assert.Equal(t, "btrfs", statDevNotSuper(unix.BTRFS_SUPER_MAGIC))
	assert.Equal(t, "overlayfs", statDevNotSuper(unix.OVERLAYFS_SUPER_MAGIC))
	assert.Empty(t, statDevNotSuper(unix.TMPFS_MAGIC))
	assert.Empty(t, statDevNotSuper(unix.EXT4_SUPER_MAGIC))
}

func TestLedgerDirsAddRemove(t *testing.T) {
	l, f := newLedgers(8)
	dir := plainTempDir(t)
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	require.NoError(t, os.Mkdir(a, 0o777))
	require.NoError(t, os.Mkdir(b, 0o777))
	ka, err := ledgerDirKey(a)
	require.NoError(t, err)
	kb, err := ledgerDirKey(b)
	require.NoError(t, err)

	require.NoError(t, l.add(a, 11))
	require.NoError(t, l.add(b+"/", 12))
	assert.Equal(t, map[guardGuardDir]uint64{ka: 11, kb: 12}, f.m)
	// Again, as a restarted agent does: the same registration.
	require.NoError(t, l.add(a, 11))
	assert.Equal(t, map[guardGuardDir]uint64{ka: 11, kb: 12}, f.m)

	// Removed after the agent removed the directory: by what was registered.
	require.NoError(t, os.Remove(b))
	require.NoError(t, l.remove(b))
	assert.Equal(t, map[guardGuardDir]uint64{ka: 11}, f.m)
	require.NoError(t, l.remove(b), "removing a path not registered")
	require.NoError(t, l.remove(filepath.Join(dir, "never")), "removing a path never registered")

	assert.ErrorContains(t, l.add(a, 0), "cgroup id 0")
	assert.ErrorContains(t, l.add("a", 11), "absolute path")
}

// A path whose directory was made again is registered by its new inode
// only; a path whose (device, inode) a new directory took no longer
// unregisters it.
func TestLedgerDirsReused(t *testing.T) {
	l, f := newLedgers(8)
	old, fresh := guardGuardDir{Ino: 1, Dev: 5}, guardGuardDir{Ino: 2, Dev: 5}
	require.NoError(t, l.register("/l/a", old, 11))
	require.NoError(t, l.register("/l/a", fresh, 11))
	assert.Equal(t, map[guardGuardDir]uint64{fresh: 11}, f.m)

	// /l/a removed without RemoveLedgerDir; /l/b's new directory got its inode.
	require.NoError(t, l.register("/l/b", fresh, 12))
	require.NoError(t, l.remove("/l/a"))
	assert.Equal(t, map[guardGuardDir]uint64{fresh: 12}, f.m)
}

func TestLedgerDirsFull(t *testing.T) {
	l, _ := newLedgers(1)
	require.NoError(t, l.register("/l/a", guardGuardDir{Ino: 1}, 11))
	err := l.register("/l/b", guardGuardDir{Ino: 2}, 12)
	assert.ErrorContains(t, err, "holds 1 ledger directories already")
	assert.ErrorContains(t, err, "RemoveLedgerDir")
}
