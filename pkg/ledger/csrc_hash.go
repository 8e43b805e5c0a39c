package ledger

// Go's build cache does not notice edits to the C files that ledger_c.c
// includes from interposer/src (golang/go#24355). Their hash lives here, in
// a Go file of the package, so that updating it rebuilds the package.
// TestCSourcesHash fails while it is stale; regenerate it with
//
//	go generate ./pkg/ledger
//
//go:generate go run github.com/gpuslice/gpuslice/internal/csrchash/gen

// cSourcesHash is the SHA-256 of the C sources, concatenated in order
// (see TestCSourcesHash and testenv.CheckCSourcesHash).
const cSourcesHash = "708bdd7570c8a9dd085e0a19e5c4dff5bf2bf9d4de80466e0bed7c4544c53047"
