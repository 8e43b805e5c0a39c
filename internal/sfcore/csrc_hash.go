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
const cSourcesHash = "b8f27ac0e1d7fcbf89d5f39ac2f7056288abac2a56a9c03d1fecd112ce5c1ae8"
