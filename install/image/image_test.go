// Package image_test checks the container image install/image/build.sh
// builds: reproducible, the files and modes of its README, programs that
// run from it, the module's source that builds from it, importable by the
// end-to-end tests' containerd and pushable to a registry.
package image_test

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gpuslice/gpuslice/internal/e2e"
	"github.com/gpuslice/gpuslice/internal/ociimage"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

const imageName = "localhost/gpuslice/gpuslice:test"

var built struct {
	once sync.Once
	tar  string
	im   *ociimage.Image
	err  error
}

// theImage is the image, built once for the package's tests.
func theImage(t *testing.T) (string, *ociimage.Image) {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "gpuslice-image-")
		if err != nil {
			built.err = err
			return
		}
		built.tar = filepath.Join(dir, "gpuslice.tar")
		if built.err = ociimage.Build(built.tar, []string{imageName}); built.err == nil {
			built.im, built.err = ociimage.Read(built.tar)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.tar, built.im
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.tar != "" {
		os.RemoveAll(filepath.Dir(built.tar))
	}
	os.Exit(code)
}

// The same sources give the same bytes; a label changes the config (so
// the image's digest) and nothing of the layer.
func TestReproducible(t *testing.T) {
	first, im := theImage(t)
	again := filepath.Join(t.TempDir(), "again.tar")
	if err := ociimage.Build(again, []string{imageName}); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(first)
	b, _ := os.ReadFile(again)
	if !bytes.Equal(a, b) {
		im2, err := ociimage.Read(again)
		if err != nil {
			t.Fatal(err)
		}
		t.Fatalf("two builds differ: manifest %s then %s, layer %s then %s", im.ManifestDigest(), im2.ManifestDigest(),
			im.Manifest.Layers[0].Digest, im2.Manifest.Layers[0].Digest)
	}
	labelled := filepath.Join(t.TempDir(), "labelled.tar")
	if err := ociimage.Build(labelled, []string{imageName}, "io.gpuslice.test=2"); err != nil {
		t.Fatal(err)
	}
	im2, err := ociimage.Read(labelled)
	if err != nil {
		t.Fatal(err)
	}
	if im2.ManifestDigest() == im.ManifestDigest() || im2.Config.Config.Labels["io.gpuslice.test"] != "2" {
		t.Errorf("labelled image: digest %s (unlabelled %s), labels %v; want another digest and the label",
			im2.ManifestDigest(), im.ManifestDigest(), im2.Config.Config.Labels)
	}
	if im2.Manifest.Layers[0].Digest != im.Manifest.Layers[0].Digest {
		t.Errorf("a label changed the layer: %s, unlabelled %s", im2.Manifest.Layers[0].Digest, im.Manifest.Layers[0].Digest)
	}
}

func TestBadLabel(t *testing.T) {
	out, err := exec.Command(filepath.Join(testenv.Root(), "install", "image", "build.sh"),
		"--label", `a="b"`, filepath.Join(t.TempDir(), "x.tar"), imageName).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `--label a="b": want KEY=VALUE`) {
		t.Errorf("a label with quotes: %v\n%s; want refused, naming it", err, out)
	}
}

// The index names the image as ctr import and skopeo's oci-archive:PATH:TAG
// look it up; the config runs the agent with the chart's config path.
func TestLayout(t *testing.T) {
	_, im := theImage(t)
	if len(im.Index) != 1 {
		t.Fatalf("index: %d entries; want 1", len(im.Index))
	}
	e := im.Index[0]
	for k, want := range map[string]string{"io.containerd.image.name": imageName, "org.opencontainers.image.ref.name": "test"} {
		if e.Annotations[k] != want {
			t.Errorf("index entry annotation %s=%q; want %q", k, e.Annotations[k], want)
		}
	}
	if e.MediaType != "application/vnd.oci.image.manifest.v1+json" || e.Platform["architecture"] != "amd64" || e.Platform["os"] != "linux" {
		t.Errorf("index entry %+v; want an OCI manifest for linux/amd64", e)
	}
	if l := im.Manifest.Layers[0].MediaType; l != "application/vnd.oci.image.layer.v1.tar+gzip" {
		t.Errorf("layer media type %s; want a gzip OCI layer", l)
	}
	c := im.Config
	checks := []struct {
		what      string
		got, want any
	}{
		{"architecture/os", c.Architecture + "/" + c.OS, "amd64/linux"},
		{"Entrypoint", c.Config.Entrypoint, []string{"/usr/bin/gpuslice-nri"}},
		{"Cmd", c.Config.Cmd, []string{"-config", "/etc/gpuslice/config.yaml"}},
		{"Env", c.Config.Env, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}},
		{"User", c.Config.User, ""},
		{"created", c.Created, ""},
		{"licence label", c.Config.Labels["org.opencontainers.image.licenses"], "Apache-2.0"},
	}
	for _, ch := range checks {
		g, _ := json.Marshal(ch.got)
		w, _ := json.Marshal(ch.want)
		if !bytes.Equal(g, w) {
			t.Errorf("config %s: %s; want %s", ch.what, g, w)
		}
	}
}

