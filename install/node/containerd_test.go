package node

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"

	"github.com/gpuslice/gpuslice/internal/e2e"
)

// effectiveAfter is the NRI section containerd of that major version
// ends up with, the plan's drop-in written.
func effectiveAfter(t *testing.T, root string, p ContainerdPlan, major int) map[string]any {
	t.Helper()
	var ours map[string]any
	if err := toml.Unmarshal(p.Content, &ours); err != nil {
		t.Fatalf("the drop-in does not parse: %v\n%s", err, p.Content)
	}
	files, err := loadOrder(root, p.Config, major, p.DropIn, ours)
	if err != nil {
		t.Fatal(err)
	}
	return effectiveNRI(files, major)
}

func TestPlanContainerd(t *testing.T) {
	const nri = `[plugins."io.containerd.nri.v1.nri"]` + "\n"
	for _, tc := range []struct {
		name   string
		files  map[string]string // under /etc/containerd
		major  int
		dropIn string         // "" none
		nri    map[string]any // the NRI section after, under 1.7's and 2.x's merge
		socket string
		manual string // a part of the manual step, "" none
		note   string // a part of a note, "" not checked
	}{{
		name: "2.x, NRI off with the administrator's socket and timeout",
		files: map[string]string{"config.toml": "version = 3\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n" +
			nri + "disable = true\nsocket_path = \"/run/a.sock\"\nplugin_request_timeout = \"7s\"\n"},
		major:  2,
		dropIn: "/etc/containerd/conf.d/90-gpuslice-nri.toml",
		nri:    map[string]any{"disable": false, "disable_connections": false, "socket_path": "/run/a.sock", "plugin_request_timeout": "7s"},
		socket: "/run/a.sock",
	}, {
		name: "1.7, NRI settings split over the config and an earlier drop-in",
		files: map[string]string{
			"config.toml":         "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n" + nri + "socket_path = \"/run/a.sock\"\n",
			"conf.d/10-mine.toml": "version = 2\n" + nri + "plugin_config_path = \"/etc/mine\"\n",
		},
		major:  1,
		dropIn: "/etc/containerd/conf.d/90-gpuslice-nri.toml",
		// 1.7: the later section replaced the earlier whole; ours repeats
		// what 1.7 had in effect.
		nri:    map[string]any{"disable": false, "disable_connections": false, "plugin_config_path": "/etc/mine"},
		socket: DefaultNRISocket,
	}, {
		name:   "a .conf glob: the drop-in is named to match it",
		files:  map[string]string{"config.toml": "version = 2\nimports = [\"/etc/containerd/extra/*.conf\"]\n"},
		dropIn: "/etc/containerd/extra/90-gpuslice-nri.conf",
		nri:    map[string]any{"disable": false, "disable_connections": false},
		socket: DefaultNRISocket,
	}, {
		name:   "external connections off: turned on, and said",
		files:  map[string]string{"config.toml": "version = 3\nimports = [\"conf.d/*.toml\"]\n" + nri + "disable = false\ndisable_connections = true\n"},
		major:  2,
		dropIn: "/etc/containerd/conf.d/90-gpuslice-nri.toml",
		nri:    map[string]any{"disable": false, "disable_connections": false},
		socket: DefaultNRISocket,
		note:   "disable_connections was true",
	}, {
		name:   "no drop-in directory imported: the exact line to add",
		files:  map[string]string{"config.toml": "version = 2\n" + nri + "disable = true\n"},
		major:  1,
		dropIn: "/etc/containerd/conf.d/90-gpuslice-nri.toml",
		socket: DefaultNRISocket,
		manual: `imports = ["/etc/containerd/conf.d/*.toml"]`,
	}, {
		name:   "1.7 with a relative glob (globbed from its working directory): the exact line to add",
		files:  map[string]string{"config.toml": "version = 2\nimports = [\"conf.d/*.toml\"]\n"},
		major:  1,
		dropIn: "/etc/containerd/conf.d/90-gpuslice-nri.toml",
		socket: DefaultNRISocket,
		manual: `imports = ["/etc/containerd/conf.d/*.toml"]`,
	}, {
		name:   "2.x, NRI on already: nothing to write",
		files:  map[string]string{"config.toml": "version = 3\n" + nri + "socket_path = \"/run/a.sock\"\n"},
		major:  2,
		socket: "/run/a.sock",
		note:   "already on",
	}, {
		name:   "2.x without a config: its defaults have NRI on",
		major:  2,
		socket: DefaultNRISocket,
		note:   "defaults have NRI on",
	}, {
		name:   "a version 1 config: by hand",
		files:  map[string]string{"config.toml": "[plugins.nri]\ndisable = true\n"},
		major:  1,
		socket: DefaultNRISocket,
		manual: "version 1 configuration",
	}, {
		name: "a drop-in loaded after ours turns NRI off again: said",
		files: map[string]string{
			"config.toml":          "version = 3\nimports = [\"conf.d/*.toml\"]\n",
			"conf.d/99-never.toml": "version = 3\n" + nri + "disable = true\n",
		},
		major:  2,
		dropIn: "/etc/containerd/conf.d/90-gpuslice-nri.toml",
		socket: DefaultNRISocket,
		note:   "turns NRI off again: /etc/containerd/conf.d/99-never.toml",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for p, text := range tc.files {
				writeFiles(t, root, map[string]string{filepath.Join("etc/containerd", p): text})
			}
			p, err := PlanContainerd(root, ContainerdToml, tc.major)
			if err != nil {
				t.Fatal(err)
			}
			if p.DropIn != tc.dropIn || p.Socket != tc.socket {
				t.Errorf("drop-in %q socket %q, want %q %q", p.DropIn, p.Socket, tc.dropIn, tc.socket)
			}
			if (tc.manual == "") != (p.Manual == "") || !strings.Contains(p.Manual, tc.manual) {
				t.Errorf("manual step %q, want one with %q", p.Manual, tc.manual)
			}
			if tc.note != "" && !strings.Contains(strings.Join(p.Notes, "\n"), tc.note) {
				t.Errorf("notes %q, want one with %q", p.Notes, tc.note)
			}
			if tc.nri == nil {
				return
			}
			// The plan's own major version, or both when it is unknown.
			majors := []int{tc.major}
			if tc.major == 0 {
				majors = []int{1, 2}
			}
			for _, major := range majors {
				if got := effectiveAfter(t, root, p, major); !reflect.DeepEqual(got, tc.nri) {
					t.Errorf("containerd %d.x would see NRI %v, want %v; the drop-in:\n%s", major, got, tc.nri, p.Content)
				}
			}
		})
	}
}

