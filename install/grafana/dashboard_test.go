// Package grafana checks gpuslice's Grafana dashboard (the Helm chart's
// dashboards/gpuslice.json, which it installs as a ConfigMap) against the
// agent's metric names.
package grafana

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// agentMetrics are the metric names gpuslice-nri exports at /metrics (the
// contract of issue 6; reference.md section 5 for the xgpu_* and
// gpu_schedule_policy names). The dashboard may query only these, and
// shows every one of them.
var agentMetrics = []string{
	// per vGPU: namespace, pod, container, card, uuid, vgpu
	"xgpu_memory_total",
	"xgpu_memory_used",
	"xgpu_core_percentage_total",
	"xgpu_core_percentage_used",
	// per card: card, uuid
	"xgpu_device_health",
	"gpu_schedule_policy",
	"xgpu_device_memory_total",
	"xgpu_device_memory_used",
	"xgpu_device_utilization",
	"xgpu_device_vgpu_memory_ratio",
	// per node
	"xgpu_node_vgpus",
	"xgpu_node_vgpu_memory_allocated",
	// the eBPF guard: per node (mode, state) and per vGPU
	"xgpu_node_guard",
	"xgpu_guard_refusals_total",
}

// The parts of the dashboard's JSON the test reads.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID        string      `json:"refId"`
		Expr         string      `json:"expr"`
		LegendFormat string      `json:"legendFormat"`
		Datasource   *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type variable struct {
	Name       string      `json:"name"`
	Type       string      `json:"type"`
	Query      any         `json:"query"` // a string, or an object with "query"
	Datasource *datasource `json:"datasource"`
}

// dashboardFile is the dashboard, in the Helm chart, which installs it as
// a ConfigMap (Helm reads only the chart's own files: one copy, there).
const dashboardFile = "../helm/gpuslice/dashboards/gpuslice.json"

// dsVar is the dashboard's datasource variable, which every query uses.
const dsVar = "DS_PROMETHEUS"

func load(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("gpuslice.json: %v", err)
	}
	return d
}

// allPanels is every panel, rows' inner panels included.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

func TestDashboard(t *testing.T) {
	d := load(t)
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 {
		t.Errorf("uid %q, title %q, schemaVersion %d: want both set and a schema of Grafana 9+", d.UID, d.Title, d.SchemaVersion)
	}

	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v, ok := vars[dsVar]; !ok || v.Type != "datasource" || v.Query != "prometheus" {
		t.Errorf("want a Prometheus datasource variable %s, have %+v", dsVar, v)
	}
	for _, name := range []string{"instance", "card", "namespace"} {
		if v, ok := vars[name]; !ok || v.Type != "query" {
			t.Errorf("want a query variable %q", name)
		}
	}

	used := map[string]bool{}
	check := func(where, expr string) {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: %q queries no metric", where, expr)
		}
		for _, n := range names {
			if !slices.Contains(agentMetrics, n) {
				t.Errorf("%s: %q queries %s, which the agent does not export", where, expr, n)
			}
			used[n] = true
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		if !isDS(v.Datasource) {
			t.Errorf("variable %s: datasource %+v, want uid ${%s}", v.Name, v.Datasource, dsVar)
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		sel, ok := labelValuesMetric(q)
		if !ok {
			t.Errorf("variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, q)
			continue
		}
		check("variable "+v.Name, sel)
	}

	ids := map[int]bool{}
	n := 0
	for _, p := range allPanels(d.Panels) {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
			t.Errorf("panel %q has no size", p.Title)
		}
		if p.Type == "row" {
			continue
		}
		n++
		if p.Title == "" {
			t.Errorf("panel %d has no title", p.ID)
		}
		if !isDS(p.Datasource) {
			t.Errorf("panel %q: datasource %+v, want uid ${%s}", p.Title, p.Datasource, dsVar)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no targets", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: refId %q empty or repeated", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Datasource != nil && !isDS(tg.Datasource) {
				t.Errorf("panel %q target %s: datasource %+v", p.Title, tg.RefID, tg.Datasource)
			}
			check("panel "+p.Title, tg.Expr)
		}
	}
	if n < 9 {
		t.Errorf("%d panels, want at least the 9 of the issue", n)
	}
	for _, m := range agentMetrics {
		if !used[m] {
			t.Errorf("no panel shows %s", m)
		}
	}
}

func isDS(ds *datasource) bool {
	return ds != nil && ds.Type == "prometheus" && ds.UID == "${"+dsVar+"}"
}

var labelValuesRE = regexp.MustCompile(`^\s*label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

// labelValuesMetric is the selector of a Grafana label_values(SELECTOR,
// LABEL) variable query.
func labelValuesMetric(q string) (string, bool) {
	m := labelValuesRE.FindStringSubmatch(q)
	if m == nil {
		return "", false
	}
	return m[1], true
}

var (
	stringsRE = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	bracesRE  = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	// label lists: sum by (a, b), on (c), group_left (d)
	labelListRE = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	// {__name__="x"} or {__name__=~"x.*"}
	nameMatcherRE = regexp.MustCompile(`__name__\s*=~?\s*"([^"]*)"`)
	identRE       = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
)

