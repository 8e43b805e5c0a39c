package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// CheckCSourcesHash guards a cgo package that compiles C files in from
// outside its directory: Go's build cache does not notice edits to them
// (golang/go#24355), so the package keeps their SHA-256 in the constant
// cSourcesHash of its csrc_hash.go, and a change of hash rebuilds it.
// files are relative to dir, itself relative to the repository's root.
// The check fails while want is stale; with GPUSLICE_UPDATE_CSRC_HASH set
// (go generate) it rewrites the constant instead.
func CheckCSourcesHash(t *testing.T, dir string, files []string, want string) {
	t.Helper()
	h := sha256.New()
	for _, name := range files {
		b, err := os.ReadFile(filepath.Join(Root(), dir, name))
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if os.Getenv("GPUSLICE_UPDATE_CSRC_HASH") != "" {
		updateHash(t, sum)
		return
	}
	if sum != want {
		t.Fatalf("the C sources in %s changed but this package may still hold a stale build of them: run `go generate` in it", dir)
	}
}

func updateHash(t *testing.T, sum string) {
	src, err := os.ReadFile("csrc_hash.go")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`const cSourcesHash = "[0-9a-f]*"`)
	if !re.Match(src) {
		t.Fatal("csrc_hash.go has no cSourcesHash constant to update")
	}
	src = re.ReplaceAll(src, []byte(`const cSourcesHash = "`+sum+`"`))
	if err := os.WriteFile("csrc_hash.go", src, 0o644); err != nil {
		t.Fatal(err)
	}
}
