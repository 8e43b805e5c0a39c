package kube_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/kube"
)

// denial is what the test's webhook answers every review with.
const denial = "refused by the harness's test webhook"

// serveDenyingWebhook serves, at the node's address, an admission webhook
// that refuses everything with denial, over TLS with a certificate of the
// cluster CA for the given names, and returns its port.
func serveDenyingWebhook(t *testing.T, c *kube.Cluster, names ...string) int {
	t.Helper()
	certPEM, keyPEM, err := c.ServingCert(append([]string{c.NodeIP()}, names...)...)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", net.JoinHostPort(c.NodeIP(), "0"), &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: false,
			Result: &metav1.Status{Message: denial}}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(review)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// TestWebhookAtNodeAddress registers a validating webhook served by the
// test at the node's address, reached by URL and through a Service
// without selector whose EndpointSlice points there (the API server
// routes to endpoints: nothing routes ClusterIPs), and sees the API server
// call it: a pod it covers is refused with its message.
func TestWebhookAtNodeAddress(t *testing.T) {
	c := kube.Shared(t)
	ns := c.Namespace(t)
	const svc = "harness-webhook"
	port := serveDenyingWebhook(t, c, svc+"."+ns+".svc")
	makeService(t, c, ns, svc, port)

	url := "https://" + net.JoinHostPort(c.NodeIP(), strconv.Itoa(port)) + "/validate"
	routes := []struct {
		name   string
		client admissionregv1.WebhookClientConfig
	}{
		{"url", admissionregv1.WebhookClientConfig{URL: &url}},
		{"service", admissionregv1.WebhookClientConfig{Service: &admissionregv1.ServiceReference{
			Namespace: ns, Name: svc, Path: ptr.To("/validate"), Port: ptr.To(int32(443))}}},
	}
	for _, r := range routes {
		t.Run(r.name, func(t *testing.T) {
			cfg := r.client
			cfg.CABundle = c.CACert()
			registerWebhook(t, c, ns, "by-"+r.name, cfg)
			if err := refusedOnceActive(c, ns, "by-"+r.name); err != nil {
				t.Error(err)
			}
		})
	}
	// A pod no webhook covers is admitted.
	if _, err := c.CreatePod(ns, kube.BusyboxPod("uncovered")); err != nil {
		t.Errorf("creating a pod no webhook covers: %v", err)
	}
}

// refusedOnceActive creates pods labelled for the webhook until one is
// refused (the API server starts calling a new webhook a moment after its
// registration) and wants the refusal to carry the webhook's message.
func refusedOnceActive(c *kube.Cluster, ns, label string) error {
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		pod := kube.BusyboxPod(fmt.Sprintf("covered-%s-%d", label, i))
		pod.Labels = map[string]string{"harness-webhook": label}
		_, err := c.CreatePod(ns, pod)
		switch {
		case err != nil && strings.Contains(err.Error(), denial):
			return nil
		case err != nil:
			return fmt.Errorf("creating a pod the webhook covers: %v, want its refusal %q", err, denial)
		case time.Now().After(deadline):
			return fmt.Errorf("pods the webhook covers are still admitted 30 s after its registration")
		}
		_ = c.Client().CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
		time.Sleep(200 * time.Millisecond)
	}
}

// makeService makes a Service without selector whose one endpoint is the
// node's address at port.
func makeService(t *testing.T, c *kube.Cluster, ns, name string, port int) {
	t.Helper()
	cx := t.Context()
	_, err := c.Client().CoreV1().Services(ns).Create(cx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Client().DiscoveryV1().EndpointSlices(ns).Create(cx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{c.NodeIP()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port))}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// registerWebhook registers a fail-closed validating webhook for pods of
// namespace ns labelled harness-webhook=label, removed when the test ends.
func registerWebhook(t *testing.T, c *kube.Cluster, ns, label string, client admissionregv1.WebhookClientConfig) {
	t.Helper()
	cx := t.Context()
	name := ns + "-" + label
	hooks := c.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations()
	_, err := hooks.Create(cx, &admissionregv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregv1.ValidatingWebhook{{
			Name:         label + ".harness.gpuslice.io",
			ClientConfig: client,
			Rules: []admissionregv1.RuleWithOperations{{
				Operations: []admissionregv1.OperationType{admissionregv1.Create},
				Rule: admissionregv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
					Resources: []string{"pods"}},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
				"kubernetes.io/metadata.name": ns}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"harness-webhook": label}},
			FailurePolicy:           ptr.To(admissionregv1.Fail),
			SideEffects:             ptr.To(admissionregv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hooks.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}
