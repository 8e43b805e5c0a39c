package untrusted

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestOpenRegular(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "card0.sched")
	require.NoError(t, os.WriteFile(file, []byte("data"), 0o644))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(file, link))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o644))

	f, fi, err := OpenRegular(file)
	require.NoError(t, err)
	assert.EqualValues(t, 4, fi.Size())
	f.Close()

	for _, tc := range []struct {
		name, path string
		want       error
	}{
		{"symbolic link", link, unix.ELOOP},
		{"fifo, without blocking", fifo, ErrNotRegular},
		{"directory", dir, ErrNotRegular},
		{"missing", filepath.Join(dir, "none"), os.ErrNotExist},
	} {
		f, _, err := OpenRegular(tc.path)
		assert.ErrorIs(t, err, tc.want, tc.name)
		assert.Nil(t, f, tc.name)
	}
	_, _, err = OpenRegular(fifo)
	assert.ErrorIs(t, err, unix.EINVAL)
}
