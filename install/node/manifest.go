package node

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ManifestPath is where the installer remembers what it installed (host
// path): make uninstall removes exactly that, and a second make install
// knows an unedited default config from an edited one.
const ManifestPath = "/var/lib/gpuslice-install/manifest.json"

// Manifest is what one install left on the node.
type Manifest struct {
	// Files are the files installed, host path to what was written.
	Files map[string]File `json:"files"`
	// Dirs are the directories the install created, removed again when
	// empty at uninstall.
	Dirs []string `json:"dirs"`
	// ConfigSHA256 is the digest of the default /etc/gpuslice/config.yaml
	// as last written; "" when the file there is not one the installer
	// wrote.
	ConfigSHA256 string `json:"configSHA256"`
	// DKMS is the module's "name/version" once dkms add ran.
	DKMS string `json:"dkms,omitempty"`
	// ModuleSHA256 is the digest of the module source DKMS was given.
	ModuleSHA256 string `json:"moduleSHA256,omitempty"`
}

// File is one installed file.
type File struct {
	SHA256 string `json:"sha256"`
	// KeepIfEdited: uninstall leaves the file when it no longer holds
	// what was written (a containerd config the installer created and the
	// administrator then edited).
	KeepIfEdited bool `json:"keepIfEdited,omitempty"`
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fileDigest is the digest of the file at path, "" when there is none.
func fileDigest(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return digest(b)
}

// loadManifest reads the manifest under root; none is an empty one.
func loadManifest(root string) (*Manifest, error) {
	m := &Manifest{Files: map[string]File{}}
	b, err := os.ReadFile(filepath.Join(root, ManifestPath))
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("the install manifest %s: %w (remove it to install afresh)", ManifestPath, err)
	}
	if m.Files == nil {
		m.Files = map[string]File{}
	}
	return m, nil
}

// paths are the manifest's files, sorted.
func (m *Manifest) paths() []string {
	out := make([]string, 0, len(m.Files))
	for p := range m.Files {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// addDir records a directory the install created.
func (m *Manifest) addDir(d string) {
	if !contains(m.Dirs, d) {
		m.Dirs = append(m.Dirs, d)
	}
}

// dirsDeepestFirst are the created directories, children before parents.
func (m *Manifest) dirsDeepestFirst() []string {
	out := append([]string(nil), m.Dirs...)
	sort.Slice(out, func(i, j int) bool {
		di, dj := strings.Count(out[i], "/"), strings.Count(out[j], "/")
		if di != dj {
			return di > dj
		}
		return out[i] > out[j]
	})
	return out
}
