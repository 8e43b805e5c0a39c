// Package chart tests gpuslice's Helm chart (gpuslice/) with the pinned
// Helm of tools.sh: helm lint, helm template in every shape the values
// give it, each object decoded strictly into its API type, the schema's
// refusals, the agent's configuration and RBAC, and the plain manifests of
// install/kubernetes rendered from it. GPUSLICE_SKIP_HELM=1 skips them.
package chart

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/helm"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// The release the tests render, as the plain manifests are rendered.
const (
	release   = "gpuslice"
	namespace = "gpuslice-system"
)

// The APIs a cluster with cert-manager and the Prometheus operator has,
// as Helm finds them by discovery: each group version, and each kind as
// group/version/Kind.
var (
	certManagerAPI = []string{"--api-versions", "cert-manager.io/v1"}
	monitoringAPI  = []string{"--api-versions", "monitoring.coreos.com/v1", "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"}
	// The group without the ServiceMonitor CRD: another operator's
	// PrometheusRule only.
	monitoringRulesOnly = []string{"--api-versions", "monitoring.coreos.com/v1", "--api-versions", "monitoring.coreos.com/v1/PrometheusRule"}
)

func chartDir() string { return filepath.Join(testenv.Root(), "install", "helm", "gpuslice") }

// scenarios are the shapes the chart renders in: every template and
// branch of it is in at least one.
var scenarios = []struct {
	name string
	args []string
}{
	{"defaults", nil},
	{"cert-manager and the Prometheus operator", append(append([]string{}, certManagerAPI...), monitoringAPI...)},
	{"cert-manager with an issuer of yours", append([]string{"--set", "webhook.tls.issuerRef.name=corp-ca",
		"--set", "webhook.tls.issuerRef.kind=ClusterIssuer"}, certManagerAPI...)},
	{"tls from a secret of yours", []string{"--set", "webhook.tls.mode=secret", "--set", "webhook.tls.secretName=corp-tls",
		"--set-string", "webhook.tls.caBundle=-----BEGIN CERTIFICATE-----"}},
	{"every agent key set", []string{"-f", "testdata/every-key.yaml"}},
	{"models, whole GPUs, one webhook, an API server address", []string{
		"--set", "gpuNodes.models={nvidia-tesla-t4,nvidia-h100}", "--set", "webhook.wholeGpus=true",
		"--set", "webhook.cardMemory.nvidia-tesla-t4=15Gi", "--set", "webhook.replicas=1",
		"--set", "apiServer.host=10.0.0.1", "--set", "apiServer.port=6443", "--set", "createNamespace=true"}},
	{"every pod option", append([]string{"-f", "testdata/pod-options.yaml"}, monitoringAPI...)},
	{"agent only", []string{"--set", "webhook.enabled=false", "--set", "policies.enabled=false",
		"--set", "deviceClass.enabled=false", "--set", "grafana.dashboard.enabled=false"}},
	{"no metrics, no status socket, file mode", []string{"--set", "metrics.enabled=false",
		"--set", "config.statusSocket=", "--set", "config.enforcement=file"}},
}

// helmRun runs the pinned helm in the chart's parent directory; the
// error carries helm's output.
func helmRun(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helm.Require(t), args...)
	cmd.Dir = filepath.Dir(chartDir())
	// Helm's own directories apart from the user's (repositories,
	// plugins, registry logins), and no cluster: the chart alone.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config",
		"HELM_DATA_HOME="+home+"/data", "KUBECONFIG="+home+"/no-kubeconfig")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// template renders the chart as release in namespace, with args.
func template(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	return helmRun(t, append([]string{"template", release, "gpuslice", "--namespace", namespace}, args...)...)
}

// mustTemplate renders the chart and splits it into its objects.
func mustTemplate(t *testing.T, args ...string) []object {
	t.Helper()
	out, err := template(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := split(out)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// helm lint --strict passes with every scenario's values.
func TestLint(t *testing.T) {
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			var args []string
			for i := 0; i < len(s.args); i++ { // lint takes values, not --api-versions
				if s.args[i] == "--api-versions" {
					i++
					continue
				}
				args = append(args, s.args[i])
			}
			if out, err := helmRun(t, append([]string{"lint", "--strict", "gpuslice"}, args...)...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// Every object of every scenario decodes strictly into its API type (an
// unknown or misplaced field fails), every policy and match condition
// compiles as the API server would compile it, and every object carries
// the labels the release is found by.
func TestTemplateDecodesStrictly(t *testing.T) {
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			objs := mustTemplate(t, s.args...)
			if len(objs) == 0 {
				t.Fatal("helm template rendered nothing")
			}
			for _, o := range objs {
				typed, err := decodeStrict(o.doc)
				if err != nil {
					t.Errorf("%s: %v", o, err)
					continue
				}
				if err := compileCEL(typed); err != nil {
					t.Errorf("%s: %v", o, err)
				}
				if err := checkLabels(o); err != nil {
					t.Errorf("%s: %v", o, err)
				}
			}
		})
	}
}

// The optional objects come exactly when their API or value is there.
func TestOptionalObjects(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want map[string]int // kind: count
	}{
		{"defaults", nil, map[string]int{"ServiceMonitor": 0, "Certificate": 0, "Issuer": 0, "Secret": 1,
			"Namespace": 0, "PodDisruptionBudget": 1, "ConfigMap": 2, "Service": 1}},
		{"monitoring API", monitoringAPI, map[string]int{"ServiceMonitor": 1, "Service": 2}},
		{"cert-manager API", certManagerAPI, map[string]int{"Certificate": 1, "Issuer": 1, "Secret": 0}},
		{"tls helm with cert-manager there", append([]string{"--set", "webhook.tls.mode=helm"}, certManagerAPI...),
			map[string]int{"Certificate": 0, "Secret": 1}},
		{"monitoring API without the ServiceMonitor CRD", monitoringRulesOnly, map[string]int{"ServiceMonitor": 0, "Service": 1}},
		{"monitoring API, ServiceMonitor off", append([]string{"--set", "metrics.serviceMonitor.enabled=false"}, monitoringAPI...),
			map[string]int{"ServiceMonitor": 0}},
		{"one webhook", []string{"--set", "webhook.replicas=1"}, map[string]int{"PodDisruptionBudget": 0}},
		{"namespace", []string{"--set", "createNamespace=true"}, map[string]int{"Namespace": 1}},
		{"webhook off", []string{"--set", "webhook.enabled=false"}, map[string]int{"Deployment": 0,
			"MutatingWebhookConfiguration": 0, "Secret": 0, "ValidatingAdmissionPolicy": 4}},
		{"agent off", []string{"--set", "agent.enabled=false"}, map[string]int{"DaemonSet": 0,
			"ValidatingAdmissionPolicy": 3, "DeviceClass": 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := map[string]int{}
			for _, o := range mustTemplate(t, c.args...) {
				got[o.Kind]++
			}
			for kind, n := range c.want {
				if got[kind] != n {
					t.Errorf("%d %s, want %d (all: %v)", got[kind], kind, n, got)
				}
			}
		})
	}
}

// The ServiceMonitor cannot scrape an agent that listens on 127.0.0.1:
// helm template says so rather than render one that never works.
func TestServiceMonitorRefusesLocalMetrics(t *testing.T) {
	_, err := template(t, append([]string{"--set", "config.metricsAddress=127.0.0.1:9410"}, monitoringAPI...)...)
	if err == nil || !strings.Contains(err.Error(), `config.metricsAddress "127.0.0.1:9410"`) {
		t.Fatalf("got %v, want the refusal naming config.metricsAddress", err)
	}
}
