package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// source is a copy of the repository's install/ and kmod/ whose default
// config.yaml a test can change (a new release's default).
func source(t *testing.T) (dir string, setDefault func(extra string)) {
	t.Helper()
	dir = t.TempDir()
	root := testenv.Root()
	def := read(t, filepath.Join(root, "install", "config.yaml"))
	files := map[string]string{"install/gpuslice-nri.service": string(read(t, filepath.Join(root, "install", "gpuslice-nri.service")))}
	srcs, err := moduleSources(filepath.Join(root, "kmod"))
	if err != nil {
		t.Fatal(err)
	}
	for rel, b := range srcs {
		files[filepath.Join("kmod", rel)] = string(b)
	}
	writeFiles(t, dir, files)
	setDefault = func(extra string) {
		writeFiles(t, dir, map[string]string{"install/config.yaml": string(def) + extra})
	}
	setDefault("")
	return dir, setDefault
}

// TestConfigNeverOverwritten: an unedited default follows the new
// default; an edited one is kept, the new default beside it, through
// installs and the uninstall.
func TestConfigNeverOverwritten(t *testing.T) {
	dest := t.TempDir()
	src, setDefault := source(t)
	o := options(dest, nil)
	o.Source, o.ContainerdMajor = src, 2
	cfg, dflt := filepath.Join(dest, ConfigPath), filepath.Join(dest, ConfigPath+".default")
	defaultNow := func() string { return string(read(t, filepath.Join(src, "install", "config.yaml"))) }
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }

	for _, step := range []struct {
		name       string
		do         func()
		config     func() string // what config.yaml must hold after the install
		withDflt   bool          // a config.yaml.default beside it
		reportSays string
	}{
		{"first install: the default", func() {}, defaultNow, false, "installed"},
		{"a new default, the file unedited: updated", func() { setDefault("# release 2\n") }, defaultNow, false, "installed"},
		{"the administrator edits it: kept", func() {
			writeFiles(t, dest, map[string]string{ConfigPath: "policy: 4   # mine\n"})
		}, func() string { return "policy: 4   # mine\n" }, true, "kept"},
		{"another new default: still kept, the newest beside it", func() { setDefault("# release 3\n") },
			func() string { return "policy: 4   # mine\n" }, true, "kept"},
	} {
		step.do()
		report := install(t, o)
		if got := string(read(t, cfg)); got != step.config() {
			t.Fatalf("%s: config.yaml holds\n%s\nwant\n%s\nreport:\n%s", step.name, got, step.config(), report)
		}
		if exists(dflt) != step.withDflt {
			t.Errorf("%s: config.yaml.default exists: %v, want %v", step.name, exists(dflt), step.withDflt)
		}
		if step.withDflt && string(read(t, dflt)) != defaultNow() {
			t.Errorf("%s: config.yaml.default is not the new default", step.name)
		}
		if !strings.Contains(report, step.reportSays+" ") || !strings.Contains(report, cfg) {
			t.Errorf("%s: the report does not say %q of %s:\n%s", step.name, step.reportSays, cfg, report)
		}
	}

	report := uninstall(t, o)
	if got := string(read(t, cfg)); got != "policy: 4   # mine\n" {
		t.Errorf("uninstall changed the edited config: %q", got)
	}
	if exists(dflt) {
		t.Errorf("uninstall left %s", dflt)
	}
	if !strings.Contains(report, "kept      "+cfg+"  (edited") {
		t.Errorf("uninstall does not say it kept the edited config:\n%s", report)
	}
	if entries, _ := os.ReadDir(filepath.Dir(cfg)); len(entries) != 1 {
		t.Errorf("/etc/gpuslice after uninstall holds %v, want only config.yaml", entries)
	}
}

// TestUnitVerifies: the installed unit passes systemd-analyze verify
// (Debian's systemd), with no warning at all: verify exits 0 on keys it
// ignores, so its output must be empty too.
func TestUnitVerifies(t *testing.T) {
	need(t, "systemd")
	dest := t.TempDir()
	o := options(dest, nil)
	o.ContainerdMajor = 2
	install(t, o)
	// verify looks ExecStart's binary up on this machine: point it at the
	// one installed in the scratch root.
	unit := strings.ReplaceAll(string(read(t, filepath.Join(dest, UnitPath))),
		"ExecStart=/usr/local/bin/", "ExecStart="+dest+"/usr/local/bin/")
	dir := t.TempDir()
	path := filepath.Join(dir, "gpuslice-nri.service")
	writeFiles(t, dir, map[string]string{"gpuslice-nri.service": unit})
	out, err := command("systemd-analyze", "verify", path)
	if err != nil || out != "" {
		t.Fatalf("systemd-analyze verify %s: %v\n%s\nthe unit:\n%s", path, err, out, unit)
	}
	for _, line := range []string{"Restart=on-failure", "After=containerd.service", "WantedBy=multi-user.target"} {
		if !strings.Contains(unit, "\n"+line+"\n") {
			t.Errorf("the unit has no %s line", line)
		}
	}
}
