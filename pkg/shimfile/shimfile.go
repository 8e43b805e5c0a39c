// Package shimfile puts a new copy of the shim (libgpuslice.so) where
// running containers have the old one mapped. A process maps the shim's
// pages from the file's inode; writing the file in place (cp, install
// without -T semantics, os.WriteFile) truncates that inode and rewrites
// its pages under the mapping, and the process dies of SIGBUS or runs
// code that is half new. Replace instead writes a new inode beside the
// old one and renames it over the path: processes that have the old one
// mapped keep it (the kernel frees it when the last of them exits), and
// the next process that loads the path gets the new one.
package shimfile

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpuslice/gpuslice/pkg/atomicfile"
)

// Mode is the installed shim's mode: read-only for everyone, so that no
// process (not even root by accident, with a writing open) rewrites the
// pages containers have mapped.
const Mode os.FileMode = 0o444

// Replace copies src to dst by rename: it writes src's contents to a
// temporary file in dst's directory (created 0755 when missing), syncs it
// to disk, makes it Mode and, when run as root, owned by root, renames it
// over dst and syncs the directory, so that after a crash dst is either
// the old file or the whole new one. The file dst named before, if any,
// is never opened for writing. On error dst is left as it was and the
// temporary file is removed.
func Replace(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("shim source: %w", err)
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil {
		return fmt.Errorf("shim source: %w", err)
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("shim source %s: not a regular file (%v)", src, fi.Mode().Type())
	}
	if fi, err := os.Lstat(dst); err == nil && fi.IsDir() {
		return fmt.Errorf("shim destination %s: is a directory, want the shim's file path", dst)
	}

	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("shim destination: %w", err)
	}
	if err := atomicfile.WriteFrom(dst, in, Mode); err != nil {
		return fmt.Errorf("shim destination: %w", err)
	}
	return nil
}
