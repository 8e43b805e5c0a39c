// Package node installs gpuslice on one node (make install, make
// uninstall): the agent, the status command, the shim, the systemd unit,
// the kernel module through DKMS, the default configuration and the
// containerd drop-in that turns NRI on.
//
// Into a scratch root (DESTDIR) it writes the same files and changes
// nothing of the running system: the commands it would run (dkms,
// modprobe, systemctl) are printed instead.
package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/gpuslice/gpuslice/pkg/atomicfile"
)

// Host paths the installer uses besides PREFIX.
const (
	ConfigPath      = "/etc/gpuslice/config.yaml"
	UnitPath        = "/etc/systemd/system/gpuslice-nri.service"
	ModulesLoadPath = "/etc/modules-load.d/gpuslice.conf"
	ContainerdToml  = "/etc/containerd/config.toml"
	unitSourceAgent = "/usr/local/bin/gpuslice-nri" // the unit's ExecStart in install/
)

// Options say what to install from where, and into which root.
type Options struct {
	// DestDir is the scratch root; "" installs on the running system.
	DestDir string
	// Prefix is where binaries go ($Prefix/bin), /usr/local by default.
	Prefix string
	// Source is the repository (install/, kmod/); Build its build
	// directory (bin/gpuslice-nri, bin/gpuslice, lib/libgpuslice.so).
	Source, Build string
	// ContainerdConfig is containerd's main config, ContainerdToml by
	// default; ContainerdMajor its major version (1 or 2), 0: ask
	// `containerd --version` on the running system, unknown in a DestDir.
	ContainerdConfig string
	ContainerdMajor  int
	// NoModule installs without the kernel module: its source is put in
	// place, DKMS is not run, the configuration says enforcement: file.
	NoModule bool
	// Force uninstalls with vGPUs in use.
	Force bool
	// Out receives the report.
	Out io.Writer

	// sys is the system commands run on: the host when live; in a
	// DestDir a stand-in (tests), or nil to print the commands instead.
	sys system
}

// system is what the installer asks of and does to the running system:
// the commands it runs (dkms, modprobe, systemctl), and what it reads
// outside the root it installs into.
type system interface {
	// Run runs a command and returns its combined output.
	Run(name string, args ...string) (string, error)
	// Have says whether a command is on PATH.
	Have(name string) bool
	// Exists says whether a path of the running system exists
	// (/lib/modules/<release>/build, /sys/module/<name>).
	Exists(path string) bool
	// KernelRelease is the running kernel's release (uname -r).
	KernelRelease() string
	// SystemdRunning: systemd is the init system.
	SystemdRunning() bool
	// ContainerdVersion is the installed containerd's major and minor
	// version, 0, 0 when none.
	ContainerdVersion() (major, minor int)
	// ModuleRefusal says why the kernel may refuse an unsigned module
	// (lockdown, Secure Boot), "" when nothing says it would.
	ModuleRefusal() string
}

// hostSystem is the running system.
type hostSystem struct{}