// promqlWords are PromQL's keywords and aggregation operators, which are
// not metric names even where no parenthesis follows them.
var promqlWords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "offset": true, "and": true, "or": true, "unless": true, "atan2": true,
	"sum": true, "avg": true, "min": true, "max": true, "count": true, "group": true, "stddev": true,
	"stdvar": true, "topk": true, "bottomk": true, "quantile": true, "count_values": true,
	"limitk": true, "limit_ratio": true, "inf": true, "nan": true,
}

// metricNames are the metric names a PromQL expression selects: the
// identifiers that are not functions, keywords, label names or strings,
// and the values of __name__ matchers (a regular expression as it is).
func metricNames(expr string) []string {
	var names []string
	for _, m := range nameMatcherRE.FindAllStringSubmatch(expr, -1) {
		names = append(names, m[1]) // a regular expression: not in any list, so reported
	}
	s := stringsRE.ReplaceAllString(expr, `""`)
	s = bracesRE.ReplaceAllString(s, " ")
	s = labelListRE.ReplaceAllString(s, " ")
	for _, loc := range identRE.FindAllStringIndex(s, -1) {
		name := s[loc[0]:loc[1]]
		// glued to a number (5m, 1e3) or a Grafana variable: not a name
		if loc[0] > 0 && strings.ContainsRune("0123456789.$", rune(s[loc[0]-1])) {
			continue
		}
		call := strings.HasPrefix(strings.TrimSpace(s[loc[1]:]), "(")
		if call || promqlWords[strings.ToLower(name)] || slices.Contains(names, name) {
			continue
		}
		names = append(names, name)
	}
	return names
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`xgpu_memory_used`: {"xgpu_memory_used"},
		`sum by (instance) (xgpu_node_vgpus{instance=~"$instance"})`:                   {"xgpu_node_vgpus"},
		`sum(rate(foo_total{a="b, c) x"}[$__rate_interval])) by (job) / on(job) bar`:   {"foo_total", "bar"},
		`max without (card) (a) > bool 0.5e3 or vector(1) offset 5m`:                   {"a"},
		`xgpu_memory_used{card=~"$card"} / ignoring(vgpu) group_left(model) card_info`: {"xgpu_memory_used", "card_info"},
		`{__name__="x"}`:    {"x"},
		`{__name__=~"x.*"}`: {"x.*"},
		`histogram_quantile(0.9, sum by (le) (rate(lat_bucket[5m]))) + lat_bucket * Inf`: {"lat_bucket"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%q) = %q, want %q", expr, got, want)
		}
	}
	if sel, ok := labelValuesMetric(`label_values(xgpu_memory_total{instance=~"$instance"}, namespace)`); !ok ||
		sel != `xgpu_memory_total{instance=~"$instance"}` {
		t.Errorf("labelValuesMetric: %q %v", sel, ok)
	}
	if _, ok := labelValuesMetric(`query_result(up)`); ok {
		t.Error("labelValuesMetric accepted query_result")
	}
}
