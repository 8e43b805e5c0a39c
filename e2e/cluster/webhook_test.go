package cluster_test

// The admission layer as install/kubernetes/admission installs it: the
// ValidatingAdmissionPolicies of policies.yaml as they are, and of
// webhook.yaml its namespace, ServiceAccount, RBAC and
// MutatingWebhookConfiguration, whose clientConfig is pointed at the
// webhook binary (cmd/gpuslice-webhook) serving at the node's address
// with a certificate of the cluster CA (the Deployment's image is issue
// 15's). The binary runs with the ServiceAccount's identity, so the RBAC
// and the template policy hold it as they would in a pod.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/e2e"
	"github.com/gpuslice/gpuslice/internal/kube"
	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/internal/yamldocs"
)

// webhookUser is the webhook's ServiceAccount as the API server names it.
const webhookUser = "system:serviceaccount:gpuslice-system:gpuslice-webhook"

// webhook is the admission layer on the shared cluster: installed once,
// the process started and stopped by the scenarios.
type webhook struct {
	c          *kube.Cluster
	bin        string
	args       []string
	listen     string
	dir        string
	installErr error

	mu      sync.Mutex
	starts  int
	cmd     *exec.Cmd
	done    chan struct{}
	logPath string
}

var admission struct {
	once sync.Once
	w    *webhook
}

// theWebhook installs the admission layer once, and returns it running
// (started again for each test that asks, stopped when it ends).
func theWebhook(t *testing.T) *webhook {
	t.Helper()
	n := theNode(t) // its slice tells the webhook the cards' memory
	admission.once.Do(func() {
		w := &webhook{c: n.c}
		w.installErr = w.install()
		admission.w = w
	})
	w := admission.w
	if w.installErr != nil {
		t.Fatal(w.installErr)
	}
	w.start(t)
	t.Cleanup(w.stop)
	return w
}

func (w *webhook) install() error {
	dir, err := os.MkdirTemp("", "gpuslice-webhook-")
	if err != nil {
		return err
	}
	w.dir = dir
	w.bin = filepath.Join(dir, "gpuslice-webhook")
	if err := testenv.GoBuild("./cmd/gpuslice-webhook", w.bin); err != nil {
		return err
	}
	certPEM, keyPEM, err := w.c.ServingCert(w.c.NodeIP())
	if err != nil {
		return err
	}
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(cert, certPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		return err
	}
	kubeconfig, err := w.c.UserKubeconfig(webhookUser, "system:serviceaccounts", "system:serviceaccounts:gpuslice-system")
	if err != nil {
		return err
	}
	port, err := freePortOn(w.c.NodeIP())
	if err != nil {
		return err
	}
	w.listen = net.JoinHostPort(w.c.NodeIP(), strconv.Itoa(port))
	w.args = []string{"--listen", w.listen, "--tls-cert-file", cert, "--tls-key-file", key, "--kubeconfig", kubeconfig}

	// The policies first: no window where an untranslated pod gets in.
	root := filepath.Join(testenv.Root(), "install", "kubernetes", "admission")
	policies, err := os.ReadFile(filepath.Join(root, "policies.yaml"))
	if err != nil {
		return err
	}
	if out, err := w.c.Apply(string(policies)); err != nil {
		return fmt.Errorf("applying policies.yaml: %v\n%s", err, out)
	}
	return w.installWebhookYAML(filepath.Join(root, "webhook.yaml"))
}

// installWebhookYAML applies webhook.yaml but its Deployment, Service and
// PodDisruptionBudget (the process runs on the node instead), with the
// webhook configuration's clientConfig pointed at the process.
func (w *webhook) installWebhookYAML(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	docs, err := yamldocs.Split(b)
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	var keep []string
	for _, doc := range docs {
		var head struct{ Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		switch head.Kind {
		case "Deployment", "Service", "PodDisruptionBudget":
		case "MutatingWebhookConfiguration":
			var mwc admissionregv1.MutatingWebhookConfiguration
			if err := yaml.UnmarshalStrict(doc, &mwc); err != nil {
				return fmt.Errorf("%s: %v", path, err)
			}
			url := "https://" + w.listen + "/mutate"
			for i := range mwc.Webhooks {
				mwc.Webhooks[i].ClientConfig = admissionregv1.WebhookClientConfig{URL: &url, CABundle: w.c.CACert()}
			}
			delete(mwc.Annotations, "cert-manager.io/inject-ca-from")
			out, err := yaml.Marshal(&mwc)
			if err != nil {
				return err
			}
			keep = append(keep, string(out))
		default:
			keep = append(keep, string(doc))
		}
	}
	if out, err := w.c.Apply(strings.Join(keep, "\n---\n")); err != nil {
		return fmt.Errorf("applying webhook.yaml: %v\n%s", err, out)
	}
	return nil
}

func freePortOn(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start starts the webhook and waits until it is ready.
func (w *webhook) start(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.starts++
	w.logPath = filepath.Join(w.dir, fmt.Sprintf("webhook-%d.log", w.starts))
	f, err := os.Create(w.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w.cmd = exec.Command(w.bin, w.args...)
	w.cmd.Stdout, w.cmd.Stderr = f, f
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(w.cmd, w.done)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsTo(w.c)}}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(pollTimeout)
	for {
		resp, err := hc.Get("https://" + w.listen + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-w.done:
			t.Fatalf("the webhook exited: %s", readLog(w.logPath))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook is not ready after %s: %v\n%s", pollTimeout, err, readLog(w.logPath))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop stops the webhook (SIGTERM) and waits for it.
func (w *webhook) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd == nil {
		return
	}
	_ = w.cmd.Process.Signal(os.Interrupt)
	select {
	case <-w.done:
	case <-time.After(20 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.done
	}
	w.cmd = nil
}

// registered waits until the API server calls the webhook: a dry-run pod
// in the reference's form comes back translated.
func (w *webhook) registered(t *testing.T, ns string) {
	t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for {
		pod := referencePod("probe", 1, 0)
		cx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		got, err := w.c.Client().CoreV1().Pods(ns).Create(cx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		cancel()
		if err == nil && len(got.Spec.ResourceClaims) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server does not call the webhook after %s: %v\nwebhook log:\n%s", pollTimeout, err, w.logText())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (w *webhook) logText() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return readLog(w.logPath)
}

func readLog(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	return e2e.Tail(string(b), 40)
}

// tlsTo trusts the cluster CA, which signed the webhook's certificate.
func tlsTo(c *kube.Cluster) *tls.Config {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CACert())
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}
