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
const cSourcesHash = "e4538c13eedb417d190d25132800b59c1a8fffcddfb28a3340516e8560190b59"
