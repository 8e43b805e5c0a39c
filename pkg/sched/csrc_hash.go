package sched

// Go's build cache does not notice edits to the C files that sched_c.c
// includes from kmod/core (golang/go#24355). Their hash lives here, in a Go
// file of the package, so that updating it rebuilds the package.
// TestCSourcesHash fails while it is stale; regenerate it with
//
//	go generate ./pkg/sched
//
//go:generate env GPUSLICE_UPDATE_CSRC_HASH=1 go test -count=1 -run ^TestCSourcesHash$ .

// cSourcesHash is the SHA-256 of the C sources, concatenated in order
// (see TestCSourcesHash and testenv.CheckCSourcesHash).
const cSourcesHash = "4cbcf3f448bae744bcd42f3089c1baa31b64a253d534170f2f6ca55a33ba6ffb"
