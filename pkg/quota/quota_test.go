package quota

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	gi = uint64(1) << 30
	mi = uint64(1) << 20
)

// one is a request for a single card of mem bytes and cores percent.
func one(mem uint64, cores uint32) []CardRequest {
	return []CardRequest{{MemoryBytes: mem, Cores: cores, Index: -1}}
}

func TestParse(t *testing.T) {
	type m = map[string]string
	tests := []struct {
		name     string
		pod, ctr m
		want     []CardRequest // nil: no request
		prio     Priority
		err      string
	}{
		// No request.
		{name: "nothing"},
		{name: "other annotations", pod: m{"io.kubernetes.pod.uid": "x", "gpuslice.io/other": "y"}, ctr: m{"a": "b"}},
		{name: "another container's key", pod: m{"gpuslice.io/gpu-memory/container.other": "4Gi"}},
		{name: "another container's cores", pod: m{"gpuslice.io/gpu-memory/container.other": "4Gi", "gpuslice.io/gpu-cores/container.other": "30"}},
		{name: "pod-wide cores default for the named ones", pod: m{"gpuslice.io/gpu-memory/container.other": "4Gi", "gpuslice.io/gpu-cores": "30"}},
		{name: "another container's unknown key", pod: m{"gpuslice.io/gpu-mem/container.other": "4Gi"}},

		// Memory forms.
		{name: "Gi", pod: m{KeyMemory: "4Gi"}, want: one(4*gi, 0)},
		{name: "Mi", pod: m{KeyMemory: "4096Mi"}, want: one(4*gi, 0)},
		{name: "fraction", pod: m{KeyMemory: "1.5Gi"}, want: one(1536*mi, 0)},
		{name: "fraction Ti", pod: m{KeyMemory: "0.25Ti"}, want: one(256*gi, 0)},
		{name: "512Mi", pod: m{KeyMemory: "512Mi"}, want: one(512*mi, 0)},
		{name: "Ti", pod: m{KeyMemory: "1Ti"}, want: one(1024*gi, 0)},
		{name: "Ki", pod: m{KeyMemory: "2048Ki"}, want: one(2*mi, 0)},
		{name: "bytes", pod: m{KeyMemory: "1073741824"}, want: one(gi, 0)},
		{name: "least", pod: m{KeyMemory: "1Mi"}, want: one(mi, 0)},
		{name: "least in bytes", pod: m{KeyMemory: "1048576"}, want: one(mi, 0)},
		{name: "most", pod: m{KeyMemory: "16Ti"}, want: one(16*1024*gi, 0)},
		{name: "leading zeros", pod: m{KeyMemory: "004Gi"}, want: one(4*gi, 0)},
		{name: "spaces", pod: m{KeyMemory: " 4Gi "}, want: one(4*gi, 0)},
		{name: "two cards", pod: m{KeyMemory: "4Gi,8Gi"}, want: []CardRequest{{4 * gi, 0, -1}, {8 * gi, 0, -1}}},
		{name: "two cards, spaces", pod: m{KeyMemory: "4Gi, 8Gi"}, want: []CardRequest{{4 * gi, 0, -1}, {8 * gi, 0, -1}}},
		{name: "16 cards", pod: m{KeyMemory: strings.Repeat("1Gi,", 15) + "1Gi"}, want: repeat(CardRequest{gi, 0, -1}, 16)},

		// Cores, priority, index.
		{name: "cores", pod: m{KeyMemory: "4Gi", KeyCores: "30"}, want: one(4*gi, 30)},
		{name: "cores 0", pod: m{KeyMemory: "4Gi", KeyCores: "0"}, want: one(4*gi, 0)},
		{name: "cores 5", pod: m{KeyMemory: "4Gi", KeyCores: "5"}, want: one(4*gi, 5)},
		{name: "cores 100", pod: m{KeyMemory: "4Gi", KeyCores: "100"}, want: one(4*gi, 100)},
		{name: "cores for every card", pod: m{KeyMemory: "4Gi,8Gi", KeyCores: "30"}, want: []CardRequest{{4 * gi, 30, -1}, {8 * gi, 30, -1}}},
		{name: "cores per card", pod: m{KeyMemory: "4Gi,8Gi", KeyCores: "30, 0"}, want: []CardRequest{{4 * gi, 30, -1}, {8 * gi, 0, -1}}},
		{name: "priority high", pod: m{KeyMemory: "4Gi", KeyCores: "30", KeyPriority: "high"}, want: one(4*gi, 30), prio: High},
		{name: "priority HIGH", pod: m{KeyMemory: "4Gi", KeyCores: "30", KeyPriority: " HIGH"}, want: one(4*gi, 30), prio: High},
		{name: "priority low", pod: m{KeyMemory: "4Gi", KeyPriority: "low"}, want: one(4*gi, 0)},
		{name: "index", pod: m{KeyMemory: "4Gi", KeyIndex: "1"}, want: []CardRequest{{4 * gi, 0, 1}}},
		{name: "index 31", pod: m{KeyMemory: "4Gi", KeyIndex: "31"}, want: []CardRequest{{4 * gi, 0, 31}}},
		{name: "index per card", pod: m{KeyMemory: "4Gi,8Gi", KeyIndex: "1,0"}, want: []CardRequest{{4 * gi, 0, 1}, {8 * gi, 0, 0}}},

		// Precedence: pod KEY/container.NAME > ctr KEY/container.NAME > ctr KEY > pod KEY.
		{name: "pod scoped over pod plain", pod: m{KeyMemory: "1Gi", KeyMemory + "/container.app": "2Gi"}, want: one(2*gi, 0)},
		{name: "pod scoped over ctr plain", pod: m{KeyMemory + "/container.app": "2Gi"}, ctr: m{KeyMemory: "3Gi"}, want: one(2*gi, 0)},
		{name: "pod scoped over ctr scoped", pod: m{KeyMemory + "/container.app": "2Gi"}, ctr: m{KeyMemory + "/container.app": "5Gi"}, want: one(2*gi, 0)},
		{name: "ctr scoped over ctr plain", ctr: m{KeyMemory + "/container.app": "5Gi", KeyMemory: "3Gi"}, want: one(5*gi, 0)},
		{name: "ctr plain over pod plain", pod: m{KeyMemory: "1Gi"}, ctr: m{KeyMemory: "3Gi"}, want: one(3*gi, 0)},
		{name: "pod plain alone", pod: m{KeyMemory: "1Gi"}, ctr: m{"x": "y"}, want: one(gi, 0)},
		{name: "keys from different places", pod: m{KeyMemory + "/container.app": "2Gi", KeyCores: "20", KeyPriority + "/container.other": "high"}, ctr: m{KeyIndex: "3"}, want: []CardRequest{{2 * gi, 20, 3}}},
		{name: "scoped cores over plain", pod: m{KeyMemory: "2Gi", KeyCores: "20", KeyCores + "/container.app": "40"}, want: one(2*gi, 40)},

		// Memory refused.
		{name: "memory empty", pod: m{KeyMemory: ""}, err: `gpuslice.io/gpu-memory="": empty; want a size like 4Gi`},
		{name: "memory decimal unit", pod: m{KeyMemory: "4G"}, err: `gpuslice.io/gpu-memory="4G": G is a decimal unit; want a size like 4Gi, 4096Mi, 1.5Gi or a number of bytes (suffixes Ki, Mi, Gi, Ti)`},
		{name: "memory GB", pod: m{KeyMemory: "4GB"}, err: `gpuslice.io/gpu-memory="4GB": GB is a decimal unit; want a size like 4Gi, 4096Mi, 1.5Gi or a number of bytes (suffixes Ki, Mi, Gi, Ti)`},
		{name: "memory GiB", pod: m{KeyMemory: "4GiB"}, err: `gpuslice.io/gpu-memory="4GiB": write Gi, not GiB; want a size like 4Gi, 4096Mi, 1.5Gi or a number of bytes (suffixes Ki, Mi, Gi, Ti)`},
		{name: "memory lower case", pod: m{KeyMemory: "4gi"}, err: `gpuslice.io/gpu-memory="4gi": want a size like 4Gi, 4096Mi, 1.5Gi or a number of bytes (suffixes Ki, Mi, Gi, Ti)`},
		{name: "memory negative", pod: m{KeyMemory: "-4Gi"}, err: `gpuslice.io/gpu-memory="-4Gi": want a size like 4Gi, 4096Mi, 1.5Gi or a number of bytes (suffixes Ki, Mi, Gi, Ti)`},
		{name: "memory plus", pod: m{KeyMemory: "+4Gi"}, err: `gpuslice.io/gpu-memory="+4Gi": want a size like 4Gi, 4096Mi, 1.5Gi or a number of bytes (suffixes Ki, Mi, Gi, Ti)`},
		{name: "memory exponent", pod: m{KeyMemory: "1e9"}, err: `gpuslice.io/gpu-memory="1e9": want a size like 4Gi, 4096Mi, 1.5Gi or a number of bytes (suffixes Ki, Mi, Gi, Ti)`},
		{name: "memory space inside", pod: m{KeyMemory: "4 Gi"}, err: `gpuslice.io/gpu-memory="4 Gi": want a size like 4Gi, 4096Mi, 1.5Gi or a number of bytes (suffixes Ki, Mi, Gi, Ti)`},
		{name: "memory suffix only", pod: m{KeyMemory: "Gi"}, err: `gpuslice.io/gpu-memory="Gi": want a size like 4Gi, 4096Mi, 1.5Gi or a number of bytes (suffixes Ki, Mi, Gi, Ti)`},
		{name: "memory fraction of bytes", pod: m{KeyMemory: "1.5"}, err: `gpuslice.io/gpu-memory="1.5": want a size like 4Gi, 4096Mi, 1.5Gi or a number of bytes (suffixes Ki, Mi, Gi, Ti)`},
		{name: "memory dot without digits", pod: m{KeyMemory: "1.Gi"}, err: `gpuslice.io/gpu-memory="1.Gi": want a size like 4Gi, 4096Mi, 1.5Gi or a number of bytes (suffixes Ki, Mi, Gi, Ti)`},
		{name: "memory not whole MiB", pod: m{KeyMemory: "1.1Gi"}, err: `gpuslice.io/gpu-memory="1.1Gi": not a whole number of MiB (between 1126 and 1127 MiB); want whole MiB, e.g. 1126Mi`},
		{name: "memory bytes not whole MiB", pod: m{KeyMemory: "1048577"}, err: `gpuslice.io/gpu-memory="1048577": not a whole number of MiB (between 1 and 2 MiB); want whole MiB, e.g. 1Mi`},
		{name: "memory Ki not whole MiB", pod: m{KeyMemory: "1536Ki"}, err: `gpuslice.io/gpu-memory="1536Ki": not a whole number of MiB (between 1 and 2 MiB); want whole MiB, e.g. 1Mi`},
		{name: "memory 0", pod: m{KeyMemory: "0"}, err: `gpuslice.io/gpu-memory="0": want at least 1Mi`},
		{name: "memory 0Gi", pod: m{KeyMemory: "0Gi"}, err: `gpuslice.io/gpu-memory="0Gi": want at least 1Mi`},
		{name: "memory under 1Mi", pod: m{KeyMemory: "512Ki"}, err: `gpuslice.io/gpu-memory="512Ki": want at least 1Mi`},
		{name: "memory over 16Ti", pod: m{KeyMemory: "17Ti"}, err: `gpuslice.io/gpu-memory="17Ti": want at most 16Ti`},
		{name: "memory 1 MiB over 16Ti", pod: m{KeyMemory: "16777217Mi"}, err: `gpuslice.io/gpu-memory="16777217Mi": want at most 16Ti`},
		{name: "memory huge", pod: m{KeyMemory: "99999999999999999999Ti"}, err: `gpuslice.io/gpu-memory="99999999999999999999Ti": want at most 16Ti`},
		{name: "memory list item empty", pod: m{KeyMemory: "4Gi,,8Gi"}, err: `gpuslice.io/gpu-memory="4Gi,,8Gi": item 2 is empty; want sizes like 4Gi,8Gi`},
		{name: "memory list trailing comma", pod: m{KeyMemory: "4Gi,"}, err: `gpuslice.io/gpu-memory="4Gi,": item 2 is empty; want sizes like 4Gi,8Gi`},
		{name: "memory list item bad", pod: m{KeyMemory: "4Gi,1.1Gi"}, err: `gpuslice.io/gpu-memory="4Gi,1.1Gi": item 2 ("1.1Gi"): not a whole number of MiB (between 1126 and 1127 MiB); want whole MiB, e.g. 1126Mi`},
		{name: "17 cards", pod: m{KeyMemory: strings.Repeat("1Gi,", 16) + "1Gi"}, err: `gpuslice.io/gpu-memory="` + strings.Repeat("1Gi,", 16) + `1Gi": 17 cards; at most 16 per container`},
		{name: "memory error names the scoped key", pod: m{KeyMemory + "/container.app": "4GB", KeyMemory: "4Gi"}, err: `gpuslice.io/gpu-memory/container.app="4GB": GB is a decimal unit; want a size like 4Gi, 4096Mi, 1.5Gi or a number of bytes (suffixes Ki, Mi, Gi, Ti)`},

		// Cores refused.
		{name: "cores 33", pod: m{KeyMemory: "4Gi", KeyCores: "33"}, err: `gpuslice.io/gpu-cores="33": want a percent 0-100 in steps of 5`},
		{name: "cores 105", pod: m{KeyMemory: "4Gi", KeyCores: "105"}, err: `gpuslice.io/gpu-cores="105": want a percent 0-100 in steps of 5`},
		{name: "cores negative", pod: m{KeyMemory: "4Gi", KeyCores: "-5"}, err: `gpuslice.io/gpu-cores="-5": want a percent 0-100 in steps of 5`},
		{name: "cores percent sign", pod: m{KeyMemory: "4Gi", KeyCores: "30%"}, err: `gpuslice.io/gpu-cores="30%": want a percent 0-100 in steps of 5`},
		{name: "cores fraction", pod: m{KeyMemory: "4Gi", KeyCores: "0.5"}, err: `gpuslice.io/gpu-cores="0.5": want a percent 0-100 in steps of 5`},
		{name: "cores empty", pod: m{KeyMemory: "4Gi", KeyCores: ""}, err: `gpuslice.io/gpu-cores="": empty; want a percent 0-100 in steps of 5`},
		{name: "cores list item", pod: m{KeyMemory: "4Gi,8Gi", KeyCores: "30,33"}, err: `gpuslice.io/gpu-cores="30,33": item 2 ("33"): want a percent 0-100 in steps of 5`},
		{name: "cores list item empty", pod: m{KeyMemory: "4Gi,8Gi", KeyCores: ",30"}, err: `gpuslice.io/gpu-cores=",30": item 1 is empty; want percents 0-100 in steps of 5, like 30,50`},
		{name: "cores list too long", pod: m{KeyMemory: "4Gi,8Gi", KeyCores: "30,40,50"}, err: `gpuslice.io/gpu-cores="30,40,50": 3 values for 2 cards (gpuslice.io/gpu-memory="4Gi,8Gi"); give one value for every card or one per card`},
		{name: "cores list for one card", pod: m{KeyMemory: "4Gi", KeyCores: "30,40"}, err: `gpuslice.io/gpu-cores="30,40": 2 values for 1 card (gpuslice.io/gpu-memory="4Gi"); give one value for every card or one per card`},
		{name: "cores scoped key named", pod: m{KeyMemory: "4Gi", KeyCores + "/container.app": "7"}, err: `gpuslice.io/gpu-cores/container.app="7": want a percent 0-100 in steps of 5`},

		// Priority refused.
		{name: "priority medium", pod: m{KeyMemory: "4Gi", KeyPriority: "medium"}, err: `gpuslice.io/gpu-priority="medium": want high or low`},
		{name: "priority number", pod: m{KeyMemory: "4Gi", KeyPriority: "1"}, err: `gpuslice.io/gpu-priority="1": want high or low`},
		{name: "priority empty", pod: m{KeyMemory: "4Gi", KeyPriority: ""}, err: `gpuslice.io/gpu-priority="": want high or low`},
		{name: "high without cores", pod: m{KeyMemory: "4Gi", KeyPriority: "high"}, err: `gpuslice.io/gpu-priority="high": needs gpuslice.io/gpu-cores above 0 on every card (a memory-only vGPU is never scheduled, so it has no priority); set gpuslice.io/gpu-cores, or drop the priority`},
		{name: "high with a card of cores 0", pod: m{KeyMemory: "4Gi,8Gi", KeyCores: "30,0", KeyPriority: "high"}, err: `gpuslice.io/gpu-priority="high": needs gpuslice.io/gpu-cores above 0 on every card (a memory-only vGPU is never scheduled, so it has no priority); set gpuslice.io/gpu-cores, or drop the priority`},

		// Index refused.
		{name: "index 32", pod: m{KeyMemory: "4Gi", KeyIndex: "32"}, err: `gpuslice.io/gpu-index="32": want a card index 0-31`},
		{name: "index -1", pod: m{KeyMemory: "4Gi", KeyIndex: "-1"}, err: `gpuslice.io/gpu-index="-1": want a card index 0-31`},
		{name: "index word", pod: m{KeyMemory: "4Gi", KeyIndex: "any"}, err: `gpuslice.io/gpu-index="any": want a card index 0-31`},
		{name: "index empty", pod: m{KeyMemory: "4Gi", KeyIndex: ""}, err: `gpuslice.io/gpu-index="": empty; want a card index 0-31`},
		{name: "index twice", pod: m{KeyMemory: "4Gi,8Gi", KeyIndex: "1,1"}, err: `gpuslice.io/gpu-index="1,1": card 1 twice; pin each card of the request to a different index`},
		{name: "index one for two cards", pod: m{KeyMemory: "4Gi,8Gi", KeyIndex: "1"}, err: `gpuslice.io/gpu-index="1": 1 value for 2 cards (gpuslice.io/gpu-memory="4Gi,8Gi"); give one per card`},
		{name: "index three for two cards", pod: m{KeyMemory: "4Gi,8Gi", KeyIndex: "0,1,2"}, err: `gpuslice.io/gpu-index="0,1,2": 3 values for 2 cards (gpuslice.io/gpu-memory="4Gi,8Gi"); give one per card`},
		{name: "index list item", pod: m{KeyMemory: "4Gi,8Gi", KeyIndex: "0,x"}, err: `gpuslice.io/gpu-index="0,x": item 2 ("x"): want a card index 0-31`},

		// Keys without the memory.
		{name: "cores alone", pod: m{KeyCores: "30"}, err: `gpuslice.io/gpu-cores="30": gpuslice.io/gpu-cores needs gpuslice.io/gpu-memory (the memory per card, e.g. 4Gi) for container "app"`},
		{name: "priority alone", pod: m{KeyPriority: "low"}, err: `gpuslice.io/gpu-priority="low": gpuslice.io/gpu-priority needs gpuslice.io/gpu-memory (the memory per card, e.g. 4Gi) for container "app"`},
		{name: "index alone", pod: m{KeyIndex: "0"}, err: `gpuslice.io/gpu-index="0": gpuslice.io/gpu-index needs gpuslice.io/gpu-memory (the memory per card, e.g. 4Gi) for container "app"`},
		{name: "scoped cores alone", pod: m{KeyCores + "/container.app": "30", KeyMemory + "/container.other": "1Gi"}, err: `gpuslice.io/gpu-cores/container.app="30": gpuslice.io/gpu-cores needs gpuslice.io/gpu-memory (the memory per card, e.g. 4Gi) for container "app"`},
		{name: "container's cores alone", ctr: m{KeyCores: "30"}, pod: m{KeyMemory + "/container.other": "1Gi"}, err: `gpuslice.io/gpu-cores="30": gpuslice.io/gpu-cores needs gpuslice.io/gpu-memory (the memory per card, e.g. 4Gi) for container "app"`},

		// Unknown and malformed keys.
		{name: "misspelt key", pod: m{"gpuslice.io/gpu-mem": "4Gi"}, err: `gpuslice.io/gpu-mem="4Gi": unknown annotation; the gpuslice.io/gpu-* keys are gpuslice.io/gpu-memory, gpuslice.io/gpu-cores, gpuslice.io/gpu-priority, gpuslice.io/gpu-index`},
		{name: "misspelt key beside a good one", pod: m{KeyMemory: "4Gi", "gpuslice.io/gpu-core": "30"}, err: `gpuslice.io/gpu-core="30": unknown annotation; the gpuslice.io/gpu-* keys are gpuslice.io/gpu-memory, gpuslice.io/gpu-cores, gpuslice.io/gpu-priority, gpuslice.io/gpu-index`},
		{name: "misspelt scoped key", pod: m{"gpuslice.io/gpu-cpu/container.app": "4"}, err: `gpuslice.io/gpu-cpu/container.app="4": unknown annotation; the gpuslice.io/gpu-* keys are gpuslice.io/gpu-memory, gpuslice.io/gpu-cores, gpuslice.io/gpu-priority, gpuslice.io/gpu-index`},
		{name: "misspelt key in the container's", ctr: m{"gpuslice.io/gpu-memroy": "4Gi"}, err: `gpuslice.io/gpu-memroy="4Gi": unknown annotation; the gpuslice.io/gpu-* keys are gpuslice.io/gpu-memory, gpuslice.io/gpu-cores, gpuslice.io/gpu-priority, gpuslice.io/gpu-index`},
		{name: "bad scope", pod: m{KeyMemory + "/app": "4Gi"}, err: `gpuslice.io/gpu-memory/app="4Gi": not a key of gpuslice; want gpuslice.io/gpu-memory or gpuslice.io/gpu-memory/container.NAME`},
		{name: "empty container name", pod: m{KeyMemory + "/container.": "4Gi"}, err: `gpuslice.io/gpu-memory/container.="4Gi": not a key of gpuslice; want gpuslice.io/gpu-memory or gpuslice.io/gpu-memory/container.NAME`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse(tt.pod, "app", tt.ctr)
			if tt.err != "" {
				require.Error(t, err)
				assert.Equal(t, tt.err, err.Error())
				var qe *Error
				require.True(t, errors.As(err, &qe), "want a *quota.Error")
				assert.Nil(t, r)
				return
			}
			require.NoError(t, err)
			if tt.want == nil {
				assert.Nil(t, r)
				return
			}
			require.NotNil(t, r)
			assert.Equal(t, tt.want, r.Cards)
			assert.Equal(t, tt.prio, r.Priority)
		})
	}
}

