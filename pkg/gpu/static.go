package gpu

import (
	"fmt"
	"slices"
)

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
