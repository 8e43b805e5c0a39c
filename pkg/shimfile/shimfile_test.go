package shimfile

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
)

// mapped maps path's pages the way the dynamic loader maps a shim.
func mapped(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(m) })
	return m
}

// readMapped copies a mapping's bytes; a page the file no longer backs
// (a truncated shim) is an error, not the SIGBUS that kills a process.
func readMapped(m []byte) (b []byte, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err, _ = r.(error)
			if err == nil {
				err = os.ErrInvalid
			}
		}
	}()
	return append([]byte(nil), m...), nil
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// leftovers are the temporary files Replace left in dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, ".*.new-*"))
	return names
}

func TestReplace(t *testing.T) {
	// The new shim is smaller than the old one: a truncating copy would
	// leave the old mapping's last pages without a file behind them.
	oldShim := bytes.Repeat([]byte("old shim "), 3000)
	newShim := []byte("new shim")
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, root string) (dst string)
	}{
		{"new file", func(t *testing.T, root string) string {
			return filepath.Join(root, "libgpuslice.so")
		}},
		{"missing directories", func(t *testing.T, root string) string {
			return filepath.Join(root, "usr/lib/gpuslice/libgpuslice.so")
		}},
		{"over an old shim", func(t *testing.T, root string) string {
			dst := filepath.Join(root, "libgpuslice.so")
			if err := os.WriteFile(dst, oldShim, 0o444); err != nil {
				t.Fatal(err)
			}
			return dst
		}},
		{"over a symlink", func(t *testing.T, root string) string {
			target := filepath.Join(root, "elsewhere.so")
			if err := os.WriteFile(target, oldShim, 0o644); err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(root, "libgpuslice.so")
			if err := os.Symlink(target, dst); err != nil {
				t.Fatal(err)
			}
			return dst
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			src := filepath.Join(root, "build.so")
			if err := os.WriteFile(src, newShim, 0o644); err != nil {
				t.Fatal(err)
			}
			dst := tc.setup(t, root)
			var old []byte
			var oldIno uint64
			if _, err := os.Stat(dst); err == nil {
				old, oldIno = mapped(t, dst), inode(t, dst)
			}

			if err := Replace(src, dst); err != nil {
				t.Fatal(err)
			}

			fi, err := os.Lstat(dst)
			if err != nil {
				t.Fatal(err)
			}
			if !fi.Mode().IsRegular() || fi.Mode().Perm() != Mode {
				t.Errorf("dst mode %v, want a regular file %v", fi.Mode(), Mode)
			}
			if os.Geteuid() == 0 {
				if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 {
					t.Errorf("dst owned by %d:%d, want root", st.Uid, st.Gid)
				}
			}
			if got, _ := os.ReadFile(dst); !bytes.Equal(got, newShim) {
				t.Errorf("dst holds %q, want %q", got, newShim)
			}
			if old != nil {
				if inode(t, dst) == oldIno {
					t.Errorf("dst kept its inode %d: the old shim was rewritten in place", oldIno)
				}
				got, err := readMapped(old)
				if err != nil {
					t.Fatalf("the old shim's mapping faulted after the replace: %v", err)
				}
				if !bytes.Equal(got, oldShim) {
					t.Errorf("the old shim's mapping changed under it (now starts %q)", got[:min(len(got), 16)])
				}
			}
			if l := leftovers(t, filepath.Dir(dst)); len(l) > 0 {
				t.Errorf("temporary files left: %v", l)
			}
		})
	}
}

func TestReplaceErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src, dst string // relative to a scratch root holding shim.so and dir/
		want     string
	}{
		{"missing source", "absent.so", "dst.so", "shim source: open"},
		{"source a directory", "dir", "dst.so", "not a regular file"},
		{"destination a directory", "shim.so", "dir", "is a directory"},
		{"destination's parent a file", "shim.so", "shim.so/dst.so", "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.WriteFile(filepath.Join(root, "shim.so"), []byte("shim"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(root, "dir"), 0o755); err != nil {
				t.Fatal(err)
			}
			before := listing(t, root)
			err := Replace(filepath.Join(root, tc.src), filepath.Join(root, tc.dst))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if after := listing(t, root); after != before {
				t.Errorf("the root changed:\n%s\nwas:\n%s", after, before)
			}
		})
	}
}

// listing names every file under root with its mode and contents.
func listing(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		data := ""
		if fi.Mode().IsRegular() {
			d, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			data = string(d)
		}
		b.WriteString(p + " " + fi.Mode().String() + " " + data + "\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
