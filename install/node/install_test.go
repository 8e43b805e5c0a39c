package node

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuslice/gpuslice/internal/e2e"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/pkg/state"
)

// adminContainerd is an administrator's containerd 2.x config: NRI off
// with settings of its own, a drop-in directory imported.
const adminContainerd = `version = 3
imports = ["conf.d/*.toml"]
[grpc]
  address = "/run/admin/containerd.sock"
[plugins."io.containerd.nri.v1.nri"]
  disable = true
  socket_path = "/run/admin-nri.sock"
  plugin_request_timeout = "7s"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "registry.example/pause:mine"
`

// want is one file the install must leave: mode, and its contents
// (nil: not checked here).
type want struct {
	mode os.FileMode
	data []byte
}

func read(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// moduleFiles are the module's sources as DKMS gets them.
func moduleFiles(t *testing.T) map[string]want {
	t.Helper()
	srcs, err := moduleSources(filepath.Join(testenv.Root(), "kmod"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]want{}
	for rel, b := range srcs {
		out[filepath.Join("usr/src/gpuslice-1.0.0", rel)] = want{0o644, b}
	}
	for _, must := range []string{"Kbuild", "Makefile", "dkms.conf", "gs_main.c", "core/gs_sched.c", "include/uapi/gpuslice.h"} {
		if _, ok := srcs[must]; !ok {
			t.Errorf("the module's sources lack %s", must)
		}
	}
	return out
}

func TestInstallIntoScratchRoot(t *testing.T) {
	e2e.Require(t) // root: every file must be root's
	root := testenv.Root()
	defaultConfig := read(t, filepath.Join(root, "install", "config.yaml"))
	for _, tc := range []struct {
		name   string
		prefix string
		major  int
		before map[string]string // the root's files before
		want   map[string]want   // the files the install adds
		unit   string            // the unit's ExecStart
	}{{
		name:  "an administrator's containerd 2.x config and an edited gpuslice config",
		major: 2,
		before: map[string]string{
			"etc/containerd/config.toml":         adminContainerd,
			"etc/containerd/conf.d/10-mine.toml": "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\"]\n  enable_selinux = false\n",
			"etc/gpuslice/config.yaml":           "policy: 4   # mine\n",
		},
		want: map[string]want{
			"usr/local/bin/gpuslice-nri":                 {0o755, read(t, filepath.Join(build, "bin", "gpuslice-nri"))},
			"usr/local/bin/gpuslice":                     {0o755, read(t, filepath.Join(build, "bin", "gpuslice"))},
			"usr/lib/gpuslice/libgpuslice.so":            {0o444, read(t, filepath.Join(build, "lib", "libgpuslice.so"))},
			"etc/systemd/system/gpuslice-nri.service":    {0o644, nil},
			"etc/containerd/conf.d/90-gpuslice-nri.toml": {0o644, nil},
			"etc/modules-load.d/gpuslice.conf":           {0o644, []byte("gpuslice\n")},
			"etc/gpuslice/config.yaml.default":           {0o644, defaultConfig},
			"var/lib/gpuslice-install/manifest.json":     {0o644, nil},
		},
		unit: "ExecStart=/usr/local/bin/gpuslice-nri -config /etc/gpuslice/config.yaml -nri-socket /run/admin-nri.sock",
	}, {
		name:   "PREFIX /opt/gpuslice, no containerd config (1.7)",
		prefix: "/opt/gpuslice",
		major:  1,
		want: map[string]want{
			"opt/gpuslice/bin/gpuslice-nri":              {0o755, read(t, filepath.Join(build, "bin", "gpuslice-nri"))},
			"opt/gpuslice/bin/gpuslice":                  {0o755, read(t, filepath.Join(build, "bin", "gpuslice"))},
			"usr/lib/gpuslice/libgpuslice.so":            {0o444, read(t, filepath.Join(build, "lib", "libgpuslice.so"))},
			"etc/systemd/system/gpuslice-nri.service":    {0o644, nil},
			"etc/containerd/config.toml":                 {0o644, nil},
			"etc/containerd/conf.d/90-gpuslice-nri.toml": {0o644, nil},
			"etc/modules-load.d/gpuslice.conf":           {0o644, []byte("gpuslice\n")},
			"etc/gpuslice/config.yaml":                   {0o644, defaultConfig},
			"var/lib/gpuslice-install/manifest.json":     {0o644, nil},
		},
		unit: "ExecStart=/opt/gpuslice/bin/gpuslice-nri -config /etc/gpuslice/config.yaml\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dest := t.TempDir()
			writeFiles(t, dest, tc.before)
			before := tree(t, dest)
			o := options(dest, nil)
			o.Prefix, o.ContainerdMajor = tc.prefix, tc.major

			report := install(t, o)
			wants := moduleFiles(t)
			for p, w := range tc.want {
				wants[p] = w
			}
			checkFiles(t, dest, wants)
			if unit := string(read(t, filepath.Join(dest, UnitPath))); !strings.Contains(unit, tc.unit) {
				t.Errorf("the unit has no %q:\n%s", tc.unit, unit)
			}
			for p, text := range tc.before {
				if got := string(read(t, filepath.Join(dest, p))); got != text {
					t.Errorf("the install changed %s:\n%s", p, got)
				}
			}
			// Nothing but the wanted files (and directories for them).
			first := tree(t, dest)
			added, gone := diffLines(before, first)
			if len(gone) > 0 {
				t.Errorf("the install changed or removed: %v", gone)
			}
			for _, l := range added {
				p := strings.Fields(l)[0]
				if _, ok := wants[p]; !ok && !strings.HasPrefix(strings.Fields(l)[1], "d") {
					t.Errorf("the install added an unexpected %s", l)
				}
			}
			if !strings.Contains(report, "containerd MUST BE RESTARTED") {
				t.Errorf("the report does not say containerd must restart:\n%s", report)
			}

			// Again: nothing changes, and containerd needs no restart.
			report = install(t, o)
			if second := tree(t, dest); second != first {
				added, gone := diffLines(first, second)
				t.Errorf("the second install changed the root: added %v, gone %v", added, gone)
			}
			if !strings.Contains(report, "containerd needs no restart") || regexp.MustCompile(`(?m)^ +installed `).MatchString(report) {
				t.Errorf("the second install's report:\n%s", report)
			}

			uninstall(t, o)
			if after := tree(t, dest); after != before {
				added, gone := diffLines(before, after)
				t.Errorf("uninstall did not restore the root: left %v, lost %v", added, gone)
			}
		})
	}
}

// checkFiles checks each file's mode, owner (root) and contents.
func checkFiles(t *testing.T, dest string, wants map[string]want) {
	t.Helper()
	for p, w := range wants {
		fi, err := os.Lstat(filepath.Join(dest, p))
		if err != nil {
			t.Errorf("not installed: %s", p)
			continue
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != w.mode {
			t.Errorf("%s: mode %v, want a file of %04o", p, fi.Mode(), w.mode)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 {
			t.Errorf("%s: owned by %d:%d, want root", p, st.Uid, st.Gid)
		}
		if w.data != nil && !bytes.Equal(read(t, filepath.Join(dest, p)), w.data) {
			t.Errorf("%s: not the file it should be", p)
		}
	}
}

// TestUpgradeKeepsAgentState: an install over an older one (a new agent
// binary) restarts the agent only: the module is not unloaded or removed
// from DKMS, and the agent's state is left as it was.
func TestUpgradeKeepsAgentState(t *testing.T) {
	dest := t.TempDir()
	o := options(dest, nil)
	o.ContainerdMajor = 2
	install(t, o)
	s, err := state.Open(filepath.Join(dest, "var/lib/gpuslice"))
	if err != nil {
		t.Fatal(err)
	}
	a := state.Allocation{Container: "c1", Namespace: "ml", Pod: "train", Name: "main",
		VGPUs: []state.VGPU{{MemoryBytes: 1 << 30, KmodID: 3}}}
	if err := s.Put(a); err != nil {
		t.Fatal(err)
	}
	s.Close()
	stateBefore := tree(t, filepath.Join(dest, "var/lib/gpuslice"))

	// The next release: another agent binary (a byte more is enough).
	next := t.TempDir()
	for _, f := range []string{"bin/gpuslice", "lib/libgpuslice.so"} {
		if err := copyFile(filepath.Join(build, f), filepath.Join(next, f)); err != nil {
			t.Fatal(err)
		}
	}
	agent := append(read(t, filepath.Join(build, "bin/gpuslice-nri")), 0)
	writeFiles(t, next, map[string]string{"bin/gpuslice-nri": string(agent)})
	o.Build = next
	report := install(t, o)

	if !strings.Contains(report, "would run: systemctl restart gpuslice-nri.service") {
		t.Errorf("the upgrade does not restart the agent:\n%s", report)
	}
	for _, never := range []string{"modprobe -r", "dkms remove", "systemctl stop", "disable"} {
		if strings.Contains(report, never) {
			t.Errorf("the upgrade runs %q:\n%s", never, report)
		}
	}
	if after := tree(t, filepath.Join(dest, "var/lib/gpuslice")); after != stateBefore {
		t.Errorf("the upgrade changed the agent's state:\n%s\nwas:\n%s", after, stateBefore)
	}
	allocs, err := state.Read(filepath.Join(dest, "var/lib/gpuslice"))
	if err != nil || len(allocs) != 1 || allocs["c1"].VGPUs[0].KmodID != 3 {
		t.Errorf("the state after the upgrade: %v, %v", allocs, err)
	}
	if got := read(t, filepath.Join(dest, "usr/local/bin/gpuslice-nri")); !bytes.Equal(got, agent) {
		t.Error("the upgrade did not install the new agent")
	}
}
