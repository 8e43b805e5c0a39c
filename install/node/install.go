package node

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/pkg/config"
	"github.com/gpuslice/gpuslice/pkg/shimfile"
)

// Install installs gpuslice on the node (or into o.DestDir) and reports
// what it changed to o.Out. Run again, it changes nothing that is in
// place; over an older install it is the upgrade: the shim is replaced by
// rename, the agent restarted, and the loaded module and the agent's
// state are left alone.
func Install(o Options) error {
	in, err := newInstaller(o)
	if err != nil {
		return err
	}
	major, err := in.containerdMajor()
	if err != nil {
		return err
	}
	upgrade := len(in.m.Files) > 0
	if in.live {
		in.say("gpuslice: installing on this node")
	} else {
		in.say("gpuslice: installing into %s (DESTDIR: the running system is not touched)", in.root)
	}
	err = in.install(upgrade, major)
	if serr := in.saveManifest(); err == nil {
		err = serr
	}
	return err
}

func (in *installer) install(upgrade bool, major int) error {
	in.say("files:")
	for _, b := range []struct{ name, what string }{
		{"gpuslice-nri", "the node agent"},
		{"gpuslice", "the status command"},
	} {
		data, err := os.ReadFile(filepath.Join(in.Build, "bin", b.name))
		if err != nil {
			return fmt.Errorf("%w (run make build first)", err)
		}
		changed, err := in.putReport(b.what, in.bin(b.name), data, 0o755)
		if err != nil {
			return err
		}
		in.agentChanged = in.agentChanged || (changed && b.name == "gpuslice-nri")
	}

	plan, err := in.containerd(major)
	if err != nil {
		return err
	}
	in.say("systemd:")
	if err := in.unit(plan.Socket); err != nil {
		return err
	}
	mod, err := in.module(upgrade)
	if err != nil {
		return err
	}
	in.say("configuration and shim:")
	cfg, err := in.config(mod)
	if err != nil {
		return err
	}
	if err := in.shim(cfg.Shim); err != nil {
		return err
	}
	if err := in.removeStale(); err != nil {
		return err
	}
	in.services(upgrade, plan)
	return nil
}

// shim installs libgpuslice.so by rename (pkg/shimfile): containers
// running with the old one keep it mapped.
func (in *installer) shim(path string) error {
	src := filepath.Join(in.Build, "lib", "libgpuslice.so")
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("%w (run make build first)", err)
	}
	in.keep[path] = true
	in.m.Files[path] = File{SHA256: digest(data)}
	h := in.host(path)
	if fi, err := os.Stat(h); err == nil && fi.Mode().Perm() == shimfile.Mode && ownedByRoot(fi) && fileDigest(h) == digest(data) {
		in.say("  %-9s %s  (the shim, %04o)", "unchanged", h, shimfile.Mode)
		return nil
	}
	if err := in.mkdirs(path); err != nil {
		return err
	}
	if err := shimfile.Replace(src, h); err != nil {
		return err
	}
	in.say("  %-9s %s  (the shim, %04o, by rename: running containers keep the one they loaded)", "installed", h, shimfile.Mode)
	return nil
}

// unit installs the systemd unit, its ExecStart at PREFIX and dialing
// containerd's NRI socket when it is not the default one.
func (in *installer) unit(socket string) error {
	src, err := os.ReadFile(filepath.Join(in.Source, "install", "gpuslice-nri.service"))
	if err != nil {
		return err
	}
	line := "ExecStart=" + in.bin("gpuslice-nri") + " -config " + ConfigPath
	if socket != DefaultNRISocket {
		line += " -nri-socket " + socket
	}
	re := regexp.MustCompile(`(?m)^ExecStart=.*$`)
	if n := len(re.FindAll(src, -1)); n != 1 {
		return fmt.Errorf("install/gpuslice-nri.service: want exactly one ExecStart line, found %d", n)
	}
	text := re.ReplaceAllLiteral(src, []byte(line))
	changed, err := in.putReport("the systemd unit", UnitPath, text, 0o644)
	in.agentChanged = in.agentChanged || changed
	return err
}

