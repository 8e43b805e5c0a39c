package kube_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// volatileSysctls are the /proc/sys entries the kernel changes by itself
// (counters, random values, self-tuning): not evidence of a leftover.
var volatileSysctls = []string{
	"fs/dentry-state", "fs/file-nr", "fs/inode-nr", "fs/inode-state", "fs/aio-nr", "fs/quota/",
	"kernel/ns_last_pid", "kernel/random/", "kernel/pty/nr", "kernel/perf_event_max_sample_rate",
	"net/netfilter/nf_conntrack_count",
}

// sysctlSnapshot reads every readable entry of /proc/sys but the volatile
// ones.
func sysctlSnapshot() map[string]string {
	snap := map[string]string{}
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
			snap[key] = strings.TrimSpace(string(b))
		}
		return nil
	})
	return snap
}

// sysctlChanges lists the entries present in both snapshots whose values
// differ (interfaces that came or went are not changes).
func sysctlChanges(before, after map[string]string) string {
	var lines []string
	for k, v := range before {
		if w, ok := after[k]; ok && w != v {
			lines = append(lines, fmt.Sprintf("  %s: %q before the tests, %q after", k, v, w))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
