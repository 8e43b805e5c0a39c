package shares

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
)

// Shares of wall time, whole run and per 100 ms interval from the first
// (issue 14, item 10): saturating tenants sample their own engine time
// every 100 ms from their start (gstest tenant iv=100), and a share is
// the engine time of the complete intervals over their length, so a last
// launch that waits for a slice past the deadline does not stretch it.
// Targets: within 1.5 points of the quota's share over the run, within 3
// in every interval.

const wallIvMS = 100

// sampled is a saturating tenant that samples its engine time.
func sampled(key, quota string) tenant {
	t := busy(key, quota, 1000)
	t.ivMS = wallIvMS
	return t
}

// wallScenarios: policy 1 (fixed) both ways round, policy 4 (weighted)
// even and 5/5/10.
func wallScenarios() []scenario {
	return []scenario{
		{"wall-p1-30-70", "1", "fixed 30/70",
			[]tenant{sampled("a", "30"), sampled("b", "70")}, []float64{30, 70}},
		{"wall-p1-70-30", "1", "fixed 70/30",
			[]tenant{sampled("a", "70"), sampled("b", "30")}, []float64{70, 30}},
		{"wall-p4-50-50", "4", "weighted 50/50",
			[]tenant{sampled("a", "50"), sampled("b", "50")}, []float64{50, 50}},
		{"wall-p4-5-5-10", "4", "weighted 5/5/10",
			[]tenant{sampled("a", "5"), sampled("b", "5"), sampled("c", "10")}, []float64{25, 25, 50}},
	}
}

// intervals is a tenant's engine time per interval, percent of it.
func intervals(tb testing.TB, o outcome) []float64 {
	tb.Helper()
	var out []float64
	for _, f := range strings.Split(o.kv["iv_busy_ns"], ",") {
		ns, err := strconv.ParseFloat(f, 64)
		if err != nil {
			tb.Fatalf("tenant %s: iv_busy_ns=%q: %v", o.key, o.kv["iv_busy_ns"], err)
		}
		out = append(out, 100*ns/(float64(o.ivMS)*1e6))
	}
	return out
}

// wallRow is one tenant's shares of wall time as measured.
type wallRow struct {
	key, quota     string
	want, got      float64 // whole run
	first, worstIv float64 // errors, points
	worstAt, nIv   int
	ivs            []float64
}

type wallResult struct {
	scenario
	rows                  []wallRow
	worst, worstIv, first float64 // the largest errors, points
	use                   float64 // the engine's use, all tenants
}

func runWall(tb testing.TB, s scenario, secs int) wallResult {
	tb.Helper()
	out := newCard(tb, s.policy).run(tb, secs, s.tenants...)
	r := wallResult{scenario: s}
	for i, o := range out {
		ivs := intervals(tb, o)
		w := wallRow{key: o.key, quota: o.quota, want: s.want[i], ivs: ivs, nIv: len(ivs)}
		for k, v := range ivs {
			w.got += v / float64(len(ivs))
			if e := math.Abs(v - w.want); e > w.worstIv {
				w.worstIv, w.worstAt = e, k
			}
		}
		w.first = math.Abs(ivs[0] - w.want)
		r.use += w.got
		r.worst = math.Max(r.worst, math.Abs(w.got-w.want))
		r.worstIv = math.Max(r.worstIv, w.worstIv)
		r.first = math.Max(r.first, w.first)
		r.rows = append(r.rows, w)
	}
	return r
}

// windowUse is the engine time of n saturating tenants (policy 3) over
// their common window, in [0, 1].
func windowUse(tb testing.TB, n int) float64 {
	tb.Helper()
	ts := []tenant{sampled("a", "10"), sampled("b", "10")}[:n]
	var use float64
	for _, o := range newCard(tb, "3").run(tb, seconds, ts...) {
		ivs := intervals(tb, o)
		for _, v := range ivs {
			use += v / 100 / float64(len(ivs))
		}
	}
	return use
}

func wallTable(rs []wallResult) string {
	var sb strings.Builder
	sb.WriteString("| policy | scenario | tenant | quota | target % of wall | measured % | error | first 100 ms | worst 100 ms (at) |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range rs {
		for _, w := range s.rows {
			fmt.Fprintf(&sb, "| %s | %s | %s | %s | %.1f | %.1f | %+.1f | %+.1f | %.1f (%d ms) |\n",
				s.policy, s.label, w.key, w.quota, w.want, w.got, w.got-w.want,
				w.ivs[0]-w.want, w.worstIv, w.worstAt*wallIvMS)
		}
		fmt.Fprintf(&sb, "| %s | %s | worst | | | engine %.1f | %.1f | %.1f | %.1f |\n",
			s.policy, s.label, s.use, s.worst, s.first, s.worstIv)
	}
	return sb.String()
}

var wallMeasured struct {
	done        bool
	rs          []wallResult
	alone, pair float64
}

// BenchmarkWall runs the wall-time scenarios and the engine use of two
// saturating tenants against one alone (about 20 s), once whatever b.N.
func BenchmarkWall(b *testing.B) {
	if !wallMeasured.done {
		for _, s := range wallScenarios() {
			wallMeasured.rs = append(wallMeasured.rs, runWall(b, s, seconds))
		}
		wallMeasured.alone = windowUse(b, 1)
		wallMeasured.pair = windowUse(b, 2)
		wallMeasured.done = true
		fmt.Print(wallTable(wallMeasured.rs))
	}
	for _, s := range wallMeasured.rs {
		b.ReportMetric(s.worst, s.name+"-err-pts")
		b.ReportMetric(s.first, s.name+"-first-iv-err-pts")
		b.ReportMetric(s.worstIv, s.name+"-worst-iv-err-pts")
	}
	b.ReportMetric(wallMeasured.alone, "engine-alone")
	b.ReportMetric(wallMeasured.pair, "engine-pair")
	b.ReportMetric(wallMeasured.pair/wallMeasured.alone, "engine-ratio")
	b.Logf("engine use, policy 3, window of the 100 ms intervals: alone %.4f, two %.4f: ratio %.4f",
		wallMeasured.alone, wallMeasured.pair, wallMeasured.pair/wallMeasured.alone)
}

// TestWallRuns keeps the wall benchmark honest in CI: one scenario for 1 s
// samples every interval. No precise figure is asserted.
func TestWallRuns(t *testing.T) {
	r := runWall(t, wallScenarios()[2], 1)
	t.Logf("\n%s", wallTable([]wallResult{r}))
	for _, w := range r.rows {
		if w.nIv != 1000/wallIvMS {
			t.Errorf("tenant %s: %d intervals, want %d", w.key, w.nIv, 1000/wallIvMS)
		}
		if !(w.got > 0) {
			t.Errorf("tenant %s got no engine time", w.key)
		}
	}
}
