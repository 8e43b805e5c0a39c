// Package ociimage builds gpuslice's container image with
// install/image/build.sh and reads back the OCI image layout tar it
// writes: the index, the manifest, the config and the layer's files, for
// the tests of the image (install/image) and of its deployment
// (e2e/install).
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

// buildTimeout bounds one build: a cold one compiles the Go commands with
// -trimpath (a fresh build cache key) and the shim, about 2 minutes on 2
// cores; warm, about 10 s.
const buildTimeout = 15 * time.Minute

// Build runs install/image/build.sh: the image, named names, with the
// labels (KEY=VALUE) added, written to out.
func Build(out string, names []string, labels ...string) error {
	var args []string
	for _, l := range labels {
		args = append(args, "--label", l)
	}
	args = append(append(args, out), names...)
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(testenv.Root(), "install", "image", "build.sh"), args...)
	cmd.Dir = testenv.Root()
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("install/image/build.sh %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

// Descriptor is an OCI content descriptor.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    map[string]string `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Manifest is an OCI image manifest.
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

// Config is what the tests read of an OCI image config.
type Config struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Created      string `json:"created,omitempty"`
	Config       struct {
		User       string            `json:"User,omitempty"`
		Env        []string          `json:"Env"`
		Entrypoint []string          `json:"Entrypoint"`
		Cmd        []string          `json:"Cmd"`
		WorkingDir string            `json:"WorkingDir"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// File is one entry of the layer.
type File struct {
	Type     byte  // tar.TypeReg, tar.TypeDir, tar.TypeSymlink...
	Mode     int64 // permission bits (and setuid, setgid, sticky)
	UID, GID int
	Linkname string
	Data     []byte // a regular file's contents
}

// Image is a read OCI layout tar of one single-layer image.
type Image struct {
	Index    []Descriptor // index.json's manifests
	Manifest Manifest
	Config   Config
	// Files are the layer's entries by path, without "./" ("usr/bin/gpuslice").
	Files map[string]File
}

// ManifestDigest is the digest every index entry names (the image's
// digest, as a registry and containerd know it).
func (im *Image) ManifestDigest() string {
	if len(im.Index) == 0 {
		return ""
	}
	return im.Index[0].Digest
}

// Read reads an OCI layout tar of one manifest with one layer, checking
// every blob it reads against its digest and size.
func Read(tarPath string) (*Image, error) {
	blobs, err := readOuter(tarPath)
	if err != nil {
		return nil, err
	}
	var index struct {
		Manifests []Descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(blobs["index.json"], &index); err != nil {
		return nil, fmt.Errorf("%s: index.json: %v", tarPath, err)
	}
	im := &Image{Index: index.Manifests, Files: map[string]File{}}
	if len(im.Index) == 0 {
		return nil, fmt.Errorf("%s: index.json names no manifest", tarPath)
	}
	for _, d := range im.Index[1:] {
		if d.Digest != im.Index[0].Digest {
			return nil, fmt.Errorf("%s: index.json names two manifests (%s, %s); want one image", tarPath, im.Index[0].Digest, d.Digest)
		}
	}
	blob := func(d Descriptor) ([]byte, error) {
		b, ok := blobs["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
		switch {
		case !ok:
			return nil, fmt.Errorf("%s: blob %s missing", tarPath, d.Digest)
		case int64(len(b)) != d.Size:
			return nil, fmt.Errorf("%s: blob %s has %d bytes; its descriptor says %d", tarPath, d.Digest, len(b), d.Size)
		case digest(b) != d.Digest:
			return nil, fmt.Errorf("%s: blob %s has digest %s", tarPath, d.Digest, digest(b))
		}
		return b, nil
	}
	b, err := blob(im.Index[0])
	if err == nil {
		err = json.Unmarshal(b, &im.Manifest)
	}
	if err != nil {
		return nil, fmt.Errorf("the manifest: %v", err)
	}
	if b, err = blob(im.Manifest.Config); err == nil {
		err = json.Unmarshal(b, &im.Config)
	}
	if err != nil {
		return nil, fmt.Errorf("the config: %v", err)
	}
	if len(im.Manifest.Layers) != 1 {
		return nil, fmt.Errorf("%s: %d layers; want 1", tarPath, len(im.Manifest.Layers))
	}
	if b, err = blob(im.Manifest.Layers[0]); err == nil {
		err = im.readLayer(b)
	}
	if err != nil {
		return nil, fmt.Errorf("the layer: %v", err)
	}
	return im, nil
}

// readOuter reads the layout tar's files into memory, by name.
func readOuter(tarPath string) (map[string][]byte, error) {
	f, err := os.Open(tarPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %v", tarPath, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %v", tarPath, h.Name, err)
		}
		out[path.Clean(h.Name)] = b
	}
}

// readLayer reads the (gzip or plain) layer tar, checks its diff_id and
// fills Files.
func (im *Image) readLayer(b []byte) error {
	raw := b
	if strings.HasSuffix(im.Manifest.Layers[0].MediaType, "+gzip") {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return err
		}
		if raw, err = io.ReadAll(zr); err != nil {
			return err
		}
	}
	if d := im.Config.RootFS.DiffIDs; len(d) != 1 || d[0] != digest(raw) {
		return fmt.Errorf("diff_ids %v; the layer's is %s", d, digest(raw))
	}
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(path.Clean(h.Name), "./")
		if name == "." {
			name = ""
		}
		f := File{Type: h.Typeflag, Mode: h.Mode & 0o7777, UID: h.Uid, GID: h.Gid, Linkname: h.Linkname}
		if h.Typeflag == tar.TypeReg {
			if f.Data, err = io.ReadAll(tr); err != nil {
				return err
			}
		}
		im.Files[name] = f
	}
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}
