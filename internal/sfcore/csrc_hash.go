package sfcore

// Go's build cache does not notice edits to the C files that this
// package's C files include from interposer/src and kmod/core
// (golang/go#24355). Their hash lives here, in a Go file of the package,
// so that updating it rebuilds the package. TestCSourcesHash fails while
// it is stale; regenerate it with
//
//	go generate ./internal/sfcore
//
//go:generate env GPUSLICE_UPDATE_CSRC_HASH=1 go test -count=1 -run ^TestCSourcesHash$ .

// cSourcesHash is the SHA-256 of the C sources, concatenated in order
// (see TestCSourcesHash and testenv.CheckCSourcesHash).
const cSourcesHash = "ee1ca4376b77ed7b1dbb82839cc17bdc7a0c4ee7493c94981b6a8d8ef69c274d"
