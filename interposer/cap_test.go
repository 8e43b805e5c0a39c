package interposer_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every allocation path holds the cap exactly: gstest cap fills the vGPU to
// the byte through the path, the smallest further allocation is refused
// with CUDA_ERROR_OUT_OF_MEMORY while the device has gigabytes left, the
// frees (with the synchronisation or trim the path needs) give every byte
// back, and the vGPU can be filled again. Here the test checks that the
// program saw the vGPU (total = cap, free = cap - the context) and
// succeeded; the program checks each step (see tests/cap.c).
func TestCapPerPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path   string
		capMiB uint64
		ctxMiB uint64 // GPUSLICE_CONTEXT_MIB and the simulator's context cost
	}{
		{"alloc", 1024, 256},
		{"pitch", 1024, 256},
		{"async", 1024, 256},
		{"async_ptsz", 1024, 256},
		{"pool", 1024, 256},
		{"pool_ptsz", 1024, 256},
		{"vmm", 1024, 256},
		{"array", 1024, 256},
		{"array3d", 1024, 256},
		{"mipmap", 1024, 256},
		{"context", 1024, 256},
		// Other caps and context costs: the configuration is honoured.
		{"alloc", 640, 64},
		{"async", 302, 46},
		{"vmm", 4096, 0},
		{"mipmap", 97, 1},
		{"context", 3000, 1000},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/cap%d_ctx%d", tc.path, tc.capMiB, tc.ctxMiB), func(t *testing.T) {
			t.Parallel()
			ctx := strconv.FormatUint(tc.ctxMiB, 10)
			m := newMachine(t,
				"GPU_CONTAINER_MEM", strconv.FormatUint(tc.capMiB, 10),
				"GPUSLICE_CONTEXT_MIB", ctx, "SIMCUDA_CONTEXT_MIB", ctx)
			r := m.ok("cap", tc.path)
			assert.Equal(t, tc.capMiB*mib, r.num(t, "total"), "cuMemGetInfo total must be the cap")
			// The context path measures from a created context, the others
			// from the primary one: either way one context is charged.
			assert.Equal(t, (tc.capMiB-tc.ctxMiB)*mib, r.num(t, "free"), "cuMemGetInfo free must be cap - context")
			if tc.path == "context" {
				assert.Equal(t, tc.ctxMiB*mib, r.num(t, "ctx_bytes"), "a context costs GPUSLICE_CONTEXT_MIB")
			}
			// The one refusal (and its line) came from the shim.
			assert.NotEmpty(t, r.lines("gpuslice[", "refused"), "%s", r)

			// The ledger the process charged has the cap, and nothing is
			// left in it.
			l := openLedger(t, m.ledgerPath(0))
			used, capBytes := usage(t, l)
			assert.Equal(t, tc.capMiB*mib, capBytes)
			assert.Zero(t, used)
		})
	}
}

// The processes of one container share its cap; another container on the
// same card has a cap of its own.
func TestCapSharedByContainer(t *testing.T) {
	t.Parallel()
	m := newMachine(t) // cap 1024 MiB, contexts 256 MiB
	holder := m.start("hold", "300M")
	holder.await("ready", 30*time.Second)

	// 1024 - 256 - 300 for the holder, 256 for our own context.
	r := m.ok("cap", "alloc")
	assert.Equal(t, 212*mib, r.num(t, "free"))
	assert.Equal(t, 2, m.run("alloc", "213M").code, "past the shared cap")
	assert.Equal(t, 0, m.run("alloc", "212M").code)

	l := openLedger(t, m.ledgerPath(0))
	used, _ := usage(t, l)
	assert.Equal(t, 556*mib, used, "the ledger holds the holder's context and allocation")

	// Another container (its own ledger directory) on the same device.
	other := m.with("GPUSLICE_LEDGER_DIR", m.dir+"/other-container")
	assert.Equal(t, 0, other.run("alloc", "768M").code)

	res := holder.stop(30 * time.Second)
	require.Equal(t, 0, res.code, "%s", res)
	used, _ = usage(t, l)
	assert.Zero(t, used, "the holder freed everything")
}

// The same programs that the cap refuses succeed without one: these tests
// can fail, and the refusals seen elsewhere come from the shim, not from
// the device.
func TestPassThrough(t *testing.T) {
	t.Parallel()
	capped := newMachine(t)
	uncapped := capped.with("GPU_CONTAINER_MEM", "", "GPU_IDX", "")
	unshimmed := capped.unshimmed()

	t.Run("alloc", func(t *testing.T) {
		assert.Equal(t, 2, capped.run("alloc", "769M").code)
		r := uncapped.ok("alloc", "769M")
		assert.Equal(t, 8192*mib, r.num(t, "total"), "without a cap the device is seen whole")
		assert.Equal(t, 0, unshimmed.run("alloc", "769M").code)
	})
	t.Run("direct", func(t *testing.T) {
		bytes := strconv.FormatUint(769*mib, 10)
		assert.Equal(t, 2, capped.run(direct, bytes).code)
		assert.Equal(t, 0, uncapped.run(direct, bytes).code)
	})
	t.Run("managed", func(t *testing.T) {
		capped.ok("managed")
		r := uncapped.run("managed")
		assert.Equal(t, 1, r.code, "gstest managed must fail where managed memory is granted\n%s", r)
		assert.Empty(t, r.lines("gpuslice["), "no cap, no diagnostics")
	})
	t.Run("procaddr", func(t *testing.T) {
		capped.ok("procaddr", "768M")
		r := uncapped.run("procaddr", "768M")
		assert.Equal(t, 1, r.code, "gstest procaddr must fail when nothing refuses\n%s", r)
	})
	t.Run("meminfo", func(t *testing.T) {
		r := uncapped.ok("meminfo", "0", "100M")
		kv := r.kv()
		assert.Equal(t, fmt.Sprint(8192*mib), kv["cuda.total"])
		assert.Equal(t, fmt.Sprint(8192*mib), kv["device.0.total"])
		assert.Equal(t, fmt.Sprint(8192*mib), kv["nvml.0.total"])
		assert.Equal(t, fmt.Sprint((8192-256-100)*mib), kv["cuda.free"])
	})
}

// A program linked against libcuda.so.1 (no dlopen) reaches the shim by
// symbol through LD_PRELOAD.
func TestDirectLink(t *testing.T) {
	t.Parallel()
	m := newMachine(t)
	r := m.run(direct, strconv.FormatUint(769*mib, 10))
	require.Equal(t, 2, r.code, "%s", r)
	assert.Equal(t, 1024*mib, r.num(t, "total"))
	assert.Equal(t, 1024*mib, r.num(t, "device.total"))
	assert.Equal(t, 768*mib, r.num(t, "free"))
	assert.Equal(t, uint64(801), r.num(t, "managed.rc"), "CUDA_ERROR_NOT_SUPPORTED")
	assert.Len(t, r.lines("cuMemAlloc of", "refused"), 1, "%s", r)

	r = m.run(direct, strconv.FormatUint(768*mib, 10))
	assert.Equal(t, 0, r.code, "up to the cap: %s", r)
}

// Managed memory is refused with CUDA_ERROR_NOT_SUPPORTED and one line on
// stderr per process, however many threads ask how often.
func TestManagedRefused(t *testing.T) {
	t.Parallel()
	m := newMachine(t)
	for i := 0; i < 2; i++ { // each process says it once
		r := m.ok("managed")
		assert.Len(t, r.lines("gpuslice[", "cuMemAllocManaged"), 1, "%s", r)
		assert.Len(t, r.lines("gpuslice["), 1, "nothing else on stderr: %s", r)
	}
}
