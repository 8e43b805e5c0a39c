package node

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/pkg/config"
)

// headersVersion is the newest Debian kernel whose headers are installed
// (kmod/guest/deps.sh installs them; GSGUEST_KVER picks another, as for
// the guest test).
func headersVersion(t *testing.T) string {
	t.Helper()
	if v := os.Getenv("GSGUEST_KVER"); v != "" {
		return v
	}
	dirs, _ := filepath.Glob("/usr/src/linux-headers-*-amd64")
	var vers []string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "Makefile")); err == nil {
			vers = append(vers, strings.TrimPrefix(filepath.Base(d), "linux-headers-"))
		}
	}
	if len(vers) == 0 {
		t.Fatal("no Debian kernel headers in /usr/src (kmod/guest/deps.sh installs them)")
	}
	sort.Strings(vers)
	return vers[len(vers)-1]
}

// TestDKMSBuild: DKMS builds gpuslice.ko from the source tree make install
// leaves in /usr/src, against Debian's kernel headers, in a scratch DKMS
// tree (and a scratch signing key), so the host's DKMS is not touched.
func TestDKMSBuild(t *testing.T) {
	if os.Getenv("GPUSLICE_SKIP_GUEST") == "1" {
		t.Skip("GPUSLICE_SKIP_GUEST=1: no kernel-module build")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the DKMS build installs dkms and kernel headers and needs root; set GPUSLICE_SKIP_GUEST=1 to skip it")
	}
	if out, err := command(filepath.Join(testenv.Root(), "kmod", "guest", "deps.sh")); err != nil {
		t.Fatalf("kmod/guest/deps.sh: %v\n%s", err, out)
	}
	need(t, "dkms")
	kver := headersVersion(t)

	dest := t.TempDir()
	o := options(dest, nil)
	o.ContainerdMajor = 2
	install(t, o)
	srcs, _ := moduleSources(filepath.Join(testenv.Root(), "kmod"))
	_, version, err := dkmsName(srcs["dkms.conf"])
	if err != nil {
		t.Fatal(err)
	}

	hostDKMS := listDir("/var/lib/dkms")
	scratch := t.TempDir()
	tree := filepath.Join(scratch, "dkms")
	if err := os.Mkdir(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	where := []string{"-m", "gpuslice", "-v", version, "--dkmstree", tree, "--sourcetree", filepath.Join(dest, "usr/src")}
	if out, err := command("dkms", append([]string{"add"}, where...)...); err != nil {
		t.Fatalf("dkms add: %v\n%s", err, out)
	}
	// DKMS signs what it builds, with a key it makes if there is none:
	// a scratch one, not the host's /var/lib/dkms/mok.key.
	build := append([]string{"build", "-k", kver, "--kernelsourcedir", "/usr/src/linux-headers-" + kver}, where...)
	cmd := dkmsCommand(build, filepath.Join(scratch, "mok.key"), filepath.Join(scratch, "mok.pub"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dkms build against %s: %v\n%s", kver, err, out)
	}
	ko, _ := filepath.Glob(filepath.Join(tree, "gpuslice", version, kver, "*", "module", "gpuslice.ko*"))
	if len(ko) != 1 {
		t.Fatalf("dkms build made %v, want one gpuslice.ko", ko)
	}
	// The module's own version is the DKMS package's (kmod/dkms.conf
	// says to keep them equal).
	if out, err := command("modinfo", "-F", "version", ko[0]); err != nil || strings.TrimSpace(out) != version {
		t.Errorf("modinfo -F version %s: %q %v, want %s", ko[0], out, err, version)
	}
	if after := listDir("/var/lib/dkms"); strings.Join(after, " ") != strings.Join(hostDKMS, " ") {
		t.Errorf("the build changed the host's /var/lib/dkms: %v, was %v", after, hostDKMS)
	}
}

func listDir(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// dkmsCommand runs dkms with its signing key and certificate elsewhere
// (dkms reads mok_signing_key and mok_certificate from its environment
// when /etc/dkms/framework.conf does not set them).
func dkmsCommand(args []string, key, cert string) *exec.Cmd {
	cmd := exec.Command("dkms", args...)
	cmd.Env = append(withoutMake(os.Environ()), "mok_signing_key="+key, "mok_certificate="+cert)
	return cmd
}

func TestSecureBoot(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lockdown string // "" no such file
		efivar   []byte // nil no such variable
		want     []string
	}{
		{"neither", "[none] integrity confidentiality\n", []byte{6, 0, 0, 0, 0}, nil},
		{"no securityfs, no EFI", "", nil, nil},
		{"lockdown integrity", "none [integrity] confidentiality\n", nil, []string{"locked down (integrity)", "signed"}},
		{"Secure Boot on", "[none] integrity confidentiality\n", []byte{6, 0, 0, 0, 1}, []string{"UEFI Secure Boot is on", "mokutil --import"}},
		{"both", "none integrity [confidentiality]\n", []byte{6, 0, 0, 0, 1}, []string{"(confidentiality) and UEFI Secure Boot is on"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			lockdown, efivar := filepath.Join(dir, "lockdown"), filepath.Join(dir, "SecureBoot")
			if tc.lockdown != "" {
				writeFiles(t, dir, map[string]string{"lockdown": tc.lockdown})
			}
			if tc.efivar != nil {
				writeFiles(t, dir, map[string]string{"SecureBoot": string(tc.efivar)})
			}
			got := secureBoot(lockdown, efivar)
			if (got == "") != (tc.want == nil) {
				t.Fatalf("secureBoot = %q, want one with %q", got, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("secureBoot = %q, lacks %q", got, w)
				}
			}
		})
	}
}

// TestNoModule: without the module (NO_MODULE=1 here; no dkms, no
// headers or a refused modprobe on a node) the default configuration
// says enforcement: file, and nothing loads the module at boot.
func TestNoModule(t *testing.T) {
	dest := t.TempDir()
	o := options(dest, nil)
	o.ContainerdMajor, o.NoModule = 2, true
	report := install(t, o)
	cfg, err := config.Parse(read(t, filepath.Join(dest, ConfigPath)))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Enforcement != config.EnforcementFile {
		t.Errorf("enforcement %q without the module, want file", cfg.Enforcement)
	}
	if !strings.Contains(report, "NO MODULE: NO_MODULE=1") || strings.Contains(report, "modprobe") {
		t.Errorf("the report:\n%s", report)
	}
	if _, err := os.Stat(filepath.Join(dest, ModulesLoadPath)); err == nil {
		t.Errorf("%s installed without the module", ModulesLoadPath)
	}
	// With the module again: the unedited config goes back to auto.
	o.NoModule = false
	install(t, o)
	if cfg, _ := config.Parse(read(t, filepath.Join(dest, ConfigPath))); cfg.Enforcement != config.EnforcementAuto {
		t.Errorf("enforcement %q with the module back, want auto", cfg.Enforcement)
	}
}

// TestDKMSConf: kmod/dkms.conf has DKMS rebuild the module for every
// kernel installed later (AUTOINSTALL, which the kernel packages' DKMS
// hook builds), the module it names is the one Kbuild makes and the boot
// file loads, and its version is the module's own.
func TestDKMSConf(t *testing.T) {
	kmod := filepath.Join(testenv.Root(), "kmod")
	conf := read(t, filepath.Join(kmod, "dkms.conf"))
	name, version, err := dkmsName(conf)
	if err != nil {
		t.Fatal(err)
	}
	if v := dkmsValue(conf, "AUTOINSTALL"); v != "yes" {
		t.Errorf("dkms.conf: AUTOINSTALL=%q, want yes (else a kernel upgrade boots without gpuslice.ko)", v)
	}
	if m := dkmsValue(conf, "BUILT_MODULE_NAME[0]"); m != name || !regexp.MustCompile(`(?m)^obj-m\s*:?=\s*`+regexp.QuoteMeta(name)+`\.o\s*$`).Match(read(t, filepath.Join(kmod, "Kbuild"))) {
		t.Errorf("dkms.conf: BUILT_MODULE_NAME[0]=%q, PACKAGE_NAME=%q; want both the module Kbuild builds (obj-m), which %s loads", m, name, ModulesLoadPath)
	}
	kv := ""
	if m := regexp.MustCompile(`(?m)^#define GS_MODULE_VERSION "([^"]+)"`).FindSubmatch(read(t, filepath.Join(kmod, "gs_kmod.h"))); m != nil {
		kv = string(m[1])
	}
	if kv != version {
		t.Errorf("dkms.conf: PACKAGE_VERSION=%q, gs_kmod.h's GS_MODULE_VERSION %q; want them equal", version, kv)
	}
}
