// Package csrchash keeps the hash of the C sources that a cgo package
// compiles in from outside its directory. Go's build cache does not notice
// edits to them (golang/go#24355), so such a package holds their SHA-256
// in the constant cSourcesHash of its csrc_hash.go: a new hash is a Go
// change, which rebuilds the package.
//
// The list of sources is the package's TestCSourcesHash call of
// testenv.CheckCSourcesHash, which fails while the constant is stale. The
// constant is rewritten by the command in gen (go generate), which never
// compiles the package: a build made with the old constant over the new
// sources would be cached under the old constant's key, and served again
// once the sources return to the content that constant names.
package csrchash

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

// HashFile and TestFile are the files of a guarded package that hold the
// constant and the list of sources.
const (
	HashFile = "csrc_hash.go"
	TestFile = "csrc_hash_test.go"
)

// Sum is the SHA-256, in hex, of files (relative to dir, itself relative
// to root) concatenated in order.
func Sum(root, dir string, files []string) (string, error) {
	h := sha256.New()
	for _, name := range files {
		b, err := os.ReadFile(filepath.Join(root, dir, name))
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Sources reads dir and files from the CheckCSourcesHash call in the Go
// file path: its second argument, a string literal, and its third, a
// []string literal of string literals.
func Sources(path string) (dir string, files []string, err error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		return "", nil, err
	}
	var call *ast.CallExpr
	ast.Inspect(f, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok && callee(c) == "CheckCSourcesHash" {
			call = c
		}
		return call == nil
	})
	if call == nil || len(call.Args) != 4 {
		return "", nil, fmt.Errorf("%s: no CheckCSourcesHash(t, dir, files, cSourcesHash) call", path)
	}
	if dir, err = literal(call.Args[1]); err != nil {
		return "", nil, fmt.Errorf("%s: CheckCSourcesHash's dir: %w", path, err)
	}
	list, ok := call.Args[2].(*ast.CompositeLit)
	if !ok {
		return "", nil, fmt.Errorf("%s: CheckCSourcesHash's files: want a []string literal", path)
	}
	for _, e := range list.Elts {
		name, err := literal(e)
		if err != nil {
			return "", nil, fmt.Errorf("%s: CheckCSourcesHash's files: %w", path, err)
		}
		files = append(files, name)
	}
	if len(files) == 0 {
		return "", nil, fmt.Errorf("%s: CheckCSourcesHash names no files", path)
	}
	return dir, files, nil
}

func callee(c *ast.CallExpr) string {
	switch fn := c.Fun.(type) {
	case *ast.SelectorExpr:
		return fn.Sel.Name
	case *ast.Ident:
		return fn.Name
	}
	return ""
}

func literal(e ast.Expr) (string, error) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", errors.New("want a string literal")
	}
	return strconv.Unquote(lit.Value)
}

var hashConst = regexp.MustCompile(`const cSourcesHash = "[0-9a-f]*"`)

// Update sets the constant cSourcesHash in the Go file path to sum.
func Update(path, sum string) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !hashConst.Match(src) {
		return fmt.Errorf("%s has no cSourcesHash constant to update", path)
	}
	src = hashConst.ReplaceAll(src, []byte(`const cSourcesHash = "`+sum+`"`))
	return os.WriteFile(path, src, 0o644)
}

// Root is the nearest directory at or above dir that holds go.mod.
func Root(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", fmt.Errorf("no go.mod at or above %s", dir)
		}
		d = up
	}
}