// entry is what the image must hold at a path.
type entry struct {
	typ  byte
	mode int64
	link string
}

// fixed are the image's entries outside the module source and glibc.
var fixed = map[string]entry{
	"usr/bin/gpuslice-nri":               {tar.TypeReg, 0o755, ""},
	"usr/bin/gpuslice":                   {tar.TypeReg, 0o755, ""},
	"usr/bin/gpuslice-webhook":           {tar.TypeReg, 0o755, ""},
	"usr/share/gpuslice/libgpuslice.so":  {tar.TypeReg, 0o444, ""},
	"usr/share/doc/gpuslice/LICENSE":     {tar.TypeReg, 0o644, ""},
	"etc/gpuslice/config.yaml":           {tar.TypeReg, 0o644, ""},
	"etc/passwd":                         {tar.TypeReg, 0o644, ""},
	"etc/group":                          {tar.TypeReg, 0o644, ""},
	"tmp":                                {tar.TypeDir, 0o1777, ""},
	"lib":                                {tar.TypeSymlink, 0o777, "usr/lib"},
	"lib64":                              {tar.TypeSymlink, 0o777, "usr/lib64"},
	"usr/lib64/ld-linux-x86-64.so.2":     {tar.TypeSymlink, 0o777, "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"},
	"usr/lib/x86_64-linux-gnu/libc.so.6": {tar.TypeReg, 0o755, ""},
}

const libDir = "usr/lib/x86_64-linux-gnu/"

var srcDir = regexp.MustCompile(`^usr/src/gpuslice-[0-9.]+/`)

// Every entry is root's, with the mode of the README, and is either one
// of fixed, a directory, glibc or the module's source.
func TestFiles(t *testing.T) {
	_, im := theImage(t)
	for p, want := range fixed {
		f, ok := im.Files[p]
		switch {
		case !ok:
			t.Errorf("%s: missing", p)
		case f.Type != want.typ || f.Mode != want.mode || f.Linkname != want.link:
			t.Errorf("%s: type %c mode %o link %q; want type %c mode %o link %q", p, f.Type, f.Mode, f.Linkname,
				want.typ, want.mode, want.link)
		}
	}
	for p, f := range im.Files {
		if f.UID != 0 || f.GID != 0 {
			t.Errorf("%s: owner %d:%d; want 0:0", p, f.UID, f.GID)
		}
		_, isFixed := fixed[p]
		switch {
		case isFixed:
		case f.Type == tar.TypeDir:
			if f.Mode != 0o755 {
				t.Errorf("%s/: mode %o; want 755", p, f.Mode)
			}
		case strings.HasPrefix(p, libDir) && f.Type == tar.TypeReg:
			if f.Mode != 0o755 {
				t.Errorf("%s: mode %o; want 755", p, f.Mode)
			}
		case srcDir.MatchString(p) && f.Type == tar.TypeReg:
			if f.Mode != 0o644 {
				t.Errorf("%s: mode %o; want 644", p, f.Mode)
			}
		default:
			t.Errorf("%s: type %c, not in the image's README", p, f.Type)
		}
	}
	same := func(imagePath, repoPath string) {
		want, err := os.ReadFile(filepath.Join(testenv.Root(), repoPath))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(im.Files[imagePath].Data, want) {
			t.Errorf("%s is not %s", imagePath, repoPath)
		}
	}
	same("etc/gpuslice/config.yaml", "install/config.yaml")
	same("usr/share/gpuslice/libgpuslice.so", "build/image/c/lib/libgpuslice.so")
	checkModuleSource(t, im, same)
}

