package sched

import (
	"fmt"
	"testing"
	"time"
)

// The C loops are reached through unexported helpers in testhooks.go.

// benchCard is a preemptive card of n busy vGPUs (max_inst 20, or 64 for
// more than 20 vGPUs); with oneActive only the last one has work, the
// worst case for the table walk.
func benchCard(b *testing.B, n int, oneActive bool) *Card {
	m := 20
	if n > 20 {
		m = 64
	}
	c := newCard(b, Preemptive, m)
	for i := 0; i < n; i++ {
		id, err := c.AddVGPU(0, false)
		if err != nil {
			b.Fatal(err)
		}
		if !oneActive || i == n-1 {
			setAct(b, c, id, busy, 0)
		}
	}
	c.Tick(0)
	return c
}

// BenchmarkHandover measures one slice handover (gs_tick at a slice
// boundary) in a C loop, as the module's hrtimer pays it; "cgo" adds the
// cgo call per tick.
// perCall times loop, which makes per calls in C, and reports the time of
// one call: the cgo crossing is paid once per loop, not per call.
func perCall(b *testing.B, per uint64, unit string, loop func(per uint64)) {
	var total time.Duration
	for b.Loop() {
		t0 := time.Now()
		loop(per)
		total += time.Since(t0)
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N)/float64(per), unit)
}

func BenchmarkHandover(b *testing.B) {
	for _, n := range []int{2, 20, 64} {
		for _, one := range []bool{false, true} {
			name := fmt.Sprintf("vgpus=%d/active=all", n)
			if one {
				name = fmt.Sprintf("vgpus=%d/active=1", n)
			}
			b.Run(name+"/c", func(b *testing.B) {
				c := benchCard(b, n, one)
				now := uint64(0)
				perCall(b, 100_000, "ns/handover", func(per uint64) {
					now = c.benchHandover(now, per)
				})
			})
			b.Run(name+"/cgo", func(b *testing.B) {
				c := benchCard(b, n, one)
				slice := uint64(c.Config().Slice)
				now := uint64(0)
				for b.Loop() {
					now += slice
					c.Tick(now)
				}
			})
		}
	}
}

// BenchmarkDecision measures one scheduling decision (who runs next,
// gs_peek_next) and the fast-path check (gs_may_run), in C loops.
func BenchmarkDecision(b *testing.B) {
	for _, n := range []int{2, 20, 64} {
		b.Run(fmt.Sprintf("vgpus=%d/peek", n), func(b *testing.B) {
			c := benchCard(b, n, true)
			perCall(b, 100_000, "ns/decision", func(per uint64) {
				c.benchPeek(1, per)
			})
		})
		b.Run(fmt.Sprintf("vgpus=%d/mayrun", n), func(b *testing.B) {
			c := benchCard(b, n, false)
			perCall(b, 1_000_000, "ns/check", func(per uint64) {
				c.benchMayRun(1, per)
			})
		})
	}
}
