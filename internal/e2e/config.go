package e2e

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// makeDirs creates the Env's directories: containerd's root and state, the
// NRI plugin and plugin config directories, and the rest of Dir()'s layout.
func (e *Env) makeDirs() error {
	for _, d := range []string{e.root, e.state, e.PluginDir(), e.pluginConfigDir(),
		filepath.Join(e.dir, "cni"), filepath.Join(e.dir, "pods"), filepath.Join(e.dir, "containers"),
		filepath.Join(e.dir, "logs"), filepath.Join(e.dir, "plugins"), filepath.Join(e.dir, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// writeFiles puts in place what containerd starts with: the pre-registered
// plugins, the plugins' config files, containerd's config, and crictl's.
func (e *Env) writeFiles(opts Options) error {
	for name, binary := range opts.PreRegistered {
		if err := copyFile(binary, filepath.Join(e.PluginDir(), name), 0o755); err != nil {
			return fmt.Errorf("e2e: pre-registering %s: %v", name, err)
		}
	}
	for name, content := range opts.PluginConfigs {
		if err := os.WriteFile(filepath.Join(e.pluginConfigDir(), name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(e.config, []byte(e.containerdConfig(opts)), 0o644); err != nil {
		return err
	}
	return os.WriteFile(e.crictlCfg, []byte(e.crictlConfig()), 0o644)
}

// crictlConfig is crictl's config file's text.
func (e *Env) crictlConfig() string {
	return fmt.Sprintf("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 120\ndebug: false\npull-image-on-create: false\n",
		e.Address(), e.Address())
}

// configTemplate is containerd's config; containerdConfig fills it in.
const configTemplate = `# Written by internal/e2e for one test.
version = 3
root = %q
state = %q
temp = %q
disabled_plugins = [
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.erofs",
]

[grpc]
  address = %q

[debug]
  level = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.image-verifier.v1.bindir"]
  bin_dir = %q

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.cri.v1.images"]
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %q

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
%s
  [plugins."io.containerd.cri.v1.runtime".cni]
    conf_dir = %q
    bin_dirs = [%q]
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
    BinaryName = %q
    Root = %q

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = %q
  plugin_path = %q
  plugin_config_path = %q
  plugin_registration_timeout = %q
  plugin_request_timeout = %q
`

// containerdConfig is the config file's text.
func (e *Env) containerdConfig(opts Options) string {
	var b strings.Builder
	fmt.Fprintf(&b, configTemplate,
		e.root, e.state, filepath.Join(e.dir, "tmp"),
		e.Address(), cmp.Or(opts.LogLevel, "info"),
		filepath.Join(e.root, "opt"), filepath.Join(e.root, "image-verifier"),
		Image,
		indent(opts.RuntimeConfig, "  "),
		filepath.Join(e.dir, "cni"), filepath.Join(e.dir, "cni"),
		filepath.Join(e.bin, "runc"), filepath.Join(e.state, "runc"),
		e.NRISocket(), e.PluginDir(), e.pluginConfigDir(),
		cmp.Or(opts.NRIRegistrationTimeout, 30*time.Second).String(),
		cmp.Or(opts.NRIRequestTimeout, 30*time.Second).String())
	if opts.ExtraConfig != "" {
		b.WriteString("\n" + opts.ExtraConfig + "\n")
	}
	return b.String()
}

// indent prefixes every non-empty line of s.
func indent(s, prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			b.WriteString(prefix + strings.TrimSpace(l) + "\n")
		}
	}
	return b.String()
}

// copyFile copies a file with the given mode.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
