package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/pkg/config"
	"github.com/gpuslice/gpuslice/pkg/gpu"
)

// values.schema.json refuses each bad value, and helm's error names the
// field (helm template runs the same check as helm install).
func TestSchemaRefusesBadValues(t *testing.T) {
	for _, c := range []struct {
		set   []string // --set arguments, or whole flags
		field string   // the path helm names
		why   string   // and what it says of it
	}{
		{[]string{"config.policy=7"}, "/config/policy", "maximum: got 7, want 6"},
		{[]string{"config.policy=-1"}, "/config/policy", "minimum: got -1, want 0"},
		{[]string{"config.policy=fixed"}, "/config/policy", "want integer"},
		{[]string{"config.maxInst=0"}, "/config/maxInst", "minimum: got 0, want 1"},
		{[]string{"config.maxInst=65"}, "/config/maxInst", "maximum: got 65, want 64"},
		{[]string{"config.sliceMs=0"}, "/config/sliceMs", "minimum: got 0, want 1"},
		{[]string{"config.sliceMs=101"}, "/config/sliceMs", "maximum: got 101, want 100"},
		{[]string{"config.reclaimMs=10001"}, "/config/reclaimMs", "maximum: got 10,001, want 10,000"},
		{[]string{"config.metricsWindowMs=99"}, "/config/metricsWindowMs", "minimum: got 99, want 100"},
		{[]string{"config.enforcement=kernel"}, "/config/enforcement", "'auto', 'module', 'file'"},
		{[]string{"config.placement=random"}, "/config/placement", "'binpack', 'spread'"},
		{[]string{"config.cdi=maybe"}, "/config/cdi", "'auto', 'never', 'always'"},
		{[]string{"config.dra=yes"}, "/config/dra", "'auto', 'on', 'off'"},
		{[]string{"config.stateDir=var/lib/gpuslice"}, "/config/stateDir", "does not match pattern"},
		{[]string{"config.statusSocket=agent.sock"}, "/config/statusSocket", "does not match pattern"},
		{[]string{"config.stateDir=null"}, "/config", "missing property 'stateDir'"},
		{[]string{"config.polcy=1"}, "/config", "additional properties 'polcy' not allowed"},
		{[]string{"config.cards[0].index=32"}, "/config/cards/0/index", "maximum: got 32, want 31"},
		{[]string{"config.cards[0].policy=1"}, "/config/cards/0", "missing property 'index'"},
		{[]string{"config.simulatedCards[0].index=0", "config.simulatedCards[0].memoryMiB=0"},
			"/config/simulatedCards/0/memoryMiB", "minimum: got 0, want 1"},
		{[]string{"--set-string=config.metricsAddress=9410"}, "/config/metricsAddress", "does not match pattern"},
		{[]string{"config.nodeName=Node_1"}, "/config/nodeName", "does not match pattern"},
		{[]string{"image.pullPolicy=Sometimes"}, "/image/pullPolicy", "'Always', 'IfNotPresent', 'Never'"},
		{[]string{"image.repository="}, "/image/repository", "minLength: got 0, want 1"},
		{[]string{"metrics.port=70000"}, "/metrics/port", "maximum: got 70,000, want 65,535"},
		{[]string{"apiServer.port=-1"}, "/apiServer/port", "minimum: got -1, want 0"},
		{[]string{"gpuNodes.label="}, "/gpuNodes/label", "minLength: got 0, want 1"},
		{[]string{"gpuNodes.models={nvidia tesla}"}, "/gpuNodes/models/0", "does not match pattern"},
		{[]string{"nri.socket=nri.sock"}, "/nri/socket", "does not match pattern"},
		{[]string{"agent.maxUnavailable=0"}, "/agent/maxUnavailable", "oneOf"},
		{[]string{"webhook.replicas=0"}, "/webhook/replicas", "minimum: got 0, want 1"},
		{[]string{"--set-string=webhook.reviewTimeout=8"}, "/webhook/reviewTimeout", "does not match pattern"},
		{[]string{"webhook.cardMemory.nvidia-tesla-t4=15GB"}, "/webhook/cardMemory/nvidia-tesla-t4", "does not match pattern"},
		{[]string{"webhook.tls.mode=vault"}, "/webhook/tls/mode", "'auto', 'certManager', 'helm', 'secret'"},
		{[]string{"webhook.tls.mode=secret"}, "/webhook/tls/secretName", "minLength: got 0, want 1"},
		{[]string{"metrics.serviceMonitor.interval=often"}, "/metrics/serviceMonitor/interval", "does not match pattern"},
		{[]string{"agentt.enabled=true"}, "", "additional properties 'agentt' not allowed"},
	} {
		t.Run(strings.Join(c.set, ","), func(t *testing.T) {
			var args []string
			for _, s := range c.set {
				if strings.HasPrefix(s, "--") {
					args = append(args, s)
				} else {
					args = append(args, "--set", s)
				}
			}
			_, err := template(t, args...)
			if err == nil {
				t.Fatal("helm template accepted it")
			}
			want := "at '" + c.field + "': "
			if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), c.why) {
				t.Fatalf("want %q with %q, got %v", want, c.why, err)
			}
		})
	}
}

