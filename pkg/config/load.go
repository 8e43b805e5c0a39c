package config

// The file is read with sigs.k8s.io/yaml, which converts YAML to JSON and
// decodes that with encoding/json. The reasons: the Config type carries one
// set of tags (json), so the same struct reads the file, prints as JSON in
// logs and status output, and follows Kubernetes' conventions (the NRI and
// CDI tooling around the agent uses this library too); its strict mode
// rejects duplicate keys; and the decoding rules are encoding/json's, which
// are well known and stable. Its weakness, error messages without the
// position of a nested unknown key or mistyped value, is covered by
// checkKeys below, which walks the document against Config and names
// every bad key by its full path (cards[1].maxInst).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Load reads the configuration file at path over Default. An empty path
// means DefaultPath. A missing file is no error at DefaultPath (the result
// is Default()), but is one at any other path, which someone named on
// purpose.
//
// Load does not call Validate: the flags may still change the values.
// Validate the final configuration (Resolve does).
func Load(path string) (Config, error) {
	if path == "" {
		path = DefaultPath
	}
	return load(path, filepath.Clean(path) == DefaultPath)
}

// load reads the file at path over Default; optional: a missing file means
// Default().
func load(path string, optional bool) (Config, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && optional {
		return Default(), nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return Config{}, fmt.Errorf("config file %s does not exist: create it, or name no file "+
			"(the default, %s, may be absent)", path, DefaultPath)
	}
	if err != nil {
		return Config{}, fmt.Errorf("config file: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("config file %s: %w", path, err)
	}
	c.Path = path
	return c, nil
}

// Parse reads a configuration document over Default. Like Load it does not
// Validate.
func Parse(data []byte) (Config, error) {
	c := Default()
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return c, fmt.Errorf("not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return c, fmt.Errorf("not valid YAML: %w", err)
	}
	switch doc.(type) {
	case nil: // an empty file, or only comments
		return c, nil
	case map[string]any:
	default:
		return c, fmt.Errorf("the file must be a mapping of keys (like \"policy: 1\"), not %s", describe(doc))
	}
	if errs := checkValue("", doc, reflect.TypeFor[Config]()); len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	// The document matches Config; decode it for real. DisallowUnknownFields
	// only guards against checkValue missing something.
	dec = json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, err
	}
	return c, nil
}

// checkValue checks the decoded JSON value v at path against type t:
// unknown keys and values of the wrong kind, every one with its full path.
// null is accepted anywhere: it keeps the default.
func checkValue(path string, v any, t reflect.Type) []error {
	if v == nil {
		return nil
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	wrong := func(want string) []error {
		return []error{fmt.Errorf("%s: expected %s, got %s", path, want, describe(v))}
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return wrong("a mapping of keys")
		}
		fields := jsonFields(t)
		var errs []error
		for _, k := range sortedKeys(m) {
			sub := k
			if path != "" {
				sub = path + "." + k
			}
			ft, known := fields[k]
			if !known {
				errs = append(errs, fmt.Errorf("%s: unknown key; the keys%s are %s",
					sub, where(path), strings.Join(sortedKeys(fields), ", ")))
				continue
			}
			errs = append(errs, checkValue(sub, m[k], ft)...)
		}
		return errs
	case reflect.Slice:
		l, ok := v.([]any)
		if !ok {
			return wrong("a list")
		}
		var errs []error
		for i, e := range l {
			errs = append(errs, checkValue(fmt.Sprintf("%s[%d]", path, i), e, t.Elem())...)
		}
		return errs
	case reflect.Int:
		n, ok := v.(json.Number)
		if !ok {
			return wrong("an integer")
		}
		if _, err := n.Int64(); err != nil {
			return []error{fmt.Errorf("%s: %s is not an integer (or is too large)", path, n)}
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			return wrong("a string")
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return wrong("true or false")
		}
	default:
		panic("config: no check for fields of type " + t.String())
	}
	return nil
}

// jsonFields maps the JSON keys of struct type t to their field types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		fields[name] = f.Type
	}
	return fields
}

// where names the mapping at path for an error: "" at the top level.
func where(path string) string {
	if path == "" {
		return ""
	}
	if i := strings.LastIndexByte(path, '['); i > 0 {
		return " of a " + path[:i] + " entry"
	}
	return " of " + path
}

// describe names a decoded JSON value for an error.
func describe(v any) string {
	switch v := v.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return fmt.Sprintf("the string %q", v)
	case json.Number:
		return "the number " + v.String()
	case bool:
		return fmt.Sprintf("%t", v)
	default:
		return fmt.Sprintf("%v", v)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
