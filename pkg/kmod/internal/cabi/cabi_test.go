package cabi_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/pkg/kmod"
	"github.com/gpuslice/gpuslice/pkg/kmod/internal/cabi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// norm makes C's slice_end_ns and Go's SliceEndNs the same name.
func norm(name string) string {
	return strings.ToLower(strings.ReplaceAll(name, "_", ""))
}

// Every Go struct has the C struct's size and, field by field in order,
// its names, offsets and sizes.
func TestStructLayout(t *testing.T) {
	pairs := map[string]any{
		"gpuslice_version":    kmod.Version{},
		"gpuslice_card":       kmod.Card{},
		"gpuslice_vgpu":       kmod.VGPU{},
		"gpuslice_vgpu_stats": kmod.VGPUStats{},
		"gpuslice_attach":     kmod.Attach{},
		"gpuslice_charge":     kmod.Charge{},
		"gpuslice_acquire":    kmod.Acquire{},
		"gpuslice_release":    kmod.Release{},
		"gpuslice_sched_page": kmod.SchedPage{},

		"gpuslice_vgpu_unseen": kmod.VGPUUnseen{},
	}
	require.Len(t, pairs, len(cabi.Structs), "every C struct has a Go mirror")
	for name, v := range pairs {
		t.Run(name, func(t *testing.T) {
			c, ok := cabi.Structs[name]
			require.True(t, ok, "no struct %s in the header", name)
			g := reflect.TypeOf(v)
			require.Equal(t, c.Size(), g.Size(), "sizeof")
			require.Equal(t, c.NumField(), g.NumField(), "number of fields")
			for i := range c.NumField() {
				cf, gf := c.Field(i), g.Field(i)
				assert.Equal(t, norm(cf.Name), norm(gf.Name), "field %d", i)
				assert.Equal(t, cf.Offset, gf.Offset, "offset of %s", cf.Name)
				assert.Equal(t, cf.Type.Size(), gf.Type.Size(), "size of %s", cf.Name)
			}
		})
	}
}

func TestIoctlNumbers(t *testing.T) {
	want := map[string]uint{
		"GPUSLICE_IOC_VERSION":      kmod.IocVersion,
		"GPUSLICE_IOC_CARD_GET":     kmod.IocCardGet,
		"GPUSLICE_IOC_VGPU_STATS":   kmod.IocVGPUStats,
		"GPUSLICE_IOC_CARD_SET":     kmod.IocCardSet,
		"GPUSLICE_IOC_VGPU_CREATE":  kmod.IocVGPUCreate,
		"GPUSLICE_IOC_VGPU_UPDATE":  kmod.IocVGPUUpdate,
		"GPUSLICE_IOC_VGPU_DESTROY": kmod.IocVGPUDestroy,
		"GPUSLICE_IOC_ATTACH":       kmod.IocAttach,
		"GPUSLICE_IOC_CHARGE":       kmod.IocCharge,
		"GPUSLICE_IOC_UNCHARGE":     kmod.IocUncharge,
		"GPUSLICE_IOC_MEMINFO":      kmod.IocMeminfo,
		"GPUSLICE_IOC_ACQUIRE":      kmod.IocAcquire,
		"GPUSLICE_IOC_RELEASE":      kmod.IocRelease,

		"GPUSLICE_IOC_VGPU_UNSEEN":     kmod.IocVGPUUnseen,
		"GPUSLICE_IOC_VGPU_SET_UNSEEN": kmod.IocVGPUSetUnseen,
	}
	require.Len(t, want, len(cabi.Ioctls))
	for name, n := range want {
		assert.Equal(t, cabi.Ioctls[name], n, "%s", name)
	}
}

func TestConstants(t *testing.T) {
	want := map[string]int64{
		"GPUSLICE_ABI_VERSION":          kmod.ABIVersion,
		"GPUSLICE_MAX_CARDS":            kmod.MaxCards,
		"GPUSLICE_MAX_VGPUS":            kmod.MaxVGPUs,
		"GPUSLICE_MODE_NONE":            int64(kmod.ModeNone),
		"GPUSLICE_MODE_MEMORY":          int64(kmod.ModeMemory),
		"GPUSLICE_MODE_COMPUTE":         int64(kmod.ModeCompute),
		"GPUSLICE_OWNER_NONE":           kmod.OwnerNone,
		"GPUSLICE_OWNER_ALL":            kmod.OwnerAll,
		"GPUSLICE_ACQUIRE_NONBLOCK":     kmod.AcquireNonblock,
		"GPUSLICE_RELEASE_IDLE":         kmod.ReleaseIdle,
		"GPUSLICE_POLICY_NATIVE":        int64(kmod.PolicyNative),
		"GPUSLICE_POLICY_WEIGHTED_WEAK": int64(kmod.PolicyWeightedWeak),
	}
	require.Len(t, want, len(cabi.Constants))
	for name, n := range want {
		assert.Equal(t, cabi.Constants[name], n, "%s", name)
	}
}
