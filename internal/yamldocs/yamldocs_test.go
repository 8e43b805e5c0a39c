package yamldocs

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"one", "kind: A\n", []string{"kind: A\n"}},
		{"leading and trailing markers", "---\nkind: A\n---\nkind: B\n---\n", []string{"kind: A\n", "kind: B\n"}},
		{"a marker with a comment", "kind: A\n--- # next\nkind: B\n", []string{"kind: A\n", "kind: B\n"}},
		{"empty documents dropped", "---\n\n---\nkind: A\n", []string{"kind: A\n"}},
		{"a block scalar holding ---", "kind: A\ndata: |\n  x\n  ---\n  y\n", []string{"kind: A\ndata: |\n  x\n  ---\n  y\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := Split([]byte(tc.in))
			require.NoError(t, err)
			var got []string
			for _, d := range docs {
				got = append(got, string(d))
			}
			assert.Equal(t, tc.want, got)
		})
	}
}
