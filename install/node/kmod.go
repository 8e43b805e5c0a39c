package node

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// moduleResult says whether gpuslice.ko is loaded (or, in a DestDir,
// assumed to be), and why not.
type moduleResult struct {
	ok     bool
	reason string
}

// moduleSources are the files of kmod/ that DKMS builds from (no tests,
// no guest, nothing built in place).
func moduleSources(kmod string) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := filepath.WalkDir(kmod, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(kmod, p)
		if d.IsDir() {
			if rel == "guest" {
				return filepath.SkipDir
			}
			return nil
		}
		base := filepath.Base(rel)
		if rel == "Kbuild" || rel == "Makefile" || rel == "dkms.conf" ||
			(strings.HasSuffix(base, ".c") && !strings.HasSuffix(base, ".mod.c")) || strings.HasSuffix(base, ".h") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = b
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if out["dkms.conf"] == nil || out["Kbuild"] == nil {
		return nil, fmt.Errorf("%s has no dkms.conf or Kbuild", kmod)
	}
	return out, nil
}

// dkmsName is PACKAGE_NAME and PACKAGE_VERSION of dkms.conf.
func dkmsName(conf []byte) (name, version string, err error) {
	name, version = dkmsValue(conf, "PACKAGE_NAME"), dkmsValue(conf, "PACKAGE_VERSION")
	if name == "" || version == "" {
		return "", "", fmt.Errorf("kmod/dkms.conf: PACKAGE_NAME or PACKAGE_VERSION missing")
	}
	return name, version, nil
}

// dkmsValue is key's value in dkms.conf (quoted or not), "" when unset.
func dkmsValue(conf []byte, key string) string {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + `="?([^"\n]+)"?`).FindSubmatch(conf)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// module installs the module's source for DKMS, has DKMS build and
// install it for the running kernel, loads it and names it for boot.
// Where any step fails it says why and returns !ok: the configuration
// then selects the no-module mode. On an upgrade a loaded module stays
// loaded: its vGPUs are those of running containers.
func (in *installer) module(upgrade bool) (moduleResult, error) {
	srcs, err := moduleSources(filepath.Join(in.Source, "kmod"))
	if err != nil {
		return moduleResult{}, err
	}
	name, version, err := dkmsName(srcs["dkms.conf"])
	if err != nil {
		return moduleResult{}, err
	}
	in.say("kernel module (%s/%s through DKMS):", name, version)
	dir := "/usr/src/" + name + "-" + version
	rels := make([]string, 0, len(srcs))
	for r := range srcs {
		rels = append(rels, r)
	}
	sort.Strings(rels)
	var all bytes.Buffer
	changed := 0
	for _, r := range rels {
		c, err := in.put(filepath.Join(dir, r), srcs[r], 0o644)
		if err != nil {
			return moduleResult{}, err
		}
		if c {
			changed++
		}
		fmt.Fprintf(&all, "%s %s\n", r, digest(srcs[r]))
	}
	in.say("  %d source files in %s (%d changed)", len(rels), in.host(dir), changed)
	sum := digest(all.Bytes())
	ref := name + "/" + version

	if in.NoModule {
		// A module an earlier install added stays DKMS's (and loaded)
		// until make uninstall.
		return in.noModule("NO_MODULE=1: the module's source is installed for later, DKMS is not run")
	}
	if in.sys == nil {
		in.say("  would run: dkms add %s (unless added), dkms install %s (unless installed for the running kernel)", ref, ref)
		in.say("  would run: modprobe %s (unless loaded: an upgrade leaves a loaded module alone)", name)
		if _, err := in.putReport("loads the module at boot", ModulesLoadPath, []byte(name+"\n"), 0o644); err != nil {
			return moduleResult{}, err
		}
		in.m.DKMS, in.m.ModuleSHA256 = ref, sum
		return moduleResult{ok: true}, nil
	}

	if !in.sys.Have("dkms") {
		return in.noModule("dkms is not installed (apt-get install dkms linux-headers-$(uname -r), then make install again)")
	}
	// A changed source under the same version: DKMS keeps the old
	// build until it is removed (which leaves a loaded module alone),
	// and is built again for every kernel it was built for.
	var rebuild []string
	if in.m.DKMS == ref && in.m.ModuleSHA256 != sum {
		out, _ := in.run("dkms", "status", ref)
		rebuild = dkmsKernels(out)
		in.runReport("dkms", "remove", ref, "--all")
		in.m.DKMS = ""
	}
	if out, _ := in.run("dkms", "status", ref); !strings.Contains(out, ref) && !strings.Contains(out, name+", "+version) {
		if _, err := in.run("dkms", "add", ref); err != nil {
			return in.noModule(err.Error())
		}
	}
	in.m.DKMS, in.m.ModuleSHA256 = ref, sum
	kver := in.sys.KernelRelease()
	in.rebuildOthers(ref, kver, rebuild)
	if !in.sys.Exists(filepath.Join("/lib/modules", kver, "build")) {
		return in.noModule(fmt.Sprintf("no kernel headers for the running kernel %s (apt-get install linux-headers-%s, then make install again; DKMS builds the module for kernels installed later)", kver, kver))
	}
	if out, _ := in.run("dkms", "status", ref, "-k", kver); !strings.Contains(out, "installed") {
		if _, err := in.run("dkms", "install", ref, "-k", kver); err != nil {
			return in.noModule("dkms could not build or install the module: " + err.Error())
		}
	}
	in.say("  built and installed for kernel %s", kver)
	if in.sys.Exists("/sys/module/" + name) {
		if upgrade {
			in.say("  already loaded: left loaded (its vGPUs belong to running containers; the new build loads at the next boot)")
		} else {
			in.say("  already loaded")
		}
	} else if _, err := in.run("modprobe", name); err != nil {
		return in.noModule("modprobe could not load it: " + err.Error() + in.sys.ModuleRefusal())
	} else {
		in.say("  loaded (modprobe %s)", name)
	}
	if _, err := in.putReport("loads the module at boot", ModulesLoadPath, []byte(name+"\n"), 0o644); err != nil {
		return moduleResult{}, err
	}
	return moduleResult{ok: true}, nil
}

