package schedfile

// Go's build cache does not notice edits to the C headers that
// schedfile_c.c includes from interposer/src and kmod (golang/go#24355).
// Their hash lives here, in a Go file of the package, so that updating it
// rebuilds the package. TestCSourcesHash fails while it is stale;
// regenerate it with
//
//	go generate ./pkg/schedfile
//
//go:generate go run github.com/gpuslice/gpuslice/internal/csrchash/gen

// cSourcesHash is the SHA-256 of the C sources, concatenated in order
// (see TestCSourcesHash and testenv.CheckCSourcesHash).
const cSourcesHash = "237962e3ac8e1221b4254a26a21088ec63df84f8af520468cafc648401032b80"
