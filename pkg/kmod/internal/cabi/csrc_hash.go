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
const cSourcesHash = "c940cd90974a142e84a529201f14a73c405097180c1ea46ef8acb46281a8e79b"