// containerdMajor is containerd's major version: as given, or asked of
// the running system (0: unknown). A containerd older than 1.7 has no
// NRI: gpuslice-nri could never connect, so no container would get a
// vGPU's devices or limits from it, and the install stops before it
// writes anything.
func (in *installer) containerdMajor() (int, error) {
	if in.ContainerdMajor != 0 || in.sys == nil {
		return in.ContainerdMajor, nil
	}
	major, minor := in.sys.ContainerdVersion()
	if major == 1 && minor < 7 {
		return 0, fmt.Errorf("containerd 1.%d has no NRI, which gpuslice-nri plugs into "+
			"(it came with containerd 1.7): upgrade containerd to 1.7 or later, then run the install again", minor)
	}
	return major, nil
}

// containerd writes the drop-in that turns NRI on, if one is needed.
func (in *installer) containerd(major int) (ContainerdPlan, error) {
	var plan ContainerdPlan
	var err error
	if own, ok := in.m.Files[in.ContainerdConfig]; ok && own.KeepIfEdited &&
		fileDigest(in.host(in.ContainerdConfig)) == own.SHA256 {
		// The main config is the one an earlier install created.
		plan = planWithoutConfig(ContainerdPlan{Config: in.ContainerdConfig}, major)
	} else {
		plan, err = PlanContainerd(in.root, in.ContainerdConfig, major)
	}
	if err != nil {
		return plan, err
	}
	in.say("containerd (%s):", describeMajor(major))
	for _, n := range plan.Notes {
		in.say("  %s", n)
	}
	if plan.Main != nil {
		in.m.Files[plan.Config] = File{KeepIfEdited: true}
		changed, err := in.putReport("containerd's main config, only importing drop-ins", plan.Config, plan.Main, 0o644)
		if err != nil {
			return plan, err
		}
		in.containerdChanged = in.containerdChanged || changed
	}
	if plan.DropIn != "" {
		changed, err := in.putReport("the drop-in turning NRI on", plan.DropIn, plan.Content, 0o644)
		if err != nil {
			return plan, err
		}
		in.containerdChanged = in.containerdChanged || changed
	}
	if plan.Manual != "" {
		in.say("  ACTION NEEDED: %s", plan.Manual)
	}
	in.say("  gpuslice-nri dials NRI at %s", plan.Socket)
	return plan, nil
}

// containerdVersion asks the running system's containerd; 0, 0 when none.
func containerdVersion() (major, minor int) {
	out, err := exec.Command("containerd", "--version").Output()
	if err != nil {
		return 0, 0
	}
	return parseContainerdVersion(string(out))
}

// parseContainerdVersion reads `containerd --version`'s line ("containerd
// github.com/containerd/containerd v1.7.27 <commit>", or "containerd
// containerd.io 1.6.20 <commit>" from Docker's packages); 0, 0 when it
// names no version.
func parseContainerdVersion(out string) (major, minor int) {
	m := regexp.MustCompile(`\sv?(\d+)\.(\d+)`).FindStringSubmatch(out)
	if m == nil {
		return 0, 0
	}
	major, _ = strconv.Atoi(m[1])
	minor, _ = strconv.Atoi(m[2])
	return major, minor
}

func describeMajor(major int) string {
	if major == 0 {
		return "version unknown: a drop-in right for 1.7 and 2.x"
	}
	return fmt.Sprintf("%d.x", major)
}

