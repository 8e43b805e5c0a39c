package node

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/pkg/config"
)

// makeTarget runs the repository's make with target and the variables,
// the build directory the test's (-o build: make build is not redone),
// and returns its output.
func makeTarget(t *testing.T, bld, target string, vars ...string) string {
	t.Helper()
	args := append([]string{"-C", testenv.Root(), "-o", "build", target, "BUILD=" + bld}, vars...)
	cmd := exec.Command("make", args...)
	// Not a make of ours above: its flags (-n, -k...) would reach this one.
	cmd.Env = withoutMake(os.Environ())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestMakeInstall: make install and make uninstall themselves, as an
// administrator or a packager runs them: DESTDIR is the root the files go
// under, PREFIX where the binaries go (and what the unit starts), and the
// other variables reach the installer.
func TestMakeInstall(t *testing.T) {
	bld := t.TempDir()
	for _, f := range []string{"bin/gpuslice-nri", "bin/gpuslice", "lib/libgpuslice.so"} {
		if err := copyFile(filepath.Join(build, f), filepath.Join(bld, f)); err != nil {
			t.Fatal(err)
		}
	}
	dest := t.TempDir()
	writeFiles(t, dest, map[string]string{"etc/containerd/mine.toml": adminContainerd})
	before := tree(t, dest)

	vars := []string{"DESTDIR=" + dest, "PREFIX=/opt/gpuslice", "NO_MODULE=1",
		"CONTAINERD_CONFIG=/etc/containerd/mine.toml", "CONTAINERD_VERSION=2"}
	// First only printed: a make install that lost DESTDIR would install
	// on the machine running the test.
	for _, target := range []string{"install", "uninstall"} {
		if n := makeTarget(t, bld, target, append([]string{"-n"}, vars...)...); !strings.Contains(n, `-destdir "`+dest+`"`) {
			t.Fatalf("make -n %s DESTDIR=%s does not pass it on:\n%s", target, dest, n)
		}
	}
	report := makeTarget(t, bld, "install", vars...)
	for p, mode := range map[string]os.FileMode{
		"opt/gpuslice/bin/gpuslice-nri":              0o755,
		"opt/gpuslice/bin/gpuslice":                  0o755,
		"usr/lib/gpuslice/libgpuslice.so":            0o444,
		"etc/systemd/system/gpuslice-nri.service":    0o644,
		"etc/containerd/conf.d/90-gpuslice-nri.toml": 0o644,
		"etc/gpuslice/config.yaml":                   0o644,
	} {
		fi, err := os.Stat(filepath.Join(dest, p))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("make install DESTDIR PREFIX: %s: %v, %v; want a file of %04o", p, fi, err, mode)
		}
	}
	for _, p := range []string{"usr/local/bin/gpuslice-nri", "etc/modules-load.d/gpuslice.conf"} {
		if _, err := os.Stat(filepath.Join(dest, p)); err == nil {
			t.Errorf("make install PREFIX=/opt/gpuslice NO_MODULE=1 installed %s", p)
		}
	}
	unit := string(read(t, filepath.Join(dest, UnitPath)))
	if !strings.Contains(unit, "\nExecStart=/opt/gpuslice/bin/gpuslice-nri -config /etc/gpuslice/config.yaml -nri-socket /run/admin-nri.sock\n") {
		t.Errorf("the unit does not start PREFIX's agent on CONTAINERD_CONFIG's socket:\n%s", unit)
	}
	if cfg, err := config.Parse(read(t, filepath.Join(dest, ConfigPath))); err != nil || cfg.Enforcement != config.EnforcementFile {
		t.Errorf("NO_MODULE=1: enforcement %q (%v), want file", cfg.Enforcement, err)
	}
	if !strings.Contains(report, "containerd (2.x)") || !strings.Contains(report, "containerd MUST BE RESTARTED") {
		t.Errorf("make install's report:\n%s", report)
	}

	first := tree(t, dest)
	makeTarget(t, bld, "install", vars...)
	if second := tree(t, dest); second != first {
		added, gone := diffLines(first, second)
		t.Errorf("a second make install changed the root: added %v, gone %v", added, gone)
	}

	makeTarget(t, bld, "uninstall", "DESTDIR="+dest)
	if after := tree(t, dest); after != before {
		added, gone := diffLines(before, after)
		t.Errorf("make uninstall DESTDIR did not restore the root: left %v, lost %v", added, gone)
	}
}