func repeat(c CardRequest, n int) []CardRequest {
	out := make([]CardRequest, n)
	for i := range out {
		out[i] = c
	}
	return out
}

// TestParseSources: the request remembers the annotations as written, for
// placement's messages.
func TestParseSources(t *testing.T) {
	pod := map[string]string{KeyMemory + "/container.app": "4Gi,8Gi", KeyCores: "30", KeyPriority: "high"}
	r, err := Parse(pod, "app", nil)
	require.NoError(t, err)
	assert.Equal(t, map[string]Source{
		KeyMemory:   {Key: KeyMemory + "/container.app", Value: "4Gi,8Gi"},
		KeyCores:    {Key: KeyCores, Value: "30"},
		KeyPriority: {Key: KeyPriority, Value: "high"},
	}, r.Sources)
	assert.Equal(t, `gpuslice.io/gpu-memory/container.app="4Gi,8Gi"`, r.Subject(KeyMemory, -1))
	assert.Equal(t, `gpuslice.io/gpu-memory/container.app="4Gi,8Gi" (2nd of 2 cards: 8Gi)`, r.Subject(KeyMemory, 1))
	assert.Equal(t, `gpuslice.io/gpu-cores="30" (1st of 2 cards)`, r.Subject(KeyCores, 0))
	assert.Equal(t, `gpuslice.io/gpu-index (not set: any) (1st of 2 cards)`, r.Subject(KeyIndex, 0))
	assert.Equal(t, `gpuslice.io/gpu-priority="high"`, r.Subject(KeyPriority, -1))
}

