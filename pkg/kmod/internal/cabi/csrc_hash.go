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
const cSourcesHash = "7fd30606a72280da935a253f63e8cd1ad9b4fbb9f7b98a5cc4bd6cbb520f478e"
