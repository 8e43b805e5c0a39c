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
const cSourcesHash = "a2525fb892dc7ac33e2c5404c05255d6bc361d9ae44e7463db5897b118b9921b"
