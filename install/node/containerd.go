package node

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// Where containerd keeps NRI, and what the installer names its drop-in.
const (
	// NRIPlugin is the NRI plugin's key in containerd's plugins table, the
	// same in config versions 2 (containerd 1.7) and 3 (2.x).
	NRIPlugin = "io.containerd.nri.v1.nri"
	// DefaultNRISocket is containerd's NRI socket when socket_path is unset.
	DefaultNRISocket = "/var/run/nri/nri.sock"
	// DefaultImport is containerd 2.x's drop-in directory, the one
	// `containerd config default` imports.
	DefaultImport = "/etc/containerd/conf.d/*.toml"
	// DropInName is the drop-in's file name in an imported directory.
	DropInName = "90-gpuslice-nri.toml"
)

// ContainerdPlan is what turning NRI on needs, found by reading the
// administrator's containerd configuration the way containerd does.
type ContainerdPlan struct {
	Config   string   // the main config file (a host path)
	DropIn   string   // the drop-in's host path; "" when none is needed
	Content  []byte   // the drop-in's text
	Main     []byte   // a main config to create (none existed), else nil
	Imported bool     // containerd will read DropIn
	Socket   string   // the NRI socket gpuslice-nri dials
	Notes    []string // what was found, for the report
	Manual   string   // what the administrator has to do by hand, "" nothing
}

// tomlFile is one configuration file containerd loads.
type tomlFile struct {
	path    string         // host path
	doc     map[string]any // nil: the drop-in's place, not read
	imports []string       // its import patterns, resolved to host paths
}

// PlanContainerd reads the main config (host path config under root) and
// everything it imports, and says which drop-in turns NRI on without
// changing any other setting. major is containerd's major version, 0
// when unknown (then the plan holds for 1.7 and 2.x alike).
//
// How containerd merges imports decides what the drop-in must hold. Both
// load the main file, then its imports, breadth first, each over what is
// loaded so far. containerd 1.7 (services/server/config/config.go,
// mergeConfig) replaces a plugin's whole section with an import's: a
// drop-in saying only `disable = false` would reset the administrator's
// socket_path and timeouts to their defaults. containerd 2.x
// (cmd/containerd/server/config/config.go, mergo.WithOverride over
// map[string]any) merges the sections key by key. A drop-in that repeats
// the administrator's effective NRI section with NRI turned on is right
// under both.
func PlanContainerd(root, config string, major int) (ContainerdPlan, error) {
	p := ContainerdPlan{Config: config}
	main, err := readTOML(root, config)
	if os.IsNotExist(err) {
		return planWithoutConfig(p, major), nil
	}
	if err != nil {
		return p, err
	}
	version, _ := main["version"].(int64)
	if version < 2 {
		p.Manual = fmt.Sprintf("%s is a version 1 configuration (no `version = 2` or 3 line), "+
			"whose plugin sections a versioned drop-in would hide: migrate it (containerd config migrate) "+
			"and run make install again, or turn NRI on there by hand ([plugins.nri] disable = false)", config)
		p.Socket = DefaultNRISocket
		return p, nil
	}

	before, err := loadOrder(root, config, major, "", nil)
	if err != nil {
		return p, err
	}
	nri := effectiveNRI(before, major)
	p.Socket = socketOf(nri)
	if nriOn(nri, major) {
		p.Notes = append(p.Notes, fmt.Sprintf("NRI is already on in %s (socket %s): no drop-in needed", config, p.Socket))
		return p, nil
	}

	p.DropIn, p.Imported = dropInPath(before)
	on := map[string]any{}
	for k, v := range nri {
		on[k] = v
	}
	on["disable"] = false
	if dc, _ := nri["disable_connections"].(bool); dc {
		p.Notes = append(p.Notes, "NRI's disable_connections was true: set to false, since gpuslice-nri connects to containerd as an external plugin")
	}
	on["disable_connections"] = false
	p.Content, err = dropInText(version, on, before)
	if err != nil {
		return p, err
	}
	if !p.Imported {
		p.Manual = fmt.Sprintf("%s imports no drop-in directory: add this line at its top, before any [section], "+
			"then restart containerd:\n    imports = [%q]\n  (if it has an imports line already, add %q to that list)",
			config, DefaultImport, DefaultImport)
		return p, nil
	}

	// What containerd will see, the drop-in in its place: a file loaded
	// after it may turn NRI off again.
	var ours map[string]any
	if err := toml.Unmarshal(p.Content, &ours); err != nil {
		return p, fmt.Errorf("the drop-in does not parse back: %w", err)
	}
	after, err := loadOrder(root, config, major, p.DropIn, ours)
	if err != nil {
		return p, err
	}
	final := effectiveNRI(after, major)
	p.Socket = socketOf(final)
	if !nriOn(final, major) {
		p.Notes = append(p.Notes, fmt.Sprintf("warning: a file containerd loads after %s turns NRI off again: %s",
			p.DropIn, strings.Join(nriFiles(after, p.DropIn), ", ")))
	}
	return p, nil
}