// config installs the default /etc/gpuslice/config.yaml, never over one
// the administrator edited: the manifest holds the digest of the default
// as last written, and a file that no longer has it is theirs. An edited
// file stays, with the new default beside it as config.yaml.default.
// It returns the configuration in effect.
func (in *installer) config(mod moduleResult) (config.Config, error) {
	def, err := os.ReadFile(filepath.Join(in.Source, "install", "config.yaml"))
	if err != nil {
		return config.Config{}, err
	}
	if !mod.ok {
		def = fileMode(def, mod.reason)
	}
	h := in.host(ConfigPath)
	current, err := os.ReadFile(h)
	switch {
	case errors.Is(err, fs.ErrNotExist) || (err == nil && digest(current) == in.m.ConfigSHA256):
		if _, err := in.put(ConfigPath, def, 0o644); err != nil {
			return config.Config{}, err
		}
		delete(in.m.Files, ConfigPath) // the digest rule, not the file list, governs it
		in.m.ConfigSHA256 = digest(def)
		state := "installed"
		if bytes.Equal(current, def) {
			state = "unchanged"
		}
		in.say("  %-9s %s  (the default configuration)", state, h)
	case err != nil:
		return config.Config{}, err
	default:
		if _, err := in.put(ConfigPath+".default", def, 0o644); err != nil {
			return config.Config{}, err
		}
		in.say("  kept      %s  (edited: left as it is; the new default is beside it: diff %s.default %s)", h, h, h)
		if !mod.ok && !strings.Contains(string(current), "enforcement: file") {
			in.say("  ACTION NEEDED: without the module, set `enforcement: file` in %s (auto falls back to it where /dev/gpuslice is missing; module refuses every vGPU)", h)
		}
	}
	data, _ := os.ReadFile(h)
	cfg, err := config.Parse(data)
	if err != nil {
		return cfg, fmt.Errorf("%s: %w", h, err)
	}
	in.agentChanged = in.agentChanged || !bytes.Equal(current, data)
	return cfg, nil
}

// fileMode is the default configuration set to the no-module mode.
func fileMode(def []byte, reason string) []byte {
	re := regexp.MustCompile(`(?m)^enforcement: *auto\b.*$`)
	return re.ReplaceAll(def, []byte("enforcement: file   # set by make install: "+oneLine(reason)))
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}

// removeStale removes what an earlier install put and this one did not
// (a drop-in no longer needed, a config.yaml.default gone with the edit).
func (in *installer) removeStale() error {
	for _, p := range in.m.paths() {
		if in.keep[p] {
			continue
		}
		if err := in.removeFile(p); err != nil {
			return err
		}
	}
	return nil
}

// services makes the running system pick the install up: systemd, the
// agent, containerd's restart said.
func (in *installer) services(upgrade bool, plan ContainerdPlan) {
	in.say("services:")
	if in.sys != nil && !in.sys.SystemdRunning() {
		in.say("  no systemd running: start %s -config %s yourself", in.bin("gpuslice-nri"), ConfigPath)
	} else {
		in.run("systemctl", "daemon-reload")
		if !upgrade {
			in.runReport("systemctl", "enable", "--now", "gpuslice-nri.service")
		} else {
			in.runReport("systemctl", "enable", "gpuslice-nri.service")
			if in.agentChanged {
				// The agent only: its state (stateDir) carries the
				// allocations over; the module and its vGPUs stay.
				in.runReport("systemctl", "restart", "gpuslice-nri.service")
			} else {
				in.run("systemctl", "start", "gpuslice-nri.service")
			}
		}
	}
	switch {
	case in.containerdChanged && plan.Imported:
		in.say("  containerd MUST BE RESTARTED for NRI to come on: systemctl restart containerd (running containers keep running)")
	case plan.Manual != "":
		in.say("  containerd must be restarted after the change above")
	default:
		in.say("  containerd needs no restart")
	}
}

func (in *installer) runReport(name string, args ...string) {
	if _, err := in.run(name, args...); err != nil {
		in.say("  warning: %v", err)
	}
}

// removeFile removes an installed file (host path) and drops it from the
// manifest; one marked KeepIfEdited that was edited stays.
func (in *installer) removeFile(p string) error {
	f := in.m.Files[p]
	delete(in.m.Files, p)
	h := in.host(p)
	if f.KeepIfEdited && fileDigest(h) != f.SHA256 && fileDigest(h) != "" {
		in.say("  kept      %s  (edited since it was installed)", h)
		return nil
	}
	err := os.Remove(h)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		in.say("  removed   %s", h)
	}
	return err
}
