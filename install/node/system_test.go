package node

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/pkg/config"
)

// fakeSystem is a node for the installer's commands: dkms with its added
// and installed modules, the kernel's loaded modules, systemd. It records
// every command line run.
type fakeSystem struct {
	dkms, headers bool
	// modprobeError, when not "", is what modprobe says refusing to load
	// the module; refusal what the node's lockdown and EFI files say.
	modprobeError, refusal string
	loaded                 bool
	added, installed       bool
	ran                    []string
	// containerd is what `containerd --version` says ("": 2.1).
	containerd string
	// others: kernels besides the running one, with the module built
	// and installed for them (true) or not; noHeaders: of those, the
	// ones without headers.
	others, noHeaders map[string]bool
}

const fakeKernel = "6.12.0-test-amd64"

func (f *fakeSystem) Run(name string, args ...string) (string, error) {
	line := name + " " + strings.Join(args, " ")
	f.ran = append(f.ran, line)
	switch {
	case line == "dkms status gpuslice/1.0.0":
		if !f.added {
			return "", nil
		}
		out := ""
		if f.installed {
			out += "gpuslice/1.0.0, " + fakeKernel + ", x86_64: installed\n"
		}
		for k, in := range f.others {
			if in {
				out += "gpuslice/1.0.0, " + k + ", x86_64: installed\n"
			}
		}
		if out == "" {
			out = "gpuslice/1.0.0: added\n"
		}
		return out, nil
	case strings.HasPrefix(line, "dkms install gpuslice/1.0.0 -k ") && f.others != nil &&
		line != "dkms install gpuslice/1.0.0 -k "+fakeKernel:
		f.others[strings.TrimPrefix(line, "dkms install gpuslice/1.0.0 -k ")] = true
	case line == "dkms status gpuslice/1.0.0 -k "+fakeKernel:
		if f.installed {
			return "gpuslice/1.0.0, " + fakeKernel + ", x86_64: installed\n", nil
		}
		return "", nil
	case line == "dkms add gpuslice/1.0.0":
		f.added = true
	case line == "dkms install gpuslice/1.0.0 -k "+fakeKernel:
		f.installed = true
	case line == "dkms remove gpuslice/1.0.0 --all":
		f.added, f.installed = false, false
		for k := range f.others {
			f.others[k] = false
		}
	case line == "modprobe gpuslice":
		if f.modprobeError != "" {
			return f.modprobeError + "\n", errors.New("exit status 1")
		}
		f.loaded = true
	case line == "modprobe -r gpuslice":
		f.loaded = false
	}
	return "", nil
}

func (f *fakeSystem) Have(name string) bool { return name != "dkms" || f.dkms }

func (f *fakeSystem) Exists(path string) bool {
	switch path {
	case "/lib/modules/" + fakeKernel + "/build":
		return f.headers
	case "/sys/module/gpuslice":
		return f.loaded
	}
	if k, ok := strings.CutPrefix(path, "/lib/modules/"); ok {
		k = strings.TrimSuffix(k, "/build")
		_, other := f.others[k]
		return other && !f.noHeaders[k]
	}
	return false
}

func (f *fakeSystem) KernelRelease() string { return fakeKernel }
func (f *fakeSystem) SystemdRunning() bool  { return true }
func (f *fakeSystem) ContainerdVersion() (major, minor int) {
	if f.containerd == "" {
		return 2, 1
	}
	return parseContainerdVersion("containerd github.com/containerd/containerd v" + f.containerd + ".0 abc")
}
func (f *fakeSystem) ModuleRefusal() string { return f.refusal }

// ranSince are the commands run from the i-th on.
func (f *fakeSystem) ranSince(i int) []string { return append([]string(nil), f.ran[i:]...) }

