package testenv

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/csrchash"
)

// CheckCSourcesHash guards a cgo package that compiles C files in from
// outside its directory (see package csrchash): it fails while want, the
// package's cSourcesHash, is not the SHA-256 of files (relative to dir,
// itself relative to the repository's root). go generate in the package
// rewrites the constant from this call's arguments, which must therefore
// be literals.
func CheckCSourcesHash(t *testing.T, dir string, files []string, want string) {
	t.Helper()
	sum, err := csrchash.Sum(Root(), dir, files)
	if err != nil {
		t.Fatal(err)
	}
	if sum != want {
		t.Fatalf("the C sources in %s changed but this package may still hold a stale build of them: run `go generate` in it", dir)
	}
}
