// Package certfile serves a TLS certificate and key from files and picks
// up new ones when the files change: a Kubernetes Secret volume (cert-
// manager's renewals, a chart's rotation) replaces them in place, and a
// server must not need a restart to present the new certificate.
package certfile

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// Reloader holds the certificate of a cert and key file pair.
type Reloader struct {
	// OnReloadError, if set, is told of each reload that fails (once per
	// change of the files).
	OnReloadError func(error)

	certFile, keyFile string

	mu   sync.Mutex
	cert *tls.Certificate
	seen [2]stamp // of the files as last loaded (or tried)
	err  error    // of the last failed reload; nil once one succeeds
}

// stamp tells a file's contents apart cheaply: a Secret volume swaps a
// symlink to a new directory (another inode), an editor rewrites in
// place (another size or time).
type stamp struct {
	ino, size int64
	mtime     time.Time
}

// New loads the pair once; an error here is the caller's to report (a
// server that starts without its certificate serves nothing).
func New(certFile, keyFile string) (*Reloader, error) {
	r := &Reloader{certFile: certFile, keyFile: keyFile}
	seen, err := r.stamps()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading %s and %s: %w", certFile, keyFile, err)
	}
	r.cert, r.seen = &cert, seen
	return r, nil
}

// GetCertificate is tls.Config's hook: the certificate, reloaded first if
// either file changed since it was read. A pair that fails to load (a
// half-written update, a key not matching its certificate) leaves the
// previous certificate in use until the files change again; Err says why.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen, err := r.stamps()
	if err != nil || seen == r.seen {
		return r.cert, nil
	}
	r.seen = seen
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		r.err = fmt.Errorf("reloading %s and %s: %w", r.certFile, r.keyFile, err)
		if r.OnReloadError != nil {
			r.OnReloadError(r.err)
		}
		return r.cert, nil
	}
	r.cert, r.err = &cert, nil
	return r.cert, nil
}

// Err is the error of the last reload that failed, nil when the files'
// current contents are in use.
func (r *Reloader) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *Reloader) stamps() ([2]stamp, error) {
	var s [2]stamp
	for i, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return s, err
		}
		s[i] = stamp{size: fi.Size(), mtime: fi.ModTime()}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			s[i].ino = int64(st.Ino)
		}
	}
	return s, nil
}

// ServerConfig is a TLS configuration serving the reloaded certificate,
// TLS 1.2 at least.
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
}
