package draapi

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecodeConfig(t *testing.T) {
	const id = `"apiVersion": "gpu.gpuslice.io/v1alpha1", "kind": "VGPUConfig"`
	for _, tc := range []struct {
		name, raw string
		want      VGPUConfig
		field     string // "" : accepted
		message   string
	}{
		{name: "identity only", raw: `{` + id + `}`, want: VGPUConfig{APIVersion: APIVersion, Kind: KindVGPU}},
		{name: "everything", raw: `{` + id + `, "priority": "high", "mode": "compute"}`,
			want: VGPUConfig{APIVersion: APIVersion, Kind: KindVGPU, Priority: PriorityHigh, Mode: ModeCompute}},
		{name: "empty", raw: ` `, field: "parameters",
			message: "parameters: empty: want {apiVersion: gpu.gpuslice.io/v1alpha1, kind: VGPUConfig, ...}"},
		{name: "unknown field", raw: `{` + id + `, "cores": 30}`, field: "parameters.cores",
			message: "parameters.cores: unknown field; the fields of VGPUConfig are apiVersion, kind, priority, mode"},
		{name: "bad priority", raw: `{` + id + `, "priority": "urgent"}`, field: "parameters.priority",
			message: `parameters.priority="urgent": want low or high`},
		{name: "bad mode", raw: `{` + id + `, "mode": "both"}`, field: "parameters.mode",
			message: `parameters.mode="both": want memory or compute`},
		{name: "wrong type", raw: `{` + id + `, "priority": 1}`, field: "parameters.priority",
			message: "parameters.priority: want a string, got a JSON number"},
		{name: "wrong version", raw: `{"apiVersion": "gpu.gpuslice.io/v1", "kind": "VGPUConfig"}`,
			field: "parameters.apiVersion", message: `parameters.apiVersion="gpu.gpuslice.io/v1": want gpu.gpuslice.io/v1alpha1`},
		{name: "no kind", raw: `{"apiVersion": "gpu.gpuslice.io/v1alpha1"}`, field: "parameters.kind",
			message: "parameters.kind: want VGPUConfig"},
		{name: "not an object", raw: `[1]`, field: "parameters"},
		{name: "trailing data", raw: `{` + id + `} {}`, field: "parameters",
			message: "parameters: trailing data after the object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeConfig([]byte(tc.raw))
			if tc.field == "" {
				require.NoError(t, err)
				assert.Equal(t, tc.want, got)
				return
			}
			var fe *FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			assert.Equal(t, tc.field, fe.Field)
			if tc.message != "" {
				assert.Equal(t, tc.message, err.Error())
			}
		})
	}
}

func TestModeSelector(t *testing.T) {
	assert.Equal(t, "device.attributes['gpu.gpuslice.io'].mode in ['unused', 'compute']", ModeSelector(ModeCompute))
}
