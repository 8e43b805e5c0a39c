package cabi

// Go's build cache may not notice edits to the header this package
// includes from kmod/include/uapi. Its hash lives here, in a Go file of the
// package, so that updating it rebuilds the package. TestCSourcesHash fails
// while it is stale; regenerate it with
//
//	go generate ./pkg/kmod/internal/cabi
//
//go:generate go run github.com/gpuslice/gpuslice/internal/csrchash/gen

// cSourcesHash is the SHA-256 of gpuslice.h (testenv.CheckCSourcesHash).
const cSourcesHash = "7289cbaf8a198bb52868aff5ff3e664b926aa61cf8d16ea46ade352762854d7c"
