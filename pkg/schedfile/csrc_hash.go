package schedfile

// Go's build cache does not notice edits to the C headers that
// schedfile_c.c includes from interposer/src and kmod (golang/go#24355).
// Their hash lives here, in a Go file of the package, so that updating it
// rebuilds the package. TestCSourcesHash fails while it is stale;
// regenerate it with
//
//	go generate ./pkg/schedfile
//
//go:generate env GPUSLICE_UPDATE_CSRC_HASH=1 go test -count=1 -run ^TestCSourcesHash$ .

// cSourcesHash is the SHA-256 of the C sources, concatenated in order
// (see TestCSourcesHash and testenv.CheckCSourcesHash).
const cSourcesHash = "ef7bfc10d9a8fcb01e546a0b7740fb28214b2aaac1d7c2ee498c92acdf01bc93"
