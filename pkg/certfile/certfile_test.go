package certfile

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testcert"
)

// serial is the serial number of the certificate the reloader serves.
func serial(t *testing.T, r *Reloader) int64 {
	t.Helper()
	c, err := r.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.Int64()
}

// start writes a certificate of that serial under dir and loads it.
func start(t *testing.T, dir string, n int64) (*Reloader, testcert.Files) {
	t.Helper()
	f, err := testcert.Write(dir, n, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	if got := serial(t, r); got != n {
		t.Fatalf("serial %d, want %d", got, n)
	}
	return r, f
}

func TestReloadsChangedFiles(t *testing.T) {
	dir := t.TempDir()
	r, _ := start(t, dir, 100)
	if _, err := testcert.Write(dir, 101, "localhost"); err != nil {
		t.Fatal(err)
	}
	if got := serial(t, r); got != 101 {
		t.Errorf("after the files changed: serial %d, want 101", got)
	}
	if err := r.Err(); err != nil {
		t.Errorf("Err after a good reload: %v", err)
	}
}

// A renewal that does not load (a key of another certificate, a file cut
// short) leaves the previous certificate in use, reports it once, and is
// taken up when the files are mended.
func TestKeepsTheLastGoodCertificate(t *testing.T) {
	dir := t.TempDir()
	r, f := start(t, dir, 200)
	var reported []error
	r.OnReloadError = func(err error) { reported = append(reported, err) }
	other, err := testcert.Write(t.TempDir(), 201, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(other.Key)
	if err != nil {
		t.Fatal(err)
	}
	// Replaced as a Secret volume replaces it: a new file renamed in.
	if err := os.WriteFile(f.Key+".new", key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(f.Key+".new", f.Key); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got := serial(t, r); got != 200 {
			t.Fatalf("with a mismatched key: serial %d, want the previous 200", got)
		}
	}
	if r.Err() == nil || len(reported) != 1 {
		t.Errorf("Err %v, %d reports; want the failure, reported once", r.Err(), len(reported))
	}
	// Mended: the changed files load.
	if _, err := testcert.Write(dir, 202, "localhost"); err != nil {
		t.Fatal(err)
	}
	if got := serial(t, r); got != 202 || r.Err() != nil {
		t.Errorf("mended: serial %d, Err %v; want 202, nil", got, r.Err())
	}
}

func TestNewNeedsAPair(t *testing.T) {
	dir := t.TempDir()
	if _, err := New(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")); err == nil {
		t.Error("no files: no error")
	}
	f, err := testcert.Write(dir, 1, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(f.Cert, f.Cert); err == nil {
		t.Error("a certificate for a key: no error")
	}
}
