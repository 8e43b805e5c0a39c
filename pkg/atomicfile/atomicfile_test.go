package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A replaced file is a new inode with the new contents and mode; a reader
// holding the old one keeps reading the old contents, and no temporary
// file is left beside it.
func TestWriteReplacesByRename(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(p, []byte("old"), 0o644))
	old, err := os.Open(p)
	require.NoError(t, err)
	defer old.Close()
	before, err := old.Stat()
	require.NoError(t, err)

	require.NoError(t, Write(p, []byte("new contents"), 0o440))
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "new contents", string(got))
	after, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o440), after.Mode().Perm())
	assert.False(t, os.SameFile(before, after), "a new inode, not the old one rewritten")
	b := make([]byte, 16)
	n, _ := old.ReadAt(b, 0)
	assert.Equal(t, "old", string(b[:n]), "the old inode is untouched")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left: %v", entries)
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("source broke") }

// A write that fails leaves the old file as it was and removes its
// temporary file; the error names what failed.
func TestWriteFailureLeavesOld(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(p, []byte("old"), 0o644))
	err := WriteFrom(p, failing{}, 0o644)
	require.ErrorContains(t, err, "source broke")
	assert.True(t, strings.Contains(err.Error(), "writing "+filepath.Join(dir, ".f.new-")), "%v", err)
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "old", string(got))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left: %v", entries)

	err = Write(filepath.Join(dir, "missing", "f"), nil, 0o644)
	assert.ErrorIs(t, err, os.ErrNotExist, "the directory must exist")
}