// planWithoutConfig: no main config. containerd 2.x's defaults have NRI
// on; 1.7's have it off and import nothing, so the installer creates a
// main config that only imports the drop-in directory (every other
// setting stays at its default) and removes it again at uninstall.
func planWithoutConfig(p ContainerdPlan, major int) ContainerdPlan {
	p.Socket = DefaultNRISocket
	if major >= 2 {
		p.Notes = append(p.Notes, fmt.Sprintf("no %s: containerd %d.x's defaults have NRI on", p.Config, major))
		return p
	}
	p.Main = []byte("# Written by gpuslice's make install: there was no containerd config, and\n" +
		"# containerd 1.7 reads drop-ins only from a config that imports them.\n" +
		"# make uninstall removes it (unless you edited it).\n" +
		"version = 2\nimports = [\"" + DefaultImport + "\"]\n")
	p.DropIn, p.Imported = filepath.Join(filepath.Dir(DefaultImport), DropInName), true
	text, _ := dropInText(2, map[string]any{"disable": false, "disable_connections": false}, nil)
	p.Content = text
	return p
}

// readTOML parses the host path under root.
func readTOML(root, path string) (map[string]any, error) {
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := toml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("containerd config %s: %w", path, err)
	}
	return doc, nil
}

// loadOrder lists the files containerd (of that major version) loads from
// the main config, in its order. Files named DropInName are skipped (the installer's own,
// from an earlier run), except that dropIn, when not "", is placed among
// its glob's matches with the document ours.
func loadOrder(root, main string, major int, dropIn string, ours map[string]any) ([]tomlFile, error) {
	var out []tomlFile
	loaded := map[string]bool{}
	pending := []string{main}
	for len(pending) > 0 {
		path := pending[0]
		pending = pending[1:]
		if loaded[path] {
			continue
		}
		loaded[path] = true
		if isDropIn(path) {
			if path == dropIn {
				out = append(out, tomlFile{path: path, doc: ours})
			}
			continue
		}
		doc, err := readTOML(root, path)
		if err != nil {
			return nil, err
		}
		f := tomlFile{path: path, doc: doc}
		for _, imp := range stringList(doc["imports"]) {
			imp = filepath.Clean(imp)
			if !filepath.IsAbs(imp) && major == 1 && strings.Contains(imp, "*") {
				// 1.7 globs a relative pattern from its working
				// directory, not the config's: nothing to place a
				// drop-in beside.
				continue
			}
			if !filepath.IsAbs(imp) {
				imp = filepath.Join(filepath.Dir(path), imp)
			}
			f.imports = append(f.imports, imp)
			if !strings.Contains(imp, "*") {
				pending = append(pending, imp)
				continue
			}
			matches, err := glob(root, imp)
			if err != nil {
				return nil, err
			}
			if ok, _ := filepath.Match(imp, dropIn); ok && dropIn != "" && !contains(matches, dropIn) {
				matches = append(matches, dropIn)
				sort.Strings(matches)
			}
			pending = append(pending, matches...)
		}
		out = append(out, f)
	}
	return out, nil
}

// isDropIn: the installer's drop-in, whatever the suffix its glob wants.
func isDropIn(path string) bool {
	stem := strings.TrimSuffix(DropInName, ".toml")
	base := filepath.Base(path)
	return base == stem || strings.HasPrefix(base, stem+".")
}