// schema is the part of values.schema.json the tests read.
type schema struct {
	Type                 string             `json:"type"`
	Properties           map[string]*schema `json:"properties"`
	Items                *schema            `json:"items"`
	Required             []string           `json:"required"`
	Enum                 []string           `json:"enum"`
	Minimum              *int               `json:"minimum"`
	Maximum              *int               `json:"maximum"`
	AdditionalProperties any                `json:"additionalProperties"`
}

func loadSchema(t *testing.T) *schema {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir(), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s schema
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// jsonKeys are the keys of a struct's JSON form.
func jsonKeys(t reflect.Type) []string {
	var keys []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			keys = append(keys, name)
		}
	}
	sort.Strings(keys)
	return keys
}

func propertyNames(s *schema) []string {
	var keys []string
	for k := range s.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// The schema's config is the agent's: every key of pkg/config and no
// other, closed to unknown keys, with pkg/config's ranges and choices.
func TestSchemaFollowsAgentConfig(t *testing.T) {
	cfg := loadSchema(t).Properties["config"]
	if got, want := propertyNames(cfg), jsonKeys(reflect.TypeFor[config.Config]()); !slices.Equal(got, want) {
		t.Errorf("schema config keys %v, want pkg/config's %v", got, want)
	}
	cards, sim := cfg.Properties["cards"].Items, cfg.Properties["simulatedCards"].Items
	if got, want := propertyNames(cards), jsonKeys(reflect.TypeFor[config.CardConfig]()); !slices.Equal(got, want) {
		t.Errorf("schema cards keys %v, want %v", got, want)
	}
	if got, want := propertyNames(sim), jsonKeys(reflect.TypeFor[config.SimulatedCard]()); !slices.Equal(got, want) {
		t.Errorf("schema simulatedCards keys %v, want %v", got, want)
	}
	for name, s := range map[string]*schema{"config": cfg, "cards": cards, "simulatedCards": sim} {
		if s.AdditionalProperties != false {
			t.Errorf("%s: additionalProperties %v, want false (unknown keys are the agent's errors too)", name, s.AdditionalProperties)
		}
	}
	for _, r := range []struct {
		name   string
		s      *schema
		lo, hi int
	}{
		{"policy", cfg.Properties["policy"], 0, config.MaxPolicy},
		{"maxInst", cfg.Properties["maxInst"], 1, config.MaxMaxInst},
		{"sliceMs", cfg.Properties["sliceMs"], 1, config.MaxSliceMs},
		{"reclaimMs", cfg.Properties["reclaimMs"], 1, config.MaxReclaimMs},
		{"metricsWindowMs", cfg.Properties["metricsWindowMs"], config.MinMetricsWindowMs, config.MaxMetricsWindowMs},
		{"cards.index", cards.Properties["index"], 0, gpu.MaxCards - 1},
		{"cards.policy", cards.Properties["policy"], 0, config.MaxPolicy},
		{"cards.maxInst", cards.Properties["maxInst"], 1, config.MaxMaxInst},
		{"simulatedCards.index", sim.Properties["index"], 0, gpu.MaxCards - 1},
		{"simulatedCards.memoryMiB", sim.Properties["memoryMiB"], 1, config.MaxMemoryMiB},
	} {
		if r.s == nil || r.s.Minimum == nil || r.s.Maximum == nil || *r.s.Minimum != r.lo || *r.s.Maximum != r.hi {
			t.Errorf("%s: schema range %s, want %d-%d", r.name, bounds(r.s), r.lo, r.hi)
		}
	}
	for _, e := range []struct {
		key  string
		want []string
	}{
		{"placement", []string{string(config.PlacementBinpack), string(config.PlacementSpread)}},
		{"enforcement", []string{string(config.EnforcementAuto), string(config.EnforcementModule), string(config.EnforcementFile)}},
		{"guard", []string{string(config.GuardRequired), string(config.GuardOptional), string(config.GuardOff)}},
		{"cdi", []string{string(config.CDIAuto), string(config.CDINever), string(config.CDIAlways)}},
		{"dra", []string{string(config.DRAAuto), string(config.DRAOn), string(config.DRAOff)}},
	} {
		if got := cfg.Properties[e.key].Enum; !slices.Equal(got, e.want) {
			t.Errorf("%s: schema enum %v, want %v", e.key, got, e.want)
		}
	}
}

// bounds prints a schema's minimum and maximum.
func bounds(s *schema) string {
	if s == nil {
		return "missing"
	}
	b := func(p *int) string {
		if p == nil {
			return "none"
		}
		return strconv.Itoa(*p)
	}
	return b(s.Minimum) + "-" + b(s.Maximum)
}
