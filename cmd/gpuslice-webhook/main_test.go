package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testcert"
)

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the error, "" for none
	}{
		{[]string{"--card-memory=nvidia-tesla-t4=15Gi", "--card-memory=nvidia-a100=80Gi"}, ""},
		{[]string{"--card-memory=nvidia-tesla-t4"}, `"nvidia-tesla-t4": want MODEL=SIZE, e.g. nvidia-tesla-t4=15Gi`},
		{[]string{"--card-memory==15Gi"}, `"=15Gi": want MODEL=SIZE`},
		{[]string{"--card-memory=t4=15GB"}, `"t4=15GB": size "15GB"`},
		{[]string{"--card-memory=t4=64Mi"}, `"t4=64Mi": size "64Mi": want whole MiB, at least 128Mi`},
		{[]string{"--card-memory=t4=1.5"}, `want whole MiB, at least 128Mi`},
		{[]string{"--review-timeout=0s"}, `--review-timeout=0s: want a duration above 0 and at most 30s`},
		{[]string{"--review-timeout=31s"}, `--review-timeout=31s: want a duration above 0 and at most 30s`},
		{[]string{"extra"}, `unexpected arguments ["extra"]`},
	} {
		o, err := parseFlags(tc.args)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		case tc.want == "" && o.models["nvidia-a100"] != 80<<30:
			t.Errorf("%v: models %v", tc.args, o.models)
		}
	}
}

// The webhook serves HTTPS with the certificate of its files, its probes,
// and a certificate written over the files from the next connection on.
func TestServesAndReloadsItsCertificate(t *testing.T) {
	dir := t.TempDir()
	first, err := testcert.Write(dir, 1, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	// A kubeconfig of an API server that is never called: these requests
	// need none.
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags([]string{"--tls-cert-file=" + first.Cert, "--tls-key-file=" + first.Key, "--kubeconfig=" + kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln, o, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	url := "https://" + ln.Addr().String()

	for _, path := range []string{"/healthz", "/readyz"} {
		if body, serial := get(t, first.CA, url+path); body != "ok\n" || serial != 1 {
			t.Errorf("%s: %q from certificate %d, want ok from 1", path, body, serial)
		}
	}
	second, err := testcert.Write(dir, 2, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if _, serial := get(t, second.CA, url+"/healthz"); serial != 2 {
		t.Errorf("after the files changed: certificate %d, want 2", serial)
	}
	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1",` +
		`"kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","namespace":"team",` +
		`"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"i"}]}}}}`
	resp, err := client(second.CA).Post(url+"/mutate", "application/json", strings.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !strings.Contains(string(body), `"uid":"u1","allowed":true`) {
		t.Errorf("review answered %s", body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not return once cancelled")
	}
}

func client(ca []byte) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
}

// get fetches a URL, trusting only ca, and returns the body and the
// serial of the certificate the server presented.
func get(t *testing.T, ca []byte, url string) (string, int64) {
	t.Helper()
	resp, err := client(ca).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return string(body), resp.TLS.PeerCertificates[0].SerialNumber.Int64()
}
