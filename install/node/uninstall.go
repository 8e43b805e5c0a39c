package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/pkg/config"
	"github.com/gpuslice/gpuslice/pkg/state"
	"github.com/gpuslice/gpuslice/pkg/status"
)

// Uninstall removes what Install installed, as its manifest lists it. It
// refuses while vGPUs are in use (as the running agent reports them, or
// its state when it is down), naming their containers, unless o.Force.
// An edited /etc/gpuslice/config.yaml stays.
func Uninstall(o Options) error {
	in, err := newInstaller(o)
	if err != nil {
		return err
	}
	if len(in.m.Files) == 0 && in.m.DKMS == "" {
		in.say("gpuslice: nothing to uninstall (no %s)", in.host(ManifestPath))
		return nil
	}
	cfg := in.currentConfig()
	users, from, err := in.inUse(cfg)
	if err != nil && !in.Force {
		return fmt.Errorf("%w (FORCE=1 uninstalls anyway)", err)
	}
	if len(users) > 0 {
		msg := fmt.Sprintf("%d container(s) hold vGPUs (%s): %s", len(users), from, strings.Join(users, ", "))
		if !in.Force {
			return fmt.Errorf("refusing to uninstall: %s; stop them first, or uninstall with FORCE=1 "+
				"(their vGPUs lose their limits; if they are gone already, the agent's record is stale and FORCE=1 is safe)", msg)
		}
		in.say("gpuslice: FORCE: uninstalling although %s", msg)
	}
	in.say("gpuslice: uninstalling from %s", in.root)
	in.say("services:")
	if in.sys == nil || in.sys.SystemdRunning() {
		in.runReport("systemctl", "disable", "--now", "gpuslice-nri.service")
	}
	in.unloadModule()

	in.say("files:")
	dropIn := false
	for _, p := range in.m.paths() {
		dropIn = dropIn || isDropIn(p)
		if err := in.removeFile(p); err != nil {
			return err
		}
	}
	in.configUninstall()
	in.stateUninstall(cfg)
	if err := os.Remove(in.host(ManifestPath)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, d := range in.m.dirsDeepestFirst() {
		// Only when empty: what others put there stays.
		if err := os.Remove(in.host(d)); err == nil {
			in.say("  removed   %s/", in.host(d))
		}
	}
	if in.sys == nil || in.sys.SystemdRunning() {
		in.run("systemctl", "daemon-reload")
	}
	if dropIn {
		in.say("  containerd keeps NRI on until it is restarted (systemctl restart containerd)")
	}
	return nil
}

// currentConfig is the installed configuration, else the default.
func (in *installer) currentConfig() config.Config {
	data, err := os.ReadFile(in.host(ConfigPath))
	if err != nil {
		return config.Default()
	}
	cfg, err := config.Parse(data)
	if err != nil {
		in.say("warning: %s: %v (using the defaults' paths)", in.host(ConfigPath), err)
		return config.Default()
	}
	return cfg
}

// inUse names the containers holding vGPUs: the running agent's report
// over its status socket; when no agent answers, its state directory.
func (in *installer) inUse(cfg config.Config) (users []string, from string, err error) {
	if cfg.StatusSocket != "" {
		sock := in.host(cfg.StatusSocket)
		node, err := askAgent(sock)
		if err == nil {
			return agentUsers(node), "the agent at " + sock + " says", nil
		}
		if _, serr := os.Stat(sock); serr == nil {
			in.say("gpuslice: the agent at %s did not answer (%v): reading its state instead", sock, err)
		}
	}
	dir := in.host(cfg.StateDir)
	allocs, err := state.Read(dir)
	if err != nil {
		return nil, "", fmt.Errorf("cannot tell whether vGPUs are in use: %w", err)
	}
	for _, a := range allocs {
		users = append(users, allocName(a))
	}
	sort.Strings(users)
	return users, "the agent's state in " + dir + " says; the agent is not running", nil
}

func askAgent(sock string) (*status.Node, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return status.Fetch(ctx, sock)
}

// agentUsers names each vGPU's containers once.
func agentUsers(node *status.Node) []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range node.Cards {
		for _, v := range c.VGPUs {
			name := v.Namespace + "/" + v.Pod + "/" + v.Container
			if v.Pod == "" {
				name = "id:" + short(v.ContainerID)
			}
			if !seen[name] {
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	sort.Strings(out)
	return out
}

func allocName(a state.Allocation) string {
	switch {
	case a.Claim != nil:
		return fmt.Sprintf("%s/%s/%s (claim %s/%s)", a.Namespace, a.Pod, a.Name, a.Claim.Namespace, a.Claim.Name)
	case a.Pod != "":
		return a.Namespace + "/" + a.Pod + "/" + a.Name
	default:
		return "id:" + short(a.Container)
	}
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// unloadModule unloads gpuslice.ko and has DKMS forget it.
func (in *installer) unloadModule() {
	if in.m.DKMS == "" {
		return
	}
	in.say("kernel module:")
	name, _, _ := strings.Cut(in.m.DKMS, "/")
	if in.sys == nil || in.sys.Exists("/sys/module/"+name) {
		if _, err := in.run("modprobe", "-r", name); err != nil {
			in.say("  warning: the module stays loaded until reboot: %v", err)
		}
	}
	if in.sys == nil || in.sys.Have("dkms") {
		in.runReport("dkms", "remove", in.m.DKMS, "--all")
	}
	in.m.DKMS = ""
}

// configUninstall removes the default configuration unless edited.
func (in *installer) configUninstall() {
	h := in.host(ConfigPath)
	switch d := fileDigest(h); {
	case d == "":
	case d == in.m.ConfigSHA256:
		if err := os.Remove(h); err == nil {
			in.say("  removed   %s", h)
		}
	default:
		in.say("  kept      %s  (edited: yours; remove it by hand if you no longer need it)", h)
	}
}

// stateUninstall removes the agent's state files: nothing holds vGPUs
// (or FORCE said to go on), so they describe nothing that lives on.
func (in *installer) stateUninstall(cfg config.Config) {
	dir := in.host(cfg.StateDir)
	for _, f := range []string{state.FileName, state.JournalName, state.LockName} {
		if err := os.Remove(filepath.Join(dir, f)); err == nil {
			in.say("  removed   %s  (the agent's state)", filepath.Join(dir, f))
		}
	}
	if contains(in.m.Dirs, cfg.StateDir) {
		return // removed with the install's directories when empty
	}
	if in.live {
		if err := os.Remove(dir); err == nil {
			in.say("  removed   %s/", dir)
		}
	}
}
