package guard

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The no-module (file) mode has no /dev/gpuslice to ATTACH on. There a
// process proves that it asked for its vGPU by holding open a regular
// file it opened directly inside its own container's ledger directory
// (the shim's card<N>.ledger): the agent registers each container's
// directory with AddLedgerDir, and the programs record such an open as
// they record an ATTACH (README.md, "How the attachment is proved").

// ledgerMap is what the ledger directories' BPF map does for them (an
// *ebpf.Map; the unit tests use a fake).
type ledgerMap interface {
	Update(key, value any, flags ebpf.MapUpdateFlags) error
	Delete(key any) error
	MaxEntries() uint32
}

// ledgerDirs are the registered ledger directories: the map, and each
// path's (device, inode) as it was registered, so that RemoveLedgerDir
// needs no directory (the agent may have removed it already) and a path
// made again replaces its old registration.
type ledgerDirs struct {
	m      ledgerMap
	mu     sync.Mutex
	byPath map[string]guardGuardDir
}

// AddLedgerDir registers the ledger directory at path (on the host, as
// the agent sees it) as that of the container whose cgroup v2 id is
// cgroupID (kmod.CgroupID of its cgroup directory, the id given to
// AddCgroup): from its return on, a guarded process of that cgroup (or a
// descendant) that opens a regular file directly inside the directory is
// attached while it holds the file open (a descriptor or a mapping), and
// a process of any other vGPU cgroup proves nothing by it. The directory
// is named by its device and inode number, which the kernel's files carry,
// so it is seen the same through every mount of it in every container.
//
// Registering the same path again (a restarted agent does, from its
// state: the directory outlives the agent) replaces the registration;
// when the path's directory was made anew meanwhile, the old one's goes.
func (g *Guard) AddLedgerDir(path string, cgroupID uint64) error {
	return g.ledgers.add(path, cgroupID)
}

// RemoveLedgerDir unregisters the ledger directory registered at path
// (by AddLedgerDir: the directory itself may be gone already): opening
// its files proves nothing from then on. Files opened before stay
// recorded until they are closed, as an ATTACH does. Removing a path not
// registered is no error.
func (g *Guard) RemoveLedgerDir(path string) error {
	return g.ledgers.remove(path)
}

func (l *ledgerDirs) add(path string, cgroupID uint64) error {
	if cgroupID == 0 {
		return fmt.Errorf("guard: ledger directory %s: cgroup id 0 is no cgroup", path)
	}
	if !filepath.IsAbs(path) {
		return fmt.Errorf("guard: ledger directory %q: give an absolute path", path)
	}
	path = filepath.Clean(path)
	key, err := ledgerDirKey(path)
	if err != nil {
		return err
	}
	return l.register(path, key, cgroupID)
}

// register maps key (path's directory) to cgroupID in the programs' map.
func (l *ledgerDirs) register(path string, key guardGuardDir, cgroupID uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.m.Update(key, cgroupID, ebpf.UpdateAny); err != nil {
		if errors.Is(err, unix.E2BIG) {
			return fmt.Errorf("guard: ledger directory %s: the guard holds %d ledger directories already "+
				"(one per vGPU container): remove those of containers that are gone with RemoveLedgerDir",
				path, l.m.MaxEntries())
		}
		return fmt.Errorf("guard: registering ledger directory %s: %w", path, err)
	}
	if l.byPath == nil {
		l.byPath = map[string]guardGuardDir{}
	}
	if old, ok := l.byPath[path]; ok && old != key {
		// The path's directory was removed and made again: the old
		// one's (device, inode) may come back as any directory.
		if err := l.m.Delete(old); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("guard: unregistering the former ledger directory %s: %w", path, err)
		}
	}
	// Another path that had this (device, inode) named a directory since
	// removed: removing that path must not unregister this one.
	for p, k := range l.byPath {
		if k == key && p != path {
			delete(l.byPath, p)
		}
	}
	l.byPath[path] = key
	return nil
}

func (l *ledgerDirs) remove(path string) error {
	path = filepath.Clean(path)
	l.mu.Lock()
	defer l.mu.Unlock()
	key, ok := l.byPath[path]
	if !ok {
		return nil
	}
	if err := l.m.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("guard: unregistering ledger directory %s: %w", path, err)
	}
	delete(l.byPath, path)
	return nil
}

// ledgerDirKey is the directory at path as the programs see it: the
// inode number and the kernel's encoding of the device number.
func ledgerDirKey(path string) (guardGuardDir, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return guardGuardDir{}, fmt.Errorf("guard: ledger directory %s (make it before registering it): %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return guardGuardDir{}, fmt.Errorf("guard: ledger directory %s is not a directory (mode %#o): "+
			"register the directory itself, not a file or a symbolic link", path, st.Mode)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return guardGuardDir{}, fmt.Errorf("guard: ledger directory %s: %w", path, err)
	}
	if name := statDevNotSuper(fs.Type); name != "" {
		return guardGuardDir{}, fmt.Errorf("guard: ledger directory %s is on %s, whose stat reports a device "+
			"number other than the one the kernel's files carry, so its files could never prove anything: "+
			"put the ledger directories (the agent's ledgerDir) on tmpfs or another plain filesystem "+
			"(the default, /run/gpuslice/ledger, is tmpfs)", path, name)
	}
	return guardGuardDir{Ino: st.Ino, Dev: KernelDev(unix.Major(st.Dev), unix.Minor(st.Dev))}, nil
}

// statDevNotSuper names the filesystems (by statfs magic) whose stat
// device number is not their superblock's, which the programs read:
// btrfs reports its subvolume's anonymous device, overlayfs that of the
// layer a file or directory comes from. "" for the others.
func statDevNotSuper(magic int64) string {
	switch magic {
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	}
	return ""
}
