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
const cSourcesHash = "7bb31468c2e5971442259a276621cf406e986ba86c65c32f1af08bd3917616ff"