func TestSubjectWithoutSources(t *testing.T) {
	r := &Request{Cards: []CardRequest{{4 * gi, 30, -1}, {1536 * mi, 30, 2}}, Priority: High}
	for _, tt := range []struct {
		key  string
		card int
		want string
	}{
		{KeyMemory, -1, `gpuslice.io/gpu-memory="4Gi,1536Mi"`},
		{KeyMemory, 1, `gpuslice.io/gpu-memory="4Gi,1536Mi" (2nd of 2 cards: 1536Mi)`},
		{KeyCores, 0, `gpuslice.io/gpu-cores="30" (1st of 2 cards)`},
		{KeyIndex, 1, `gpuslice.io/gpu-index="any,2" (2nd of 2 cards: 2)`},
		{KeyPriority, 5, `gpuslice.io/gpu-priority="high"`},
	} {
		assert.Equal(t, tt.want, r.Subject(tt.key, tt.card))
	}
	single := &Request{Cards: one(gi, 0)}
	assert.Equal(t, `gpuslice.io/gpu-memory="1Gi"`, single.Subject(KeyMemory, 0))
}

func TestRequestString(t *testing.T) {
	r, err := Parse(map[string]string{KeyMemory: "4Gi,1536Mi", KeyCores: "30", KeyIndex: "1,0", KeyPriority: "high"}, "", nil)
	require.NoError(t, err)
	assert.Equal(t, "memory=4Gi,1536Mi cores=30,30 index=1,0 priority=high", r.String())
	assert.Equal(t, "memory=1Gi cores=0 index=any priority=low", (&Request{Cards: one(gi, 0)}).String())
	assert.Equal(t, "no request", (*Request)(nil).String())
	assert.Equal(t, uint64(4096), r.Cards[0].MemoryMiB())
	assert.Equal(t, uint64(1536), r.Cards[1].MemoryMiB())
	assert.Equal(t, 4*gi+1536*mi, r.MemoryBytes())
}

