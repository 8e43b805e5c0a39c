package sched

// Go's build cache does not notice edits to the C files that sched_c.c
// includes from kmod/core (golang/go#24355). Their hash lives here, in a Go
// file of the package, so that updating it rebuilds the package.
// TestCSourcesHash fails while it is stale; regenerate it with
//
//	go generate ./pkg/sched
//
//go:generate go run github.com/gpuslice/gpuslice/internal/csrchash/gen

// cSourcesHash is the SHA-256 of the C sources, concatenated in order
// (see TestCSourcesHash and testenv.CheckCSourcesHash).
const cSourcesHash = "76cb2d7b5f7ba9cc3904bcdfb5c865e9f9d43566d2b85772d2c49b45f70f7b8c"