// glob matches a host pattern under root, as host paths, sorted.
func glob(root, pattern string) ([]string, error) {
	m, err := filepath.Glob(filepath.Join(root, pattern))
	if err != nil {
		return nil, fmt.Errorf("containerd import %q: %w", pattern, err)
	}
	for i := range m {
		m[i] = "/" + strings.TrimPrefix(strings.TrimPrefix(m[i], filepath.Clean(root)), "/")
	}
	sort.Strings(m)
	return m, nil
}

// effectiveNRI is the NRI section containerd ends up with, merged the
// way the given major version merges (1: the last section wins whole;
// 2.x or unknown: key by key).
func effectiveNRI(files []tomlFile, major int) map[string]any {
	out := map[string]any{}
	for _, f := range files {
		t := nriTable(f.doc)
		if t == nil {
			continue
		}
		if major == 1 {
			out = map[string]any{}
		}
		deepMerge(out, t)
	}
	return out
}

// nriOn: NRI enabled and open to external plugins. An unset disable is
// containerd 2.x's default (on) but 1.7's (off).
func nriOn(nri map[string]any, major int) bool {
	if dc, _ := nri["disable_connections"].(bool); dc {
		return false
	}
	d, set := nri["disable"].(bool)
	if !set {
		return major >= 2
	}
	return !d
}

func socketOf(nri map[string]any) string {
	if s, _ := nri["socket_path"].(string); s != "" {
		return s
	}
	return DefaultNRISocket
}

func nriTable(doc map[string]any) map[string]any {
	plugins, _ := doc["plugins"].(map[string]any)
	t, _ := plugins[NRIPlugin].(map[string]any)
	return t
}

// nriFiles names the files after dropIn that have an NRI section.
func nriFiles(files []tomlFile, dropIn string) []string {
	var out []string
	seen := false
	for _, f := range files {
		if seen && nriTable(f.doc) != nil {
			out = append(out, f.path)
		}
		seen = seen || f.path == dropIn
	}
	return out
}

// deepMerge merges src into dst: tables key by key, anything else
// replaced.
func deepMerge(dst, src map[string]any) {
	for k, v := range src {
		if sv, ok := v.(map[string]any); ok {
			dv, ok := dst[k].(map[string]any)
			if !ok {
				dv = map[string]any{}
				dst[k] = dv
			}
			deepMerge(dv, sv)
			continue
		}
		dst[k] = v
	}
}

// dropInPath is where the drop-in goes: beside the first glob import
// whose pattern the name DropInName (with the glob's suffix) matches;
// else containerd 2.x's conf.d, which then needs an import.
func dropInPath(files []tomlFile) (string, bool) {
	for _, f := range files {
		for _, imp := range f.imports {
			dir, base := filepath.Split(imp)
			i := strings.LastIndex(base, "*")
			if i < 0 || strings.ContainsAny(dir, "*?[") || strings.ContainsAny(base[i+1:], "*?[") {
				continue
			}
			name := strings.TrimSuffix(DropInName, ".toml") + base[i+1:]
			if base[i+1:] == "" {
				name = DropInName
			}
			if ok, _ := filepath.Match(imp, filepath.Join(dir, name)); ok {
				return filepath.Join(dir, name), true
			}
		}
	}
	return filepath.Join(filepath.Dir(DefaultImport), DropInName), false
}

// dropInText is the drop-in: the version of the main config (imports
// may not be newer), and the NRI section.
func dropInText(version int64, nri map[string]any, from []tomlFile) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Written by gpuslice's make install: turns containerd's NRI on for the\n" +
		"# gpuslice-nri agent. It repeats the NRI settings of the files below, since\n" +
		"# containerd 1.7 replaces a plugin's whole section with an import's: after\n" +
		"# changing them there, run make install again. make uninstall removes it.\n")
	for _, f := range from {
		if nriTable(f.doc) != nil {
			b.WriteString("#   NRI settings from " + f.path + "\n")
		}
	}
	body, err := toml.Marshal(map[string]any{
		"version": version,
		"plugins": map[string]any{NRIPlugin: nri},
	})
	if err != nil {
		return nil, fmt.Errorf("writing the drop-in: %w", err)
	}
	b.Write(body)
	return b.Bytes(), nil
}

func stringList(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, e := range l {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

func contains(l []string, s string) bool {
	for _, e := range l {
		if e == s {
			return true
		}
	}
	return false
}