// rebuildOthers builds the changed module for the kernels besides the
// running one that had it (their headers there): without it they would
// boot without the module until DKMS's autoinstall, where there is one,
// builds it. A failure is reported, not fatal: the running kernel's
// module is what this install loads.
func (in *installer) rebuildOthers(ref, running string, kernels []string) {
	for _, k := range kernels {
		if k == running {
			continue
		}
		if !in.sys.Exists(filepath.Join("/lib/modules", k, "build")) {
			in.say("  kernel %s: no headers, not built again (apt-get install linux-headers-%s, then make install again)", k, k)
			continue
		}
		if _, err := in.run("dkms", "install", ref, "-k", k); err != nil {
			in.say("  kernel %s: dkms could not build the new source: %v", k, err)
			continue
		}
		in.say("  built and installed for kernel %s too", k)
	}
}

// dkmsKernels are the kernels `dkms status` says a module is installed
// for: "gpuslice/1.0.0, 6.12.0-1-amd64, x86_64: installed" (DKMS 3) or
// "gpuslice, 1.0.0, 6.1.0-18-amd64, x86_64: installed" (DKMS 2).
func dkmsKernels(status string) []string {
	var ks []string
	for _, line := range strings.Split(status, "\n") {
		head, _, ok := strings.Cut(line, ": installed")
		if !ok {
			continue
		}
		f := strings.Split(head, ", ")
		if len(f) >= 3 {
			ks = append(ks, f[len(f)-2])
		}
	}
	return ks
}

// noModule reports why the module is not used.
func (in *installer) noModule(reason string) (moduleResult, error) {
	in.say("  NO MODULE: %s", reason)
	in.say("  gpuslice runs without it (enforcement: file: memory caps and compute shares by the shim's shared ledger)")
	return moduleResult{reason: reason}, nil
}

// Where the kernel tells its lockdown mode and the firmware Secure Boot.
const (
	lockdownFile  = "/sys/kernel/security/lockdown"
	secureBootVar = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-e398b5c6c4d8"
)

// secureBoot explains a refused module: kernel lockdown (the file names
// its modes, the one in force in brackets) or UEFI Secure Boot (the EFI
// variable: 4 bytes of attributes, then 1 when on), under either of which
// the kernel loads only signed modules. "" when neither.
func secureBoot(lockdown, efivar string) string {
	var why []string
	if b, err := os.ReadFile(lockdown); err == nil {
		if m := regexp.MustCompile(`\[(\w+)\]`).FindSubmatch(b); m != nil && string(m[1]) != "none" {
			why = append(why, "the kernel is locked down ("+string(m[1])+")")
		}
	}
	if b, err := os.ReadFile(efivar); err == nil && len(b) == 5 && b[4] == 1 {
		why = append(why, "UEFI Secure Boot is on")
	}
	if len(why) == 0 {
		return ""
	}
	return "; " + strings.Join(why, " and ") + ": the kernel loads only modules signed by a key it trusts " +
		"(DKMS signs with /var/lib/dkms/mok.pub: enroll it with mokutil --import /var/lib/dkms/mok.pub, reboot, and make install again)"
}