// inOrder says whether want are among got, in that order.
func inOrder(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// TestModuleOnNode: on a node (its commands faked), the module is built by
// DKMS, loaded now and named for boot; run again, nothing is redone; the
// uninstall stops the agent, unloads the module and has DKMS forget it.
// Where DKMS, the headers or the kernel's consent are missing, the install
// says why and configures the no-module mode.
func TestModuleOnNode(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"lockdown": "[none] integrity confidentiality\n", "SecureBoot": "\x06\x00\x00\x00\x01"})
	secureBootOn := secureBoot(filepath.Join(dir, "lockdown"), filepath.Join(dir, "SecureBoot"))

	for _, tc := range []struct {
		name   string
		sys    *fakeSystem
		module bool     // loaded, named for boot, enforcement auto
		says   []string // in the report
	}{{
		name:   "DKMS and the headers there",
		sys:    &fakeSystem{dkms: true, headers: true},
		module: true,
		says:   []string{"built and installed for kernel " + fakeKernel, "loaded (modprobe gpuslice)"},
	}, {
		name: "no dkms",
		sys:  &fakeSystem{headers: true},
		says: []string{"NO MODULE: dkms is not installed"},
	}, {
		name: "no headers for the running kernel",
		sys:  &fakeSystem{dkms: true},
		says: []string{"NO MODULE: no kernel headers for the running kernel " + fakeKernel, "linux-headers-" + fakeKernel},
	}, {
		name: "Secure Boot refuses the unsigned module",
		sys: &fakeSystem{dkms: true, headers: true, refusal: secureBootOn,
			modprobeError: "modprobe: ERROR: could not insert 'gpuslice': Key was rejected by service"},
		says: []string{"NO MODULE: modprobe could not load it", "Key was rejected by service", "UEFI Secure Boot is on", "mokutil --import"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dest := t.TempDir()
			before := tree(t, dest)
			o := options(dest, nil)
			o.ContainerdMajor, o.sys = 2, tc.sys
			report := install(t, o)
			for _, s := range tc.says {
				if !strings.Contains(report, s) {
					t.Errorf("the report does not say %q:\n%s", s, report)
				}
			}
			cfg, err := config.Parse(read(t, filepath.Join(dest, ConfigPath)))
			if err != nil {
				t.Fatal(err)
			}
			_, bootErr := os.Stat(filepath.Join(dest, ModulesLoadPath))
			if tc.module {
				if cfg.Enforcement != config.EnforcementAuto || bootErr != nil || !tc.sys.loaded || !tc.sys.installed {
					t.Errorf("with the module: enforcement %q, %s: %v, loaded %v, DKMS installed %v; want auto, there, loaded, installed",
						cfg.Enforcement, ModulesLoadPath, bootErr, tc.sys.loaded, tc.sys.installed)
				}
				for _, want := range [][]string{
					{"dkms add gpuslice/1.0.0", "dkms install gpuslice/1.0.0 -k " + fakeKernel, "modprobe gpuslice"},
					{"systemctl daemon-reload", "systemctl enable --now gpuslice-nri.service"},
				} {
					if !inOrder(tc.sys.ran, want) {
						t.Errorf("the install ran %q, want %q in that order", tc.sys.ran, want)
					}
				}
			} else {
				if cfg.Enforcement != config.EnforcementFile || bootErr == nil || tc.sys.loaded {
					t.Errorf("without the module: enforcement %q, %s there: %v, loaded %v; want file, absent, not loaded",
						cfg.Enforcement, ModulesLoadPath, bootErr == nil, tc.sys.loaded)
				}
				if !strings.Contains(report, "NO MODULE") || !strings.Contains(string(read(t, filepath.Join(dest, ConfigPath))), "set by make install") {
					t.Errorf("the config does not say why it is in file mode:\n%s", read(t, filepath.Join(dest, ConfigPath)))
				}
			}

			// Again: nothing rebuilt or loaded again, the agent not
			// restarted (a module the kernel refused is tried again: a
			// key enrolled since lets it load).
			n := len(tc.sys.ran)
			install(t, o)
			for _, l := range tc.sys.ranSince(n) {
				if (tc.sys.installed && (strings.HasPrefix(l, "dkms add") || strings.HasPrefix(l, "dkms install"))) ||
					strings.HasPrefix(l, "dkms remove") || strings.HasPrefix(l, "modprobe -r") ||
					(tc.module && strings.HasPrefix(l, "modprobe")) || strings.Contains(l, "restart") {
					t.Errorf("the second install ran %q", l)
				}
			}

			n = len(tc.sys.ran)
			uninstall(t, o)
			ran := tc.sys.ranSince(n)
			want := []string{"systemctl disable --now gpuslice-nri.service"}
			if tc.sys.dkms {
				if tc.module {
					want = append(want, "modprobe -r gpuslice")
				}
				want = append(want, "dkms remove gpuslice/1.0.0 --all")
			}
			want = append(want, "systemctl daemon-reload")
			if !inOrder(ran, want) {
				t.Errorf("the uninstall ran %q, want %q in that order", ran, want)
			}
			if tc.sys.loaded || tc.sys.added {
				t.Errorf("after the uninstall: loaded %v, DKMS has it %v", tc.sys.loaded, tc.sys.added)
			}
			if !tc.module && slices.Contains(ran, "modprobe -r gpuslice") {
				t.Errorf("the uninstall unloads a module that is not loaded: %q", ran)
			}
			if after := tree(t, dest); after != before {
				added, gone := diffLines(before, after)
				t.Errorf("uninstall did not restore the root: left %v, lost %v", added, gone)
			}
		})
	}
}

