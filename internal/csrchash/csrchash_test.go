package csrchash

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSources(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		dir       string
		files     []string
		err       string
	}{{
		name:  "qualified call",
		src:   `testenv.CheckCSourcesHash(t, "kmod/core", []string{"a.h", "b.c"}, cSourcesHash)`,
		dir:   "kmod/core",
		files: []string{"a.h", "b.c"},
	}, {
		name:  "raw strings",
		src:   "CheckCSourcesHash(t, `.`, []string{`x/y.c`}, cSourcesHash)",
		dir:   ".",
		files: []string{"x/y.c"},
	}, {
		name: "no call",
		src:  `t.Log("nothing")`,
		err:  "no CheckCSourcesHash",
	}, {
		name: "dir not a literal",
		src:  `testenv.CheckCSourcesHash(t, dir, []string{"a.h"}, cSourcesHash)`,
		err:  "dir: want a string literal",
	}, {
		name: "files not a literal",
		src:  `testenv.CheckCSourcesHash(t, ".", files, cSourcesHash)`,
		err:  "files: want a []string literal",
	}, {
		name: "a file not a literal",
		src:  `testenv.CheckCSourcesHash(t, ".", []string{"a.h", name}, cSourcesHash)`,
		err:  "files: want a string literal",
	}, {
		name: "no files",
		src:  `testenv.CheckCSourcesHash(t, ".", []string{}, cSourcesHash)`,
		err:  "names no files",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), TestFile)
			src := "package p\n\nfunc TestCSourcesHash(t *testing.T) {\n\t" + tc.src + "\n}\n"
			require.NoError(t, os.WriteFile(path, []byte(src), 0o644))
			dir, files, err := Sources(path)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.dir, dir)
			require.Equal(t, tc.files, files)
		})
	}
}

func TestSumAndUpdate(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "src"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "src", "a.h"), []byte("a"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "src", "b.c"), []byte("b"), 0o644))
	sum, err := Sum(root, "src", []string{"a.h", "b.c"})
	require.NoError(t, err)
	// SHA-256 of "ab": the files in order, concatenated.
	require.Equal(t, "fb8e20fc2e4c3f248c60c39bd652f3c1347298bb977b8b4d5903b85055620603", sum)
	_, err = Sum(root, "src", []string{"a.h", "gone.c"})
	require.ErrorContains(t, err, "gone.c")

	hash := filepath.Join(root, HashFile)
	require.NoError(t, os.WriteFile(hash, []byte("package p\n\nconst cSourcesHash = \"00\"\n"), 0o644))
	require.NoError(t, Update(hash, sum))
	b, err := os.ReadFile(hash)
	require.NoError(t, err)
	require.Equal(t, "package p\n\nconst cSourcesHash = \""+sum+"\"\n", string(b))

	require.NoError(t, os.WriteFile(hash, []byte("package p\n"), 0o644))
	require.ErrorContains(t, Update(hash, sum), "no cSourcesHash constant")
}

// Every guarded package regenerates its constant with gen, never by
// compiling itself, and names literal sources that exist.
func TestGuardedPackages(t *testing.T) {
	root, err := Root(".")
	require.NoError(t, err)
	var hashes []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == ".git" || d.Name() == "build"):
			return filepath.SkipDir
		case d.Name() == HashFile:
			hashes = append(hashes, path)
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, hashes)
	for _, h := range hashes {
		pkg := filepath.Dir(h)
		t.Run(strings.TrimPrefix(pkg, root+"/"), func(t *testing.T) {
			src, err := os.ReadFile(h)
			require.NoError(t, err)
			require.Contains(t, string(src), "\n//go:generate go run github.com/gpuslice/gpuslice/internal/csrchash/gen\n")
			dir, files, err := Sources(filepath.Join(pkg, TestFile))
			require.NoError(t, err)
			_, err = Sum(root, dir, files)
			require.NoError(t, err)
		})
	}
}
