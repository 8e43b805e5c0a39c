// Package untrusted opens files that a container can write or replace: the
// no-module ledger files and schedule files live in directories mounted
// into containers, so the agent reading them must not follow a link a
// container planted, nor hang on a FIFO put in a file's place.
package untrusted

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrNotRegular says the path names something other than a regular file
// (a FIFO, a directory, a device); it is an EINVAL.
var ErrNotRegular = fmt.Errorf("not a regular file: %w", unix.EINVAL)

// OpenRegular opens path read-only if it is a regular file itself: not a
// symbolic link (O_NOFOLLOW), and never blocking on a FIFO or a device
// (O_NONBLOCK, then checked). The caller closes the file; its size is in
// the returned FileInfo.
func OpenRegular(path string) (*os.File, os.FileInfo, error) {
	return openRegular(path, unix.O_RDONLY)
}

// OpenRegularWrite is OpenRegular for reading and writing; a file with
// more than one link is refused too (ErrNotRegular): the agent writes
// only into a file that exists under this one name, not into one a
// container linked from elsewhere.
func OpenRegularWrite(path string) (*os.File, os.FileInfo, error) {
	f, fi, err := openRegular(path, unix.O_RDWR)
	if err == nil && linkCount(fi) != 1 {
		f.Close()
		return nil, nil, &os.PathError{Op: "open (hard-linked)", Path: path, Err: ErrNotRegular}
	}
	return f, fi, err
}

func linkCount(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 0
}

func openRegular(path string, mode int) (*os.File, os.FileInfo, error) {
	flags := mode | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, &os.PathError{Op: "open " + fi.Mode().Type().String(), Path: path, Err: ErrNotRegular}
	}
	return f, fi, nil
}
