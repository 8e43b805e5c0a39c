package interposer_test

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The engine's time at handovers and in the first period, no-module mode
// (issue 14, item 10): saturating tenants (1 ms kernels, two in flight,
// 5 ms slices, 20 units a period) on one simulated engine and one
// schedule file, each sampling its own engine time every 100 ms from its
// start (gstest tenant ... iv=100). What must hold, measured precisely by
// benchmarks/shares: two saturating tenants get at least 98 % of the
// engine time one tenant alone gets; each tenant's share of wall time is
// within 1.5 points of its target; every 100 ms interval from the first
// within 3 points. The margins here hold on a loaded 2-core machine.

const (
	engineSeconds = "2"
	ivMS          = 100
)

// Margins for a loaded 2-core machine (the precise figures: benchmarks/).
const (
	engineRatioMin = 0.96 // pair over alone
	wallTol        = 3.0  // points of wall time, whole run
	ivTol          = 6.0  // points of wall time, any 100 ms interval
)

// measured is one tenant's run: its share of wall time and of each
// 100 ms interval, in percent.
type measured struct {
	spec tenantSpec
	wall float64
	ivs  []float64
	res  result
}

func (m measured) String() string {
	var iv []string
	for _, v := range m.ivs {
		iv = append(iv, fmt.Sprintf("%.1f", v))
	}
	return fmt.Sprintf("%s(%s%%): %.1f%% of wall, intervals [%s]",
		m.spec.key, m.spec.quota, m.wall, strings.Join(iv, " "))
}

// runSampled runs saturating tenants together on m for engineSeconds.
func runSampled(t *testing.T, m *machine, specs ...tenantSpec) []measured {
	t.Helper()
	var ps []*proc
	for _, s := range specs {
		ps = append(ps, m.container(s).start("tenant", engineSeconds, tenantKernel, tenantDepth, "1",
			"go", "iv="+strconv.Itoa(ivMS)))
	}
	for _, p := range ps {
		p.await("ready", 30*time.Second)
	}
	for _, p := range ps {
		_, err := p.stdin.Write([]byte("go\n"))
		require.NoError(t, err)
	}
	var out []measured
	for i, r := range finish(t, ps) {
		o := measured{spec: specs[i], res: r}
		o.wall = 100 * float64(r.num(t, "busy_ns")) / float64(r.num(t, "wall_ns"))
		for _, f := range strings.Split(r.kv()["iv_busy_ns"], ",") {
			ns, err := strconv.ParseUint(f, 10, 64)
			require.NoError(t, err, "%s", r)
			o.ivs = append(o.ivs, 100*float64(ns)/(ivMS*1e6))
		}
		require.NotEmpty(t, o.ivs, "%s", r)
		out = append(out, o)
	}
	return out
}

// engineUse is the engine time the tenants got over the longest wall time.
func engineUse(t *testing.T, ms []measured) float64 {
	var busy, wall float64
	for _, o := range ms {
		busy += float64(o.res.num(t, "busy_ns"))
		wall = math.Max(wall, float64(o.res.num(t, "wall_ns")))
	}
	return busy / wall
}

// Two saturating tenants under policy 3 against one alone: the engine
// must not idle at the handovers between them.
func TestFileGateEngineUse(t *testing.T) {
	alone := engineUse(t, runSampled(t, schedMachine(t, "3"), tenantSpec{"a", "10"}))
	pair := engineUse(t, runSampled(t, schedMachine(t, "3"), tenantSpec{"a", "10"}, tenantSpec{"b", "10"}))
	t.Logf("policy 3, engine use: one tenant alone %.4f, two %.4f: ratio %.4f", alone, pair, pair/alone)
	assert.GreaterOrEqual(t, pair/alone, engineRatioMin,
		"two saturating tenants got %.4f of the engine, one alone %.4f", pair, alone)
}

// checkWall checks each tenant's share of wall time against want (whole
// run, wallTol) and every interval from the first (ivTol).
func checkWall(t *testing.T, ms []measured, want []float64) {
	t.Helper()
	for i, o := range ms {
		worst, at := 0.0, -1
		for k, v := range o.ivs {
			if e := math.Abs(v - want[i]); e > worst {
				worst, at = e, k
			}
		}
		t.Logf("%s; want %.1f: whole run %+.1f, worst interval %d %+.1f points",
			o, want[i], o.wall-want[i], at, o.ivs[max(at, 0)]-want[i])
		assert.InDelta(t, want[i], o.wall, wallTol, "%s's share of wall time\n%s", o.spec.key, o)
		assert.LessOrEqual(t, worst, ivTol, "%s's share of interval %d (from %d ms)\n%s",
			o.spec.key, at, at*ivMS, o)
	}
}

func TestFileGateWallFixed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		specs []tenantSpec
		want  []float64
	}{
		{"30/70", []tenantSpec{{"a", "30"}, {"b", "70"}}, []float64{30, 70}},
		{"70/30", []tenantSpec{{"a", "70"}, {"b", "30"}}, []float64{70, 30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkWall(t, runSampled(t, schedMachine(t, "1"), tc.specs...), tc.want)
		})
	}
}

func TestFileGateWallWeighted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		specs []tenantSpec
		want  []float64
	}{
		{"50/50", []tenantSpec{{"a", "50"}, {"b", "50"}}, []float64{50, 50}},
		{"5/5/10", []tenantSpec{{"a", "5"}, {"b", "5"}, {"c", "10"}}, []float64{25, 25, 50}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkWall(t, runSampled(t, schedMachine(t, "4"), tc.specs...), tc.want)
		})
	}
}
