package sfcore

// Go's build cache does not notice edits to the C files that this
// package's C files include from interposer/src and kmod/core
// (golang/go#24355). Their hash lives here, in a Go file of the package,
// so that updating it rebuilds the package. TestCSourcesHash fails while
// it is stale; regenerate it with
//
//	go generate ./internal/sfcore
//
//go:generate go run github.com/gpuslice/gpuslice/internal/csrchash/gen

// cSourcesHash is the SHA-256 of the C sources, concatenated in order
// (see TestCSourcesHash and testenv.CheckCSourcesHash).
const cSourcesHash = "3fcc6717ba9f5f966f5bf8ed357db8b02b1079b434a424c79260abc845f70a06"
