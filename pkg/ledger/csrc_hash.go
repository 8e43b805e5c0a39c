package ledger

// Go's build cache does not notice edits to the C files that ledger_c.c
// includes from interposer/src (golang/go#24355). Their hash lives here, in
// a Go file of the package, so that updating it rebuilds the package.
// TestCSourcesHash fails while it is stale; regenerate it with
//
//	go generate ./pkg/ledger
//
//go:generate env GPUSLICE_UPDATE_CSRC_HASH=1 go test -count=1 -run ^TestCSourcesHash$ .

// cSourcesHash is the SHA-256 of the C sources, concatenated in order
// (see TestCSourcesHash and testenv.CheckCSourcesHash).
const cSourcesHash = "f2ca825a545b82b33e2984b6be6a941564757829a122bafcda3c449cdf0d3e02"