// The module's source is kmod/ as dkms add takes it: its sources, Kbuild,
// Makefile and dkms.conf, not its tests (guest/).
func checkModuleSource(t *testing.T, im *ociimage.Image, same func(string, string)) {
	dkms, err := os.ReadFile(filepath.Join(testenv.Root(), "kmod", "dkms.conf"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PACKAGE_VERSION="(.+)"$`).FindSubmatch(dkms)
	if m == nil {
		t.Fatal("kmod/dkms.conf: no PACKAGE_VERSION")
	}
	src := "usr/src/gpuslice-" + string(m[1]) + "/"
	kmod := filepath.Join(testenv.Root(), "kmod")
	n := 0
	err = filepath.WalkDir(kmod, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(kmod, p)
		base := filepath.Base(rel)
		wanted := strings.HasSuffix(base, ".c") || strings.HasSuffix(base, ".h") ||
			slices.Contains([]string{"Kbuild", "Makefile", "dkms.conf", "README.md"}, base)
		_, in := im.Files[src+rel]
		switch {
		case strings.HasPrefix(rel, "guest/") && in:
			t.Errorf("%s%s: the module's tests are in the image", src, rel)
		case strings.HasPrefix(rel, "guest/"):
		case wanted:
			same(src+rel, "kmod/"+rel)
			n++
		case in:
			t.Errorf("%s%s is in the image; not a source file", src, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"dkms.conf", "Kbuild", "Makefile", "gs_main.c", "core/gs_sched.c", "include/uapi/gpuslice.h"} {
		if _, ok := im.Files[src+f]; !ok {
			t.Errorf("%s%s: missing", src, f)
		}
	}
	t.Logf("module source: %d files under /%s", n, src)
}

// The agent and the shim find every library they link in the image (the
// agent's loader at its ELF interpreter); the two other commands are
// static.
func TestLinking(t *testing.T) {
	_, im := theImage(t)
	for _, c := range []struct {
		path   string
		static bool
	}{
		{"usr/bin/gpuslice-nri", false},
		{"usr/share/gpuslice/libgpuslice.so", false},
		{"usr/bin/gpuslice", true},
		{"usr/bin/gpuslice-webhook", true},
	} {
		f, err := elf.NewFile(bytes.NewReader(im.Files[c.path].Data))
		if err != nil {
			t.Errorf("%s: %v", c.path, err)
			continue
		}
		interp := ""
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				b := make([]byte, p.Filesz)
				_, _ = p.ReadAt(b, 0)
				interp = strings.TrimRight(string(b), "\x00")
			}
		}
		libs, _ := f.ImportedLibraries()
		switch {
		case c.static && (interp != "" || len(libs) > 0):
			t.Errorf("%s: interpreter %q, libraries %v; want a static program", c.path, interp, libs)
		case c.static:
		default:
			if interp != "" {
				libs = append(libs, interp)
			}
			for _, l := range libs {
				if !strings.HasPrefix(l, "/") {
					l = "/" + libDir + l
				}
				if _, err := resolve(im, l); err != nil {
					t.Errorf("%s needs %s: %v", c.path, l, err)
				}
			}
		}
	}
}

// resolve follows the image's symbolic links from p (absolute) to a
// regular file.
func resolve(im *ociimage.Image, p string) (string, error) {
	p = strings.TrimPrefix(path.Clean(p), "/")
	for range 16 {
		// The longest prefix that is a link.
		parts := strings.Split(p, "/")
		linked := false
		for i := range parts {
			pre := strings.Join(parts[:i+1], "/")
			f, ok := im.Files[pre]
			if ok && f.Type == tar.TypeSymlink {
				target := f.Linkname
				if !strings.HasPrefix(target, "/") {
					target = path.Join(path.Dir(pre), target)
				}
				p = strings.TrimPrefix(path.Join(target, strings.Join(parts[i+1:], "/")), "/")
				linked = true
				break
			}
		}
		if !linked {
			if f, ok := im.Files[p]; ok && f.Type == tar.TypeReg {
				return p, nil
			}
			return "", os.ErrNotExist
		}
	}
	return "", syscall.ELOOP
}

// unpack writes the layer's files under dir.
func unpack(t *testing.T, im *ociimage.Image, dir string) {
	paths := make([]string, 0, len(im.Files))
	for p := range im.Files {
		paths = append(paths, p)
	}
	slices.Sort(paths) // parents first
	for _, p := range paths {
		f, full := im.Files[p], filepath.Join(dir, p)
		var err error
		switch f.Type {
		case tar.TypeDir:
			err = os.MkdirAll(full, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(f.Linkname, full)
		case tar.TypeReg:
			err = os.WriteFile(full, f.Data, os.FileMode(f.Mode))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// The three programs start from the image's root alone: no library the
// build machine has and the image lacks.
func TestRuns(t *testing.T) {
	e2e.Require(t) // root, for chroot
	_, im := theImage(t)
	root := t.TempDir()
	unpack(t, im, root)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"/usr/bin/gpuslice-nri", "-help"}, "-nri-socket"},
		{[]string{"/usr/bin/gpuslice", "version"}, "gpuslice "},
		{[]string{"/usr/bin/gpuslice", "install-shim", "--help"}, "SRC DST"},
		{[]string{"/usr/bin/gpuslice-webhook", "-help"}, "-tls-cert-file"},
	} {
		cmd := exec.Command(c.args[0], c.args[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=/usr/bin"}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%s in the image: %v\n%s\nwant output with %q", strings.Join(c.args, " "), err, out, c.want)
		}
	}
}

// ctr import of the tar into the end-to-end tests' containerd gives CRI
// the image by its name, its digest and its config.
func TestImport(t *testing.T) {
	tarPath, im := theImage(t)
	env := e2e.Start(t, e2e.Options{})
	if err := env.ImportImage(tarPath); err != nil {
		t.Fatal(err)
	}
	out, err := env.Crictl("inspecti", "-o", "json", imageName)
	if err != nil {
		t.Fatalf("crictl inspecti %s: %v", imageName, err)
	}
	var info struct {
		Status struct {
			ID          string   `json:"id"`
			RepoTags    []string `json:"repoTags"`
			RepoDigests []string `json:"repoDigests"`
		} `json:"status"`
		Info struct {
			ImageSpec struct {
				Config struct {
					Entrypoint []string `json:"Entrypoint"`
				} `json:"config"`
			} `json:"imageSpec"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("crictl inspecti: %v\n%s", err, out)
	}
	s := info.Status
	if s.ID != im.Manifest.Config.Digest || !slices.Contains(s.RepoTags, imageName) {
		t.Errorf("CRI's image: id %s, tags %v; want id %s (the config's digest) and tag %s",
			s.ID, s.RepoTags, im.Manifest.Config.Digest, imageName)
	}
	if ep := info.Info.ImageSpec.Config.Entrypoint; !slices.Equal(ep, []string{"/usr/bin/gpuslice-nri"}) {
		t.Errorf("CRI's image entrypoint %v; want the agent", ep)
	}
	ls, err := exec.Command(filepath.Join(env.BinDir(), "ctr"), "--address", env.Address(), "-n", "k8s.io",
		"images", "ls", "name=="+imageName).CombinedOutput()
	if err != nil || !strings.Contains(string(ls), im.ManifestDigest()) {
		t.Errorf("ctr images ls: %v\n%s\nwant %s with digest %s", err, ls, imageName, im.ManifestDigest())
	}
}

// The module's source builds from the image alone against a kernel's
// headers, as a builder pod (or the node's DKMS, given the directory)
// builds it: nothing it needs was left out of /usr/src. Debian's headers
// are the guest test's (make guest-deps); GPUSLICE_SKIP_GUEST=1 skips.
func TestModuleBuilds(t *testing.T) {
	if os.Getenv("GPUSLICE_SKIP_GUEST") == "1" {
		t.Skip("GPUSLICE_SKIP_GUEST=1: no kernel headers to build gpuslice.ko against")
	}
	kdirs, _ := filepath.Glob("/usr/src/linux-headers-*-amd64")
	if len(kdirs) == 0 {
		t.Fatal("no /usr/src/linux-headers-*-amd64: run make guest-deps (kmod/guest/deps.sh), or set GPUSLICE_SKIP_GUEST=1")
	}
	slices.Sort(kdirs)
	_, im := theImage(t)
	root := t.TempDir()
	unpack(t, im, root)
	srcs, _ := filepath.Glob(filepath.Join(root, "usr/src/gpuslice-*"))
	if len(srcs) != 1 {
		t.Fatalf("the image's /usr/src has %v; want one gpuslice-VERSION", srcs)
	}
	out, err := exec.Command("make", "-C", srcs[0], "KDIR="+kdirs[len(kdirs)-1], "modules").CombinedOutput()
	if err != nil {
		t.Fatalf("make modules in the image's %s against %s: %v\n%s", srcs[0], kdirs[len(kdirs)-1], err, out)
	}
	if _, err := os.Stat(filepath.Join(srcs[0], "gpuslice.ko")); err != nil {
		t.Errorf("no gpuslice.ko after the build: %v\n%s", err, out)
	}
}