// TestParseNoContainerName: without a name only the plain keys apply.
func TestParseNoContainerName(t *testing.T) {
	r, err := Parse(map[string]string{KeyMemory: "1Gi", KeyMemory + "/container.": "x"}, "", nil)
	require.Error(t, err) // malformed whatever the name
	assert.Nil(t, r)
	r, err = Parse(map[string]string{KeyMemory: "1Gi", KeyMemory + "/container.app": "2Gi"}, "", nil)
	require.NoError(t, err)
	assert.Equal(t, one(gi, 0), r.Cards)
	_, err = Parse(map[string]string{KeyCores: "5"}, "", nil)
	assert.EqualError(t, err, `gpuslice.io/gpu-cores="5": gpuslice.io/gpu-cores needs gpuslice.io/gpu-memory (the memory per card, e.g. 4Gi)`)
}

func TestParseMemoryFormatMemory(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint64
		out  string
	}{
		{"1Mi", mi, "1Mi"},
		{"1024Mi", gi, "1Gi"},
		{"1536Mi", 1536 * mi, "1536Mi"},
		{"1.5Gi", 1536 * mi, "1536Mi"},
		{"1024Gi", 1024 * gi, "1Ti"},
		{"16Ti", 16 << 40, "16Ti"},
		{"0.5Ti", 512 * gi, "512Gi"},
		{"1.25Gi", 1280 * mi, "1280Mi"},
		{"0.0009765625Gi", mi, "1Mi"},
		{"5242880", 5 * mi, "5Mi"},
	} {
		t.Run(tt.in, func(t *testing.T) {
			b, err := ParseMemory(tt.in)
			require.NoError(t, err)
			assert.Equal(t, tt.want, b)
			assert.Equal(t, tt.out, FormatMemory(b))
			back, err := ParseMemory(FormatMemory(b))
			require.NoError(t, err)
			assert.Equal(t, b, back)
		})
	}
	assert.Equal(t, "1000", FormatMemory(1000))
	assert.Equal(t, "1536", FormatMemory(1536))
	assert.Equal(t, "2Ki", FormatMemory(2048))
	assert.Equal(t, "0", FormatMemory(0))
}

func TestOrdinal(t *testing.T) {
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 16: "16th", 21: "21st", 22: "22nd", 101: "101st", 111: "111th"} {
		assert.Equal(t, want, Ordinal(n), fmt.Sprint(n))
	}
}

func TestPriorityString(t *testing.T) {
	assert.Equal(t, "low", Low.String())
	assert.Equal(t, "high", High.String())
	assert.Equal(t, "Priority(7)", Priority(7).String())
}
