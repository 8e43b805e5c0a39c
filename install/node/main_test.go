package node

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// build is a build directory as make build leaves it (bin/gpuslice-nri,
// bin/gpuslice, lib/libgpuslice.so), made once for the package's tests.
var build string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "gpuslice-install-build-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if err := makeBuild(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		build = dir
		return m.Run()
	}())
}

func makeBuild(dir string) error {
	if err := testenv.BuildC(); err != nil {
		return err
	}
	for pkg, bin := range map[string]string{"./nri-plugin": "gpuslice-nri", "./cmd/gpuslice": "gpuslice"} {
		if err := testenv.GoBuild(pkg, filepath.Join(dir, "bin", bin)); err != nil {
			return err
		}
	}
	return copyFile(testenv.Shim(), filepath.Join(dir, "lib", "libgpuslice.so"))
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// options install the test build into root.
func options(root string, out io.Writer) Options {
	return Options{DestDir: root, Source: testenv.Root(), Build: build, Out: out}
}

// install runs Install into root and returns its report.
func install(t *testing.T, o Options) string {
	t.Helper()
	var out bytes.Buffer
	o.Out = &out
	if err := Install(o); err != nil {
		t.Fatalf("install: %v\n%s", err, out.String())
	}
	return out.String()
}

func uninstall(t *testing.T, o Options) string {
	t.Helper()
	var out bytes.Buffer
	o.Out = &out
	if err := Uninstall(o); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out.String())
	}
	return out.String()
}

// writeFiles writes files (path relative to root: contents) under root.
func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, text := range files {
		h := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(h), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(h, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// tree lists everything under root: path, type and mode, owner, and the
// digest of a file's contents (a symlink's target), one line each.
func tree(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		st := fi.Sys().(*syscall.Stat_t)
		what := ""
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256(b)
			what = hex.EncodeToString(s[:12])
		case fi.Mode()&os.ModeSymlink != 0:
			what, _ = os.Readlink(p)
		}
		lines = append(lines, fmt.Sprintf("%s %v %d:%d %s", rel, fi.Mode(), st.Uid, st.Gid, what))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

// diffLines are the lines of b not in a, and of a not in b.
func diffLines(a, b string) (added, gone []string) {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	for l := range mb {
		if !ma[l] {
			added = append(added, l)
		}
	}
	for l := range ma {
		if !mb[l] {
			gone = append(gone, l)
		}
	}
	sort.Strings(added)
	sort.Strings(gone)
	return added, gone
}

// need installs Debian packages with internal/scripts/apt-need.sh (as
// root, the CI), or fails naming them.
func need(t *testing.T, pkgs ...string) {
	t.Helper()
	out, err := command(filepath.Join(testenv.Root(), "internal", "scripts", "apt-need.sh"),
		append([]string{"install/node tests"}, pkgs...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// command runs a program and returns its combined output.
func command(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