func (hostSystem) Run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	// A make above us exports its jobserver and flags; dkms's kernel
	// build must get neither.
	cmd.Env = withoutMake(os.Environ())
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (hostSystem) Have(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

func (hostSystem) Exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (hostSystem) KernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func (hostSystem) SystemdRunning() bool {
	_, err := os.Stat("/run/systemd/system")
	return err == nil
}

func (hostSystem) ContainerdVersion() (major, minor int) { return containerdVersion() }

func (hostSystem) ModuleRefusal() string { return secureBoot(lockdownFile, secureBootVar) }

// installer is one run: the options, the manifest, what changed.
type installer struct {
	Options
	root string // DestDir, or "/"
	live bool   // the running system
	m    *Manifest
	keep map[string]bool // the files this run installs
	// Whether the running services must pick the change up.
	agentChanged, containerdChanged bool
}

func newInstaller(o Options) (*installer, error) {
	if o.Prefix == "" {
		o.Prefix = "/usr/local"
	}
	if !filepath.IsAbs(o.Prefix) {
		return nil, fmt.Errorf("PREFIX %q: want an absolute path such as /usr/local", o.Prefix)
	}
	if o.ContainerdConfig == "" {
		o.ContainerdConfig = ContainerdToml
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	in := &installer{Options: o, root: o.DestDir, live: o.DestDir == "", keep: map[string]bool{}}
	if in.live {
		in.root, in.sys = "/", hostSystem{}
		if os.Geteuid() != 0 {
			return nil, fmt.Errorf("installing on this node needs root (sudo make install), or name a scratch root (DESTDIR=/some/dir)")
		}
	} else if !filepath.IsAbs(o.DestDir) {
		return nil, fmt.Errorf("DESTDIR %q: want an absolute path", o.DestDir)
	}
	m, err := loadManifest(in.root)
	if err != nil {
		return nil, err
	}
	in.m = m
	return in, nil
}

// host is the path on disk of a host path.
func (in *installer) host(p string) string { return filepath.Join(in.root, p) }

func (in *installer) bin(name string) string { return filepath.Join(in.Prefix, "bin", name) }

func (in *installer) say(format string, args ...any) {
	fmt.Fprintf(in.Out, format+"\n", args...)
}

// mkdirs creates the directories above the host path p, recording each
// it creates.
func (in *installer) mkdirs(p string) error {
	var missing []string
	for d := filepath.Dir(p); d != "/" && d != "."; d = filepath.Dir(d) {
		if _, err := os.Lstat(in.host(d)); err == nil {
			break
		}
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(in.host(missing[i]), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		in.m.addDir(missing[i])
	}
	return nil
}

// put installs data at the host path p with mode, owned by root, by
// rename (a binary that is running cannot be rewritten in place, and a
// reader never sees half a file); unchanged files are left alone. It
// reports whether the file changed.
func (in *installer) put(p string, data []byte, mode os.FileMode) (bool, error) {
	in.keep[p] = true
	in.m.Files[p] = File{SHA256: digest(data), KeepIfEdited: in.m.Files[p].KeepIfEdited}
	h := in.host(p)
	if fi, err := os.Lstat(h); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm() == mode && ownedByRoot(fi) {
		if old, err := os.ReadFile(h); err == nil && bytes.Equal(old, data) {
			return false, nil
		}
	}
	if err := in.mkdirs(p); err != nil {
		return false, err
	}
	if err := atomicfile.Write(h, data, mode); err != nil {
		return false, fmt.Errorf("installing %s: %w", h, err)
	}
	return true, nil
}

// putReport is put, saying what it did.
func (in *installer) putReport(what, p string, data []byte, mode os.FileMode) (bool, error) {
	changed, err := in.put(p, data, mode)
	if err != nil {
		return false, err
	}
	state := "unchanged"
	if changed {
		state = "installed"
	}
	in.say("  %-9s %s  (%s, %04o)", state, in.host(p), what, mode)
	return changed, nil
}

func ownedByRoot(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || os.Geteuid() != 0 || (st.Uid == 0 && st.Gid == 0)
}

// saveManifest writes the manifest (not itself one of its files).
func (in *installer) saveManifest() error {
	if err := in.mkdirs(ManifestPath); err != nil {
		return err
	}
	b, err := json.MarshalIndent(in.m, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(in.host(ManifestPath), append(b, '\n'), 0o644)
}

// run runs a command on the running system and returns its combined
// output; in a DestDir it only says what it would run.
func (in *installer) run(name string, args ...string) (string, error) {
	line := name + " " + strings.Join(args, " ")
	if in.sys == nil {
		in.say("  would run: %s", line)
		return "", nil
	}
	out, err := in.sys.Run(name, args...)
	if err != nil {
		return out, fmt.Errorf("%s: %v\n%s", line, err, strings.TrimSpace(out))
	}
	if args[0] != "status" { // dkms status only asks
		in.say("  ran: %s", line)
	}
	return out, nil
}

func withoutMake(env []string) []string {
	var out []string
	for _, e := range env {
		k, _, _ := strings.Cut(e, "=")
		if k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
			out = append(out, e)
		}
	}
	return out
}
