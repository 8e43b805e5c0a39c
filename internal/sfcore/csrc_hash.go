package sfcore

// Go's build cache does not notice edits to the C files that this
// package's C files include from interposer/src and kmod/core
// (golang/go#24355). Their hash lives here, in a Go file of the package,
// so that updating it rebuilds the package. TestCSourcesHash fails while
// it is stale; regenerate it with
//
//	go generate ./internal/sfcore
//
//go:generate go run github.com/gpuslice/gpuslice/internal/csrchash/gen

// cSourcesHash is the SHA-256 of the C sources, concatenated in order
// (see TestCSourcesHash and testenv.CheckCSourcesHash).
const cSourcesHash = "4455a522f317dacda956aad9e6e9a5e38479aea8d919ed905294cd340892bd34"
