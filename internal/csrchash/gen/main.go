// Command gen rewrites the cSourcesHash constant of the package in the
// current directory (go generate runs it there) from the sources that the
// package's TestCSourcesHash names. It reads files only: compiling the
// package here would cache a build of the new sources under the old
// constant (see package csrchash).
package main

import (
	"fmt"
	"os"

	"github.com/gpuslice/gpuslice/internal/csrchash"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "csrchash:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, files, err := csrchash.Sources(csrchash.TestFile)
	if err != nil {
		return err
	}
	root, err := csrchash.Root(".")
	if err != nil {
		return err
	}
	sum, err := csrchash.Sum(root, dir, files)
	if err != nil {
		return err
	}
	return csrchash.Update(csrchash.HashFile, sum)
}
