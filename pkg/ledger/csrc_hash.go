package ledger

// Go's build cache does not notice edits to the C files that ledger_c.c
// includes from interposer/src (golang/go#24355). Their hash lives here, in
// a Go file of the package, so that updating it rebuilds the package.
// TestCSourcesHash fails while it is stale; regenerate it with
//
//	go generate ./pkg/ledger
//
//go:generate env GPUSLICE_LEDGER_UPDATE_HASH=1 go test -count=1 -run ^TestCSourcesHash$ .

// cSourcesHash is the SHA-256 of cSources, concatenated in order.
const cSourcesHash = "4ae1051f4ae54eaa9b62041e59cd8a07c9747428734703f7bddca9a31ad7194f"
