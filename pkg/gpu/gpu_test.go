package gpu

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDevicePaths(t *testing.T) {
	for _, tc := range []struct {
		minor int
		want  string
	}{
		{0, "/dev/nvidia0"},
		{7, "/dev/nvidia7"},
		{31, "/dev/nvidia31"},
	} {
		got := DevicePaths(Card{Index: 3, Minor: tc.minor})
		assert.Equal(t, []string{tc.want, "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}, got)
	}
}

// card is a valid card with index and minor i.
func card(i int) Card {
	return Card{Index: i, Minor: i, UUID: "GPU-" + string(rune('a'+i)), MemoryBytes: 1 << 30}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cards []Card
		want  []string // substrings of the error; none: valid
	}{
		{name: "empty", cards: nil},
		{name: "two", cards: []Card{card(0), card(1)}},
		{name: "unordered, minor != index", cards: []Card{
			{Index: 1, Minor: 0, MemoryBytes: 1}, {Index: 0, Minor: 4, MemoryBytes: 1}}},
		{name: "last index", cards: []Card{{Index: 31, Minor: 31, MemoryBytes: 1}}},
		{name: "negative index", cards: []Card{{Index: -1, MemoryBytes: 1}},
			want: []string{"card -1 (entry 0): index -1 is out of range 0-31"}},
		{name: "index too big", cards: []Card{{Index: 32, MemoryBytes: 1}},
			want: []string{"index 32 is out of range 0-31"}},
		{name: "duplicate index", cards: []Card{card(0), {Index: 0, Minor: 1, MemoryBytes: 1}},
			want: []string{"card 0 (entry 1): index 0 is also entry 0's"}},
		{name: "negative minor", cards: []Card{{Index: 0, Minor: -2, MemoryBytes: 1}},
			want: []string{"minor -2 is negative: it must be >= 0"}},
		{name: "duplicate minor", cards: []Card{card(0), {Index: 1, Minor: 0, MemoryBytes: 1}},
			want: []string{"card 1 (entry 1): minor 0 is also entry 0's: two cards cannot share /dev/nvidia0"}},
		{name: "no memory", cards: []Card{{Index: 0}},
			want: []string{"card 0 (entry 0): memory is 0"}},
		{name: "duplicate UUID", cards: []Card{card(0), {Index: 1, Minor: 1, UUID: "GPU-a", MemoryBytes: 1}},
			want: []string{`UUID "GPU-a" is also entry 0's`}},
		{name: "several problems reported together", cards: []Card{{Index: 40, Minor: -1}},
			want: []string{"index 40", "minor -1", "memory is 0"}},
		{name: "too many", cards: func() []Card {
			var cs []Card
			for i := 0; i < 33; i++ {
				cs = append(cs, card(i))
			}
			return cs
		}(), want: []string{"33 cards: gpuslice handles at most 32 (indices 0-31)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.cards)
			if len(tc.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestStatic(t *testing.T) {
	in := []Card{card(2), card(0), card(1)}
	s, err := NewStatic(in)
	require.NoError(t, err)
	in[0].Name = "changed" // the discoverer keeps its own copy

	got, err := s.Cards()
	require.NoError(t, err)
	assert.Equal(t, []Card{card(0), card(1), card(2)}, got)

	got[0].Name = "changed" // and hands out copies
	again, err := s.Cards()
	require.NoError(t, err)
	assert.Equal(t, card(0), again[0])
}

func TestStaticEmpty(t *testing.T) {
	s, err := NewStatic(nil)
	require.NoError(t, err)
	got, err := s.Cards()
	require.NoError(t, err)
	assert.Empty(t, got)
}

func TestStaticInvalid(t *testing.T) {
	_, err := NewStatic([]Card{card(0), {Index: 0, Minor: 1, MemoryBytes: 1}})
	require.ErrorContains(t, err, "simulated cards: card 0 (entry 1): index 0 is also entry 0's")
}
