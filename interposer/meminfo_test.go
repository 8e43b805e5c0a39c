package interposer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What a process is told about memory: cuMemGetInfo_v2 total = cap and
// free = cap - used, cuDeviceTotalMem_v2 = cap, and NVML's
// nvmlDeviceGetMemoryInfo and _v2 the same view (used = the container's
// total, reserved 0), in the allocating process and in any other one.
func TestMemInfo(t *testing.T) {
	t.Parallel()
	m := newMachine(t) // cap 1024 MiB, contexts 256 MiB

	r := m.ok("meminfo", "0", "100M")
	kv := r.kv()
	want := map[string]uint64{
		"device.0.total":   1024 * mib,
		"alloc.rc":         0,
		"cuda.total":       1024 * mib,
		"cuda.free":        (1024 - 256 - 100) * mib,
		"nvml.0.rc":        0,
		"nvml.0.total":     1024 * mib,
		"nvml.0.used":      (256 + 100) * mib,
		"nvml.0.free":      (1024 - 256 - 100) * mib,
		"nvml2.0.rc":       0,
		"nvml2.0.total":    1024 * mib,
		"nvml2.0.used":     (256 + 100) * mib,
		"nvml2.0.free":     (1024 - 256 - 100) * mib,
		"nvml2.0.reserved": 0,
	}
	for k, v := range want {
		assert.Equal(t, fmt.Sprint(v), kv[k], "%s\n%s", k, r)
	}

	// Another process sees what this one holds, with or without CUDA.
	holder := m.start("hold", "200M")
	holder.await("ready", 30*time.Second)
	r = m.ok("nvmlinfo")
	assert.Equal(t, fmt.Sprint(1024*mib), r.kv()["nvml.0.total"], "%s", r)
	assert.Equal(t, fmt.Sprint(456*mib), r.kv()["nvml.0.used"], "%s", r)
	assert.Equal(t, fmt.Sprint(568*mib), r.kv()["nvml.0.free"], "%s", r)
	assert.Equal(t, fmt.Sprint(456*mib), r.kv()["nvml2.0.used"], "%s", r)
	r = m.ok("meminfo")
	assert.Equal(t, fmt.Sprint((1024-456-256)*mib), r.kv()["cuda.free"], "%s", r)
	assert.Equal(t, fmt.Sprint((456+256)*mib), r.kv()["nvml.0.used"], "%s", r)

	res := holder.stop(30 * time.Second)
	require.Equal(t, 0, res.code, "%s", res)
	r = m.ok("nvmlinfo")
	assert.Equal(t, "0", r.kv()["nvml.0.used"], "%s", r)
	assert.Equal(t, fmt.Sprint(1024*mib), r.kv()["nvml.0.free"], "%s", r)
}

// free is never more than the device really has: a cap above the physical
// memory shows the cap as total but the device's free memory as free.
func TestMemInfoBoundedByDevice(t *testing.T) {
	t.Parallel()
	m := newMachine(t, "SIMCUDA_MEM_MIB", "1024", "GPU_CONTAINER_MEM", "4096")
	r := m.ok("meminfo", "0", "100M")
	kv := r.kv()
	assert.Equal(t, fmt.Sprint(4096*mib), kv["cuda.total"], "%s", r)
	assert.Equal(t, fmt.Sprint((1024-256-100)*mib), kv["cuda.free"], "%s", r)
	assert.Equal(t, fmt.Sprint(4096*mib), kv["device.0.total"], "%s", r)
	assert.Equal(t, fmt.Sprint(4096*mib), kv["nvml.0.total"], "%s", r)
	assert.Equal(t, fmt.Sprint((1024-256-100)*mib), kv["nvml.0.free"], "%s", r)
	assert.Equal(t, fmt.Sprint((1024-256-100)*mib), kv["nvml2.0.free"], "%s", r)
}

// A container may have NVML without libcuda (nvidia-smi alone): NVML still
// shows the vGPU, and the shim does not complain about the missing driver
// it loads only to order its fork handlers after the driver's.
func TestNVMLWithoutCUDA(t *testing.T) {
	t.Parallel()
	m := newMachine(t, "GPUSLICE_REAL_LIBCUDA", "/nonexistent/libcuda.so.1")
	r := m.ok("nvmlinfo")
	assert.Equal(t, 1024*mib, r.num(t, "nvml.0.total"), "%s", r)
	assert.Empty(t, r.lines("cannot load"), "%s", r)
}