// TestDropInRealContainerd: containerd itself (the e2e tests' build)
// reads the administrator's config with the installed drop-in: NRI on,
// and every setting of the administrator's, NRI's included, as before.
func TestDropInRealContainerd(t *testing.T) {
	e2e.Require(t)
	bin, err := e2e.Tools()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, config, dropIn string }{
		{"version 3 (containerd 2.x)", adminContainerd,
			"version = 3\n[plugins.\"io.containerd.nri.v1.nri\"]\n  plugin_config_path = \"/etc/admin-nri.d\"\n"},
		{"version 2 (containerd 1.7's)", strings.NewReplacer("version = 3", "version = 2",
			`"io.containerd.cri.v1.images".pinned_images]`, `"io.containerd.grpc.v1.cri"]`,
			"sandbox = ", "sandbox_image = ").Replace(adminContainerd),
			"version = 2\n[plugins.\"io.containerd.nri.v1.nri\"]\n  plugin_config_path = \"/etc/admin-nri.d\"\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := t.TempDir()
			writeFiles(t, dest, map[string]string{
				"etc/containerd/config.toml":          strings.Replace(tc.config, "[grpc]", "root = \""+dest+"/var/lib/containerd\"\n[grpc]", 1),
				"etc/containerd/conf.d/10-admin.toml": tc.dropIn,
			})
			dump := func() map[string]any {
				t.Helper()
				out, err := command(filepath.Join(bin, "containerd"), "--config", filepath.Join(dest, ContainerdToml), "config", "dump")
				if err != nil {
					t.Fatalf("containerd config dump: %v\n%s", err, out)
				}
				var doc map[string]any
				// The dump follows its log lines (stderr, combined here).
				body := out[strings.Index(out, "version = "):]
				if err := toml.Unmarshal([]byte(body), &doc); err != nil {
					t.Fatalf("the dump does not parse: %v\n%s", err, out)
				}
				return doc
			}
			before := dump()
			o := options(dest, nil)
			o.ContainerdMajor = 2
			report := install(t, o)
			after := dump()

			nri := nriTable(after)
			for k, v := range map[string]any{
				"disable": false, "disable_connections": false, // on
				"socket_path": "/run/admin-nri.sock", "plugin_request_timeout": "7s", "plugin_config_path": "/etc/admin-nri.d",
			} {
				if nri[k] != v {
					t.Errorf("NRI's %s is %v after the install, want %v", k, nri[k], v)
				}
			}
			// Everything else exactly as before: the NRI section but for
			// the two switches, every other plugin, every other setting.
			wantNRI := nriTable(before)
			wantNRI["disable"], wantNRI["disable_connections"] = false, false
			if !reflect.DeepEqual(nri, wantNRI) {
				t.Errorf("NRI after the install:\n%v\nwant the administrator's, on:\n%v", nri, wantNRI)
			}
			delete(before["plugins"].(map[string]any), NRIPlugin)
			delete(after["plugins"].(map[string]any), NRIPlugin)
			delete(before, "imports")
			delete(after, "imports")
			if !reflect.DeepEqual(before, after) {
				b, _ := toml.Marshal(before)
				a, _ := toml.Marshal(after)
				t.Errorf("the install changed containerd's other settings:\nbefore:\n%s\nafter:\n%s", b, a)
			}
			// Two of the administrator's settings by name, as containerd
			// 2.x places them.
			plugins := after["plugins"].(map[string]any)
			if g := plugins["io.containerd.server.v1.grpc"].(map[string]any)["address"]; g != "/run/admin/containerd.sock" {
				t.Errorf("grpc address %v after the install", g)
			}
			images := plugins["io.containerd.cri.v1.images"].(map[string]any)
			if s := images["pinned_images"].(map[string]any)["sandbox"]; s != "registry.example/pause:mine" {
				t.Errorf("CRI's sandbox image %v after the install", s)
			}
			if !strings.Contains(report, "gpuslice-nri dials NRI at /run/admin-nri.sock") {
				t.Errorf("the report does not name the administrator's socket:\n%s", report)
			}
			uninstall(t, o)
			if _, err := os.Stat(filepath.Join(dest, "etc/containerd/conf.d/90-gpuslice-nri.toml")); err == nil {
				t.Errorf("uninstall left the drop-in")
			}
		})
	}
}
