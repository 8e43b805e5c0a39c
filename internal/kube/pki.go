package kube

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// pki is a cluster's certificate authority and the files made from it,
// under dir: one CA signs every serving and client certificate, and a
// separate key pair signs service-account tokens. ECDSA P-256 throughout:
// generating RSA keys would cost seconds of every start-up.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPEM  []byte

	mu     sync.Mutex
	serial int64
}

// certSpec is what a certificate says: its subject, names and use.
type certSpec struct {
	cn     string
	orgs   []string
	ips    []net.IP
	dns    []string
	server bool // a serving certificate; otherwise a client one
}

// newPKI creates the CA and the service-account key pair in dir.
func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "gpuslice-kube-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, caCert: cert, caKey: key, serial: 1,
		caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	if err := p.writeCA(); err != nil {
		return nil, err
	}
	return p, p.writeServiceAccountKeys()
}

// caFile is the CA certificate's path.
func (p *pki) caFile() string { return filepath.Join(p.dir, "ca.crt") }

func (p *pki) writeCA() error {
	keyPEM, err := encodeKey(p.caKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.caFile(), p.caPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(p.dir, "ca.key"), keyPEM, 0o600)
}

// writeServiceAccountKeys writes sa.key (the API server signs tokens
// with it) and sa.pub (it and the controller-manager verify them).
func (p *pki) writeServiceAccountKeys() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(p.dir, "sa.key"), keyPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(p.dir, "sa.pub"),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

// issue signs a certificate for spec and returns it and its key, in PEM.
func (p *pki) issue(spec certSpec) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	p.mu.Lock()
	p.serial++
	serial := p.serial
	p.mu.Unlock()
	usage := x509.ExtKeyUsageClientAuth
	if spec.server {
		usage = x509.ExtKeyUsageServerAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: spec.cn, Organization: spec.orgs},
		NotBefore:    p.caCert.NotBefore,
		NotAfter:     p.caCert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  spec.ips,
		DNSNames:     spec.dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// issueFiles signs a certificate for spec and writes it to <name>.crt and
// <name>.key in the PKI directory, whose paths it returns.
func (p *pki) issueFiles(name string, spec certSpec) (certFile, keyFile string, err error) {
	certPEM, keyPEM, err := p.issue(spec)
	if err != nil {
		return "", "", fmt.Errorf("kube: certificate %s: %v", name, err)
	}
	certFile = filepath.Join(p.dir, name+".crt")
	keyFile = filepath.Join(p.dir, name+".key")
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, os.WriteFile(keyFile, keyPEM, 0o600)
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// CACert is the cluster CA's certificate, in PEM: a webhook's
// clientConfig.caBundle, or what a client of the API server trusts.
func (c *Cluster) CACert() []byte { return append([]byte(nil), c.pki.caPEM...) }

// ServingCert issues a serving certificate signed by the cluster CA for the
// given IP addresses and DNS names (an admission webhook's, so that the API
// server trusts it with CACert as the caBundle), and returns it and its
// key in PEM.
func (c *Cluster) ServingCert(hosts ...string) (certPEM, keyPEM []byte, err error) {
	spec := certSpec{cn: "gpuslice-kube-serving", server: true}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			spec.ips = append(spec.ips, ip)
		} else {
			spec.dns = append(spec.dns, h)
		}
	}
	if len(hosts) > 0 {
		spec.cn = hosts[0]
	}
	return c.pki.issue(spec)
}
