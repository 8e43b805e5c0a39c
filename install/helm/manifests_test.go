package chart

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testenv"
)

var update = flag.Bool("update", false, "write the plain manifests of install/kubernetes (make manifests)")

// plainValues are the values the plain manifests are rendered with (as
// release gpuslice in gpuslice-system): the namespace created, the
// webhook's certificate from cert-manager (a certificate the chart made
// would put a private key in the repository).
var plainValues = []string{"--set", "createNamespace=true", "--set", "webhook.tls.mode=certManager"}

// plainManifests are the files of install/kubernetes and the chart's
// templates each is rendered from, in the order they are applied.
var plainManifests = []struct {
	file      string
	templates []string
}{
	{"deviceclass.yaml", []string{"deviceclass.yaml"}},
	{"admission/policies.yaml", []string{"policies.yaml"}},
	{"admission/certificate.yaml", []string{"webhook-certificate.yaml"}},
	{"admission/webhook.yaml", []string{"namespace.yaml", "webhook-rbac.yaml", "webhook-deployment.yaml", "webhook-configuration.yaml"}},
	{"agent.yaml", []string{"namespace.yaml", "agent-rbac.yaml", "agent-config.yaml", "agent-daemonset.yaml"}},
	{"grafana-dashboard.yaml", []string{"dashboard.yaml"}},
}

const plainHeader = `# Rendered from the Helm chart install/helm/gpuslice by make manifests
# (helm template gpuslice install/helm/gpuslice -n gpuslice-system
# --set createNamespace=true --set webhook.tls.mode=certManager); edit the
# chart, not this file: a test fails when it is stale.
`

// The plain manifests of install/kubernetes are the chart's, rendered:
// `make manifests` writes them (go test -run TestPlainManifests -update),
// and this fails when one is stale. Every template but the optional
// ServiceMonitor's lands in one of them.
func TestPlainManifests(t *testing.T) {
	used := map[string]bool{"_helpers.tpl": true, "NOTES.txt": true, "agent-metrics.yaml": true}
	for _, m := range plainManifests {
		args := append([]string{}, plainValues...)
		for _, tpl := range m.templates {
			args = append(args, "--show-only", "templates/"+tpl)
			used[tpl] = true
		}
		objs := mustTemplate(t, args...)
		var b bytes.Buffer
		b.WriteString(plainHeader)
		for i, o := range objs {
			if i > 0 {
				b.WriteString("---\n")
			}
			b.Write(bytes.TrimPrefix(o.doc, []byte("---\n")))
		}
		path := filepath.Join(testenv.Root(), "install", "kubernetes", m.file)
		if *update {
			if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, b.Bytes()) {
			t.Errorf("install/kubernetes/%s is not the chart's rendering: run make manifests\n%s", m.file, firstDiff(got, b.Bytes()))
		}
	}
	entries, err := os.ReadDir(filepath.Join(chartDir(), "templates"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !used[e.Name()] {
			t.Errorf("templates/%s is in no plain manifest", e.Name())
		}
	}
}

// firstDiff shows the first line where two files differ.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ":\n  file:  " + gl + "\n  chart: " + wl
		}
	}
	return ""
}
