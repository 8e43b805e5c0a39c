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
const cSourcesHash = "5d4026a4c2f7124d5cb539d8311d2a06838763c4cc36d6f214d3a7ad56ac3111"
