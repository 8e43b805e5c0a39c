// Package atomicfile replaces a file whole: it writes the new contents to
// a temporary file beside the old one and renames it over the path. A
// reader sees the old file or the new one, never a truncated or partly
// written one, and a process that has the old file mapped (the shim, in a
// running container) keeps the old inode's pages: the old file is never
// opened for writing.
package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// WriteFrom writes what r gives to path by rename: a temporary file in
// path's directory (which must exist) gets the contents, mode and, when
// run as root, root's ownership, is synced to disk and renamed over path,
// and the directory is synced, so that after a crash path is either the
// old file or the whole new one. On error path is left as it was and the
// temporary file is removed. Errors name the file.
func WriteFrom(path string, r io.Reader, mode os.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".new-*")
	if err != nil {
		return err
	}
	if err := fill(tmp, r, mode); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("renaming the new file over %s: %w", path, err)
	}
	return syncDir(dir)
}

// Write is WriteFrom of data.
func Write(path string, data []byte, mode os.FileMode) error {
	return WriteFrom(path, bytes.NewReader(data), mode)
}

// fill writes the new file: contents, mode, owner, then fsync, so that
// the rename never makes a file visible whose data is not on disk.
func fill(tmp *os.File, r io.Reader, mode os.FileMode) error {
	if _, err := io.Copy(tmp, r); err != nil {
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		if err := tmp.Chown(0, 0); err != nil {
			return err
		}
	}
	return tmp.Sync()
}

// syncDir makes the rename itself durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	// Some file systems (a few FUSE and overlay setups) refuse fsync on
	// a directory; the rename has happened, only its durability is the
	// file system's.
	if errors.Is(err, syscall.EINVAL) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
