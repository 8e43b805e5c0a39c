// Package leftovers finds and removes what test processes leave on the
// host: processes (named by PID and start time, or by an argument),
// cgroup directories in every hierarchy, mounts below a directory. The
// harnesses that run real components (internal/e2e's containerd,
// internal/kube's Kubernetes) tear down with it and check with it that
// nothing is left.
package leftovers

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// ProcStart is a process's start time in clock ticks since boot ("" when
// there is no such process): with the PID, it names one process.
func ProcStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name, in parentheses, may hold spaces: count after it.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19] // field 22 of stat
}

// ProcArgs is a process's command line (nil when there is no such process
// or it is a zombie).
func ProcArgs(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// PidsWithArg are the processes, other than this one, with arg (or
// unix://arg) among their arguments.
func PidsWithArg(arg string) []int {
	return pidsWhere(func(a string) bool { return a == arg || a == "unix://"+arg })
}

// PidsWithArgPrefix are the processes, other than this one, with an
// argument that names a path at or below dir ("--root-dir=DIR/x"
// included).
func PidsWithArgPrefix(dir string) []int {
	if !safeRoot(dir) {
		return nil
	}
	return pidsWhere(func(a string) bool {
		_, v, ok := strings.Cut(a, "=")
		if !ok {
			v = a
		}
		return v == dir || strings.HasPrefix(v, dir+"/")
	})
}

// pidsWhere are the processes, other than this one, one of whose
// arguments satisfies match.
func pidsWhere(match func(string) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, de := range entries {
		pid, err := strconv.Atoi(de.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		for _, a := range ProcArgs(pid) {
			if match(a) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// CgroupDirs are the existing directories of the cgroup path cgroup
// ("/name") in every hierarchy (cgroup v1 controllers, the v1 hybrid's
// unified tree, a pure v2 tree), each once.
func CgroupDirs(cgroup string) []string {
	if !safeRoot(cgroup) {
		return nil
	}
	var dirs []string
	seen := map[string]bool{}
	candidates, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", cgroup))
	candidates = append(candidates, filepath.Join("/sys/fs/cgroup", cgroup))
	for _, d := range candidates {
		real, err := filepath.EvalSymlinks(d)
		if err != nil || seen[real] {
			continue
		}
		if fi, err := os.Stat(real); err == nil && fi.IsDir() {
			seen[real] = true
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// CgroupHierarchies are the mount points of the cgroup hierarchies: each
// v1 controller's and the hybrid's unified tree, or a pure v2 tree.
func CgroupHierarchies() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.procs"); err == nil {
		return []string{"/sys/fs/cgroup"}
	}
	var dirs []string
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, de := range entries {
		d := filepath.Join("/sys/fs/cgroup", de.Name())
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err == nil {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// CgroupPids are the processes in the cgroup trees under dirs.
func CgroupPids(dirs []string) []int {
	seen := map[int]bool{}
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(p string, de os.DirEntry, err error) error {
			if err != nil || !de.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	pids := make([]int, 0, len(seen))
	for pid := range seen {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids
}

// RemoveCgroup removes a cgroup directory and its children, innermost
// first (cgroup directories go with rmdir, never with their files).
func RemoveCgroup(dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
		if err == nil && de.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var last error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
			last = fmt.Errorf("rmdir %s: %w", dirs[i], err)
		}
	}
	return last
}

// MountsUnder are the mount points at or below any of dirs, deepest
// first.
func MountsUnder(dirs ...string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var mounts []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		for _, d := range dirs {
			if !safeRoot(d) {
				continue
			}
			if mp == d || strings.HasPrefix(mp, d+"/") {
				mounts = append(mounts, mp)
				break
			}
		}
	}
	// Deepest first: longer paths before their prefixes; a path mounted
	// twice comes twice.
	sort.SliceStable(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	return mounts
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// safeRoot reports whether path names something below the root: an empty
// path or "/" would make every process, cgroup or mount a leftover (an
// owner file without its cgroup must not sweep the host's).
func safeRoot(path string) bool {
	return strings.Trim(filepath.Clean("/"+path), "/") != ""
}
