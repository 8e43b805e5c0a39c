package gpu

import (
	"fmt"
	"slices"
)

// SimulatedUUID is the UUID the simulated driver (interposer/simcuda,
// simst_uuid) gives its device index, in NVML's text form. A simulated
// card must carry it: the shim matches devices to cards by UUID (the
// agent's GPUSLICE_CARD_UUIDS), and a card whose UUID no device has gets
// nothing. The simulated NVML's answer is checked against it
// (nvml_sim_test.go), so the two cannot drift apart.
func SimulatedUUID(index int) string {
	h := uint64(0xcbf29ce484222325) ^ uint64(index+1)
	var b [16]byte
	for i := range b {
		h ^= uint64(i) * 0x9e3779b97f4a7c15
		h *= 0x100000001b3
		h ^= h >> 29
		b[i] = byte(h >> 24)
	}
	b[6] = b[6]&0x0f | 0x40 // version 4 and the RFC 4122 variant, as simst_uuid
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Static is a Discoverer of a fixed card set: the simulated cards of the
// agent's configuration. It never loads NVML.
type Static struct {
	cards []Card
}

var _ Discoverer = (*Static)(nil)

// NewStatic returns a Static discoverer of cards, after checking them with
// Validate. It keeps its own copy, sorted by index.
func NewStatic(cards []Card) (*Static, error) {
	if err := Validate(cards); err != nil {
		return nil, fmt.Errorf("simulated cards: %w", err)
	}
	s := &Static{cards: slices.Clone(cards)}
	slices.SortFunc(s.cards, func(a, b Card) int { return a.Index - b.Index })
	return s, nil
}

// Cards returns a copy of the card set, in index order.
func (s *Static) Cards() ([]Card, error) {
	return slices.Clone(s.cards), nil
}
