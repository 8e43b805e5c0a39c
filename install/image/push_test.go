package image_test

import (
	"archive/tar"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// An operator pushes the tar to their registry as it is (what crane and
// skopeo do): go-containerregistry's client writes the layout's image to
// its registry, which checks every blob and the manifest, and reading it
// back gives the same digest and the agent's entrypoint.
func TestPush(t *testing.T) {
	tarPath, im := theImage(t)
	dir := t.TempDir()
	untar(t, tarPath, dir)
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	h, err := v1.NewHash(im.ManifestDigest())
	if err != nil {
		t.Fatal(err)
	}
	img, err := lp.Image(h)
	if err != nil {
		t.Fatalf("the layout's image %s: %v", h, err)
	}
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	ref, err := name.ParseReference(strings.TrimPrefix(reg.URL, "http://")+"/gpuslice/gpuslice:test", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatalf("pushing to the registry: %v", err)
	}
	desc, err := remote.Get(ref)
	if err != nil {
		t.Fatalf("the pushed image: %v", err)
	}
	if desc.Digest.String() != im.ManifestDigest() {
		t.Errorf("the registry has digest %s; want the layout's %s", desc.Digest, im.ManifestDigest())
	}
	pulled, err := desc.Image()
	if err == nil {
		var cf *v1.ConfigFile
		if cf, err = pulled.ConfigFile(); err == nil && strings.Join(cf.Config.Entrypoint, " ") != "/usr/bin/gpuslice-nri" {
			t.Errorf("the pulled image's entrypoint %v; want the agent", cf.Config.Entrypoint)
		}
	}
	if err != nil {
		t.Fatalf("pulling it back: %v", err)
	}
}

// untar unpacks the layout tar's regular files and directories into dir.
func untar(t *testing.T, tarPath, dir string) {
	t.Helper()
	f, err := os.Open(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(p, b, 0o644)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