// TestModuleUpgradeLeavesItLoaded: an upgrade on a node with the module
// loaded restarts the agent only; the module (its vGPUs are running
// containers') is neither unloaded nor loaded again.
func TestModuleUpgradeLeavesItLoaded(t *testing.T) {
	dest := t.TempDir()
	sys := &fakeSystem{dkms: true, headers: true}
	o := options(dest, nil)
	o.ContainerdMajor, o.sys = 2, sys
	install(t, o)

	next := t.TempDir()
	for _, f := range []string{"bin/gpuslice", "lib/libgpuslice.so"} {
		if err := copyFile(filepath.Join(build, f), filepath.Join(next, f)); err != nil {
			t.Fatal(err)
		}
	}
	writeFiles(t, next, map[string]string{"bin/gpuslice-nri": string(append(read(t, filepath.Join(build, "bin/gpuslice-nri")), 0))})
	o.Build = next
	n := len(sys.ran)
	report := install(t, o)
	ran := sys.ranSince(n)
	if !slices.Contains(ran, "systemctl restart gpuslice-nri.service") || !strings.Contains(report, "already loaded: left loaded") {
		t.Errorf("the upgrade ran %q, want the agent restarted and the module left loaded:\n%s", ran, report)
	}
	for _, l := range ran {
		if strings.HasPrefix(l, "modprobe") || strings.HasPrefix(l, "dkms remove") || strings.Contains(l, "disable") || strings.Contains(l, "stop") {
			t.Errorf("the upgrade ran %q", l)
		}
	}
	if !sys.loaded {
		t.Error("the upgrade unloaded the module")
	}
}

func TestParseContainerdVersion(t *testing.T) {
	for _, tc := range []struct {
		out          string
		major, minor int
	}{
		{"containerd github.com/containerd/containerd v1.6.20 2806fc1057397dbaeefbea0e4e17bddfbd388f38\n", 1, 6},
		{"containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da\n", 1, 7},
		{"containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7193e4e490e9fbdc236c0e811ccaba3376\n", 2, 1},
		{"containerd github.com/containerd/containerd v1.10.0 abc\n", 1, 10},
		{"containerd: command not found\n", 0, 0},
	} {
		major, minor := parseContainerdVersion(tc.out)
		if major != tc.major || minor != tc.minor {
			t.Errorf("%q: %d.%d, want %d.%d", tc.out, major, minor, tc.major, tc.minor)
		}
	}
}

// A containerd without NRI (before 1.7) stops the install before it
// writes anything: gpuslice-nri could never connect to it.
func TestInstallRefusesContainerdWithoutNRI(t *testing.T) {
	for _, tc := range []struct {
		version string
		refused bool
	}{{"1.6", true}, {"1.5", true}, {"1.7", false}, {"2.1", false}} {
		t.Run(tc.version, func(t *testing.T) {
			dest := t.TempDir()
			before := tree(t, dest)
			o := options(dest, nil)
			var out strings.Builder
			o.Out, o.sys = &out, &fakeSystem{dkms: true, headers: true, containerd: tc.version}
			err := Install(o)
			if !tc.refused {
				if err != nil {
					t.Fatalf("containerd %s: %v\n%s", tc.version, err, out.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "containerd "+tc.version+" has no NRI") ||
				!strings.Contains(err.Error(), "upgrade containerd to 1.7") {
				t.Fatalf("containerd %s: %v, want a refusal naming the version and the fix\n%s", tc.version, err, out.String())
			}
			if after := tree(t, dest); after != before {
				t.Errorf("containerd %s: the refused install wrote:\n%s", tc.version, after)
			}
		})
	}
}

// A changed module source under the same version is built again for every
// kernel DKMS had built it for, not only the running one: otherwise those
// kernels boot without the module (until DKMS's autoinstall, where there
// is one). One without headers is named.
func TestModuleSourceChangeRebuildsEveryKernel(t *testing.T) {
	dest := t.TempDir()
	sys := &fakeSystem{dkms: true, headers: true,
		others:    map[string]bool{"6.1.0-old-amd64": true, "6.9.0-gone-amd64": true},
		noHeaders: map[string]bool{"6.9.0-gone-amd64": true}}
	o := options(dest, nil)
	o.ContainerdMajor, o.sys = 2, sys
	install(t, o)

	// The same version, another source.
	mpath := filepath.Join(dest, ManifestPath)
	var m map[string]any
	if err := json.Unmarshal(read(t, mpath), &m); err != nil {
		t.Fatal(err)
	}
	m["moduleSHA256"] = "a changed source"
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dest, map[string]string{ManifestPath: string(b)})
	n := len(sys.ran)
	report := install(t, o)
	ran := sys.ranSince(n)
	want := []string{"dkms remove gpuslice/1.0.0 --all", "dkms add gpuslice/1.0.0",
		"dkms install gpuslice/1.0.0 -k 6.1.0-old-amd64", "dkms install gpuslice/1.0.0 -k " + fakeKernel}
	if !inOrder(ran, want) {
		t.Errorf("ran %q, want %q in order", ran, want)
	}
	if slices.Contains(ran, "dkms install gpuslice/1.0.0 -k 6.9.0-gone-amd64") {
		t.Errorf("built for a kernel without headers: %q", ran)
	}
	for _, s := range []string{"built and installed for kernel 6.1.0-old-amd64 too", "kernel 6.9.0-gone-amd64: no headers"} {
		if !strings.Contains(report, s) {
			t.Errorf("the report does not say %q:\n%s", s, report)
		}
	}
}
