package grafana

import (
	"regexp"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuslice/gpuslice/pkg/metrics"
	"github.com/gpuslice/gpuslice/pkg/status"
)

func ptr[T any](v T) *T { return &v }

// fullNode has every figure known, so that the agent's collector exports
// every series it has.
func fullNode() *status.Node {
	return &status.Node{Node: "n", Enforce: "module", Time: time.Unix(1, 0).UTC(), Problems: []string{"p"},
		Guard: &status.Guard{Mode: "required", State: status.GuardOn, LostEvents: ptr(uint64(0)),
			BadMagic: ptr(uint64(0)), FilesFull: ptr(uint64(0))},
		Cards: []status.Card{{Index: 0, UUID: "GPU-a", Model: "Tesla T4", Policy: 1, MaxInst: 20,
			Healthy: ptr(true), MemoryTotalBytes: 16 << 30, MemoryUsedBytes: ptr(uint64(1 << 30)),
			UtilPercent: ptr(10.0), VGPUs: []status.VGPU{{ID: 1, Namespace: "ns", Pod: "p", Container: "c",
				ContainerID: "id", Mode: "compute", QuotaPercent: 30, HighPriority: true,
				MemoryCapBytes: 4 << 30, MemoryUsedBytes: ptr(uint64(1 << 29)),
				CoreUsedPercent: ptr(25.0), Processes: ptr(1),
				MemoryDriverBytes: ptr(uint64(1 << 29)), MemoryUnseenBytes: ptr(uint64(0)),
				GuardRefusals: ptr(uint64(0))}}}}}
}

// exported is what the agent's pkg/metrics exports for fullNode: metric
// name -> its label names, with the instance and job Prometheus adds.
func exported(t *testing.T) map[string][]string {
	t.Helper()
	snap := func() *status.Node { return fullNode() }
	fams, err := metrics.Registry(snap).Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, f := range fams {
		labels := []string{"instance", "job"}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		out[f.GetName()] = labels
	}
	// Every series the collector describes must appear for fullNode, or
	// the checks below would miss some.
	ch := make(chan *prometheus.Desc)
	go func() { metrics.New(snap).Describe(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	if n != len(out) {
		t.Fatalf("pkg/metrics describes %d series, exports %d for a node with every figure: extend fullNode", n, len(out))
	}
	return out
}

var (
	legendLabelRE  = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	matcherLabelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	byListRE       = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	wordRE         = regexp.MustCompile(`[a-zA-Z_][a-zA-Z0-9_]*`)
)

// labelsUsed are the label names a query and its legend refer to.
func labelsUsed(expr, legend string) []string {
	var out []string
	for _, m := range legendLabelRE.FindAllStringSubmatch(legend, -1) {
		out = append(out, m[1])
	}
	for _, sel := range bracesRE.FindAllString(stringsRE.ReplaceAllString(expr, `""`), -1) {
		for _, m := range matcherLabelRE.FindAllStringSubmatch(sel, -1) {
			out = append(out, m[1])
		}
	}
	for _, m := range byListRE.FindAllStringSubmatch(expr, -1) {
		out = append(out, wordRE.FindAllString(m[1], -1)...)
	}
	return out
}

// TestDashboardAgainstAgent: every metric the dashboard queries is one
// pkg/metrics exports, with the labels the dashboard selects, groups and
// names series by.
func TestDashboardAgainstAgent(t *testing.T) {
	have := exported(t)
	names := make([]string, 0, len(have))
	for n := range have {
		names = append(names, n)
	}
	sort.Strings(names)
	check := func(where, expr, legend string) {
		for _, m := range metricNames(expr) {
			labels, ok := have[m]
			if !ok {
				t.Errorf("%s: %s is not exported by pkg/metrics", where, m)
				continue
			}
			for _, l := range labelsUsed(expr, legend) {
				if l != "__name__" && !slices.Contains(labels, l) {
					t.Errorf("%s: %s has no label %q (it has %q)", where, m, l, labels)
				}
			}
		}
	}
	d := load(t)
	for _, v := range d.Templating.List {
		q, _ := v.Query.(string)
		if sel, ok := labelValuesMetric(q); ok {
			label := labelValuesRE.FindStringSubmatch(q)[2]
			check("variable "+v.Name, sel, "{{"+label+"}}")
		}
	}
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			check("panel "+p.Title, tg.Expr, tg.LegendFormat)
		}
	}
	// The contract's list, which TestDashboard holds the dashboard to,
	// and the agent agree.
	for _, m := range agentMetrics {
		if _, ok := have[m]; !ok {
			t.Errorf("the contract's %s is not exported by pkg/metrics", m)
		}
	}
	if t.Failed() {
		t.Logf("pkg/metrics exports %q", names)
	}
}

func TestLabelsUsed(t *testing.T) {
	got := labelsUsed(`sum by (instance, card) (x{namespace=~"$ns", pod!="a=b"}) / on(uuid) y`, "{{pod}} {{ vgpu }}")
	want := []string{"pod", "vgpu", "namespace", "pod", "instance", "card", "uuid"}
	if !slices.Equal(got, want) {
		t.Errorf("labelsUsed = %q, want %q", got, want)
	}
}
