package kube

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuslice/gpuslice/internal/leftovers"
)

// nodeIP is the host's address the node runs on: the first IPv4 address of
// the interface of the default route, else of the first interface that is
// up and not loopback. The kubelet refuses a loopback node IP.
func nodeIP() (string, error) {
	names := []string{}
	if dev := defaultRouteDev(); dev != "" {
		names = append(names, dev)
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp != 0 && ifc.Flags&net.FlagLoopback == 0 {
			names = append(names, ifc.Name)
		}
	}
	for _, name := range names {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
				return ipn.IP.String(), nil
			}
		}
	}
	return "", errors.New("kube: the host has no non-loopback IPv4 address for the node")
}

// defaultRouteDev is the interface of the IPv4 default route, from
// /proc/net/route ("" when there is none).
func defaultRouteDev() string {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 2 && fields[1] == "00000000" && fields[0] != "Iface" {
			return fields[0]
		}
	}
	return ""
}

// FreePorts are n TCP ports free on ip now, all different (each is held
// until all are chosen): the cluster's components', or a test's server on
// the node (with the host's network, as a DaemonSet's metrics).
func FreePorts(ip string, n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ps := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ps = append(ps, l.Addr().(*net.TCPAddr).Port)
	}
	return ps, nil
}

// podSubnet is the pods' subnet: the first 10.251.N.0/24 that overlaps no
// address of the host's interfaces.
func podSubnet() (string, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	var used []*net.IPNet
	for _, ifc := range ifaces {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				used = append(used, ipn)
			}
		}
	}
	return freeSubnet(used)
}

// freeSubnet is the first 10.251.N.0/24 that overlaps none of used.
func freeSubnet(used []*net.IPNet) (string, error) {
	for n := range 256 {
		_, cand, _ := net.ParseCIDR(fmt.Sprintf("10.251.%d.0/24", n))
		free := true
		for _, u := range used {
			if u.Contains(cand.IP) || cand.Contains(u.IP) {
				free = false
				break
			}
		}
		if free {
			return cand.String(), nil
		}
	}
	return "", errors.New("kube: no free 10.251.N.0/24 for the pods on this host")
}

// sysctls are values of /proc/sys, by path below it ("vm/overcommit_memory").
type sysctls map[string]string

// kubeletSysctls are the host settings the kubelet (vm, kernel) and the
// CNI bridge (ip_forward, for its gateway) change: recorded before the
// kubelet starts and restored after it stops.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward",
}

// readSysctls reads the given settings; one that does not exist is left
// out.
func readSysctls(keys []string) sysctls {
	s := sysctls{}
	for _, k := range keys {
		if b, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil {
			s[k] = strings.TrimSpace(string(b))
		}
	}
	return s
}

// restore writes back every value that differs now, and returns the
// errors of those it could not write.
func (s sysctls) restore() error {
	var errs []error
	for k, want := range s {
		path := filepath.Join("/proc/sys", k)
		b, err := os.ReadFile(path)
		if err == nil && strings.TrimSpace(string(b)) == want {
			continue
		}
		if err := os.WriteFile(path, []byte(want+"\n"), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s to %s: %v", k, want, err))
		}
	}
	return errors.Join(errs...)
}

// volatileSysctls are the /proc/sys entries the kernel changes by itself
// (counters, random values, self-tuning): no evidence of a leftover.
var volatileSysctls = []string{
	"fs/dentry-state", "fs/file-nr", "fs/inode-nr", "fs/inode-state", "fs/aio-nr", "fs/quota/",
	"kernel/ns_last_pid", "kernel/random/", "kernel/pty/nr", "kernel/perf_event_max_sample_rate",
	"net/netfilter/nf_conntrack_count",
}

// allSysctls reads every readable entry of /proc/sys but the volatile
// ones: what a teardown compares against, beyond the entries known to
// change (kubeletSysctls), to catch a change nobody listed.
func allSysctls() sysctls {
	s := sysctls{}
	_ = filepath.WalkDir("/proc/sys", func(p string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return nil
		}
		key := strings.TrimPrefix(p, "/proc/sys/")
		for _, v := range volatileSysctls {
			if strings.HasPrefix(key, v) {
				return nil
			}
		}
		if b, err := os.ReadFile(p); err == nil {
			s[key] = strings.TrimSpace(string(b))
		}
		return nil
	})
	return s
}

// changedFrom lists the entries present in both s and before whose values
// differ (entries of interfaces that came or went are no change).
func (s sysctls) changedFrom(before sysctls) []string {
	var lines []string
	for k, v := range before {
		if w, ok := s[k]; ok && w != v {
			lines = append(lines, fmt.Sprintf("sysctl %s is %q, was %q", k, w, v))
		}
	}
	sort.Strings(lines)
	return lines
}

// hostLock is the machine-wide lock a cluster holds for its lifetime.
type hostLock struct{ f *os.File }

// lockHost takes the host lock, waiting up to timeout while another
// cluster holds it; logf says so once.
func lockHost(timeout time.Duration, logf func(string, ...any)) (*hostLock, error) {
	if err := os.MkdirAll(baseDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(baseDir, "host.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for waited := false; ; waited = true {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return &hostLock{f: f}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("kube: the host lock %s: %v (another cluster: %s)", f.Name(), err, liveOwners())
		}
		if !waited {
			logf("kube: waiting for another cluster on this machine to end: %s", liveOwners())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// unlock releases the lock (closing the file is enough, even after a
// crash).
func (h *hostLock) unlock() {
	if h != nil && h.f != nil {
		h.f.Close()
		h.f = nil
	}
}

// liveOwners names the test processes whose clusters' directories exist.
func liveOwners() string {
	var who []string
	dirs, _ := filepath.Glob(filepath.Join(baseDir, "*", ownerFile))
	for _, p := range dirs {
		if o, err := readOwner(filepath.Dir(p)); err == nil {
			who = append(who, "pid "+strconv.Itoa(o.Pid)+" ("+o.Test+")")
		}
	}
	if len(who) == 0 {
		return "none recorded"
	}
	return strings.Join(who, ", ")
}

// makeCgroupRoot creates the kubelet's cgroup root in every hierarchy: the
// kubelet refuses to start when it is missing from one.
func makeCgroupRoot(cgroup string) error {
	for _, h := range leftovers.CgroupHierarchies() {
		if err := os.MkdirAll(filepath.Join(h, cgroup), 0o755); err != nil {
			return fmt.Errorf("kube: creating the kubelet's cgroup root: %v", err)
		}
	}
	return nil
}
