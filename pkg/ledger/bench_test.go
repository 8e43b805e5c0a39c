package ledger

import (
	"path/filepath"
	"testing"
)

// BenchmarkChargeUncharge measures one charge/uncharge pair on a charging
// handle, uncontended: "cgo" through a cgo call each (the call dominates),
// "c" in a C loop, as the shim pays it (reported as ns/pair).
func BenchmarkChargeUncharge(b *testing.B) {
	path := filepath.Join(b.TempDir(), "bench.ledger")
	ch, err := openCharger(path, 1<<40)
	if err != nil {
		b.Fatal(err)
	}
	defer ch.close()
	if err := ch.charge(1); err != nil { // claims the slot
		b.Fatal(err)
	}
	ch.uncharge(1)

	b.Run("cgo", func(b *testing.B) {
		for b.Loop() {
			if err := ch.charge(4096); err != nil {
				b.Fatal(err)
			}
			ch.uncharge(4096)
		}
	})
	b.Run("c", func(b *testing.B) {
		const pairs = 1_000_000
		var total float64
		for b.Loop() {
			d, err := ch.benchPairs(pairs, 4096)
			if err != nil {
				b.Fatal(err)
			}
			total += float64(d.Nanoseconds())
		}
		b.ReportMetric(total/float64(b.N)/pairs, "ns/pair")
	})
}
