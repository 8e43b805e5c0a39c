package cabi

// Go's build cache may not notice edits to the header this package
// includes from kmod/include/uapi. Its hash lives here, in a Go file of the
// package, so that updating it rebuilds the package. TestCSourcesHash fails
// while it is stale; regenerate it with
//
//	go generate ./pkg/kmod/internal/cabi
//
//go:generate env GPUSLICE_UPDATE_CSRC_HASH=1 go test -count=1 -run ^TestCSourcesHash$ .

// cSourcesHash is the SHA-256 of gpuslice.h (testenv.CheckCSourcesHash).
const cSourcesHash = "3b5bf024af9caffc369ce77826c6ef0b157d7de22e8f5d0e28be7b14b41e2d3d"
