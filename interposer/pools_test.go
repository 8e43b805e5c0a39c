package interposer_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// CUDA 13 pools (tests/cap_pool.c, tests/pools.c): the shim classifies a
// pool by what the driver says of it, not by the current device. A pool of
// a device's memory is charged to that device's card, exactly (the cap
// paths' checks); host memory is never charged; managed memory is refused
// on every path. Each case runs with the entry points from dlsym, from
// cuGetProcAddress and from cuGetProcAddress_v2 (GSTEST_PROCADDR).

var poolVias = []string{"dlsym", "v1", "v2"}

// poolCase is where a pool test runs: which driver, and whether the pools
// are made behind the shim's back (loaded late, GSTEST_UNSEEN_POOLS), so
// that only what the driver says of them can classify them.
type poolCase struct {
	driver string // SIMCUDA_DRIVER_VERSION, "" the default (13020)
	unseen bool
}

func (c poolCase) name() string {
	n := "cuda" + c.driver
	if c.driver == "" {
		n = "cuda13.2"
	}
	if c.unseen {
		n += "_unseen"
	}
	return n
}

// poolTest is one gstest run: a cap path, or a way of `gstest pools`.
type poolTest struct {
	how string
	dev int // cap paths: the device whose vGPU is measured
	poolCase
}

// eachPoolTest runs check, in parallel, for every test and every way gstest
// reaches the driver, on a fresh machine from newM.
func eachPoolTest(t *testing.T, tests []poolTest, newM func(t *testing.T) *machine,
	check func(t *testing.T, tc poolTest, m *machine)) {
	for _, tc := range tests {
		for _, via := range poolVias {
			t.Run(fmt.Sprintf("%s/%s/%s", tc.how, tc.name(), via), func(t *testing.T) {
				t.Parallel()
				check(t, tc, tc.machine(newM(t), via))
			})
		}
	}
}

// machine applies the case and the way gstest reaches the driver to m.
func (c poolCase) machine(m *machine, via string) *machine {
	m = m.with("SIMCUDA_DRIVER_VERSION", c.driver)
	if via != "dlsym" {
		m.set("GSTEST_PROCADDR", via)
	}
	if c.unseen {
		m = m.unshimmed().set("GSTEST_LATE_SHIM", shim, "GSTEST_UNSEEN_POOLS", "1")
	}
	return m
}

// Device pools hold the cap exactly, on the card of the pool's device.
// pool_xdev allocates on a stream of device 0, with device 0's context
// current, from a pool of device 1: card 1 is filled to the byte and card 0
// is not charged. Unseen, the shim never saw the pool made and the
// devices' default and current pools do not include it: only the pool's
// location attribute says it is device 1's.
func TestPoolDeviceKinds(t *testing.T) {
	t.Parallel()
	tests := []poolTest{
		{"pool_default", 0, poolCase{}},
		{"pool_current", 0, poolCase{}},
		{"pool_xdev", 1, poolCase{}},
		{"pool_xdev", 1, poolCase{unseen: true}},
		{"pool_current", 0, poolCase{unseen: true}},
		// CUDA 13.0: the calls, not the attributes.
		{"pool_default", 0, poolCase{driver: "13000"}},
		{"pool_current", 0, poolCase{driver: "13000"}},
		{"pool_xdev", 1, poolCase{driver: "13000"}},
	}
	caps := []uint64{2048, 1024}
	twoCards := func(t *testing.T) *machine {
		return newMachine(t, "SIMCUDA_DEVICES", "2", "GPU_IDX", "0,1", "GPU_CONTAINER_MEM", "2048,1024")
	}
	eachPoolTest(t, tests, twoCards, func(t *testing.T, tc poolTest, m *machine) {
		r := m.ok("cap", tc.how, strconv.Itoa(tc.dev))
		assert.Equal(t, caps[tc.dev]*mib, r.num(t, "total"), "the vGPU of the pool's card")
		assert.Equal(t, (caps[tc.dev]-256)*mib, r.num(t, "free"))
		assert.NotEmpty(t, r.lines("gpuslice[", "refused", fmt.Sprintf("card %d's", tc.dev)), "%s", r)
		// Every card the program used (card 0 has pool_xdev's allocating
		// context) is left with nothing charged.
		for idx := 0; idx <= tc.dev; idx++ {
			used, capBytes := usage(t, openLedger(t, m.ledgerPath(idx)))
			assert.Equal(t, caps[idx]*mib, capBytes)
			assert.Zero(t, used, "card %d", idx)
		}
	})
}

func oneCard(t *testing.T) *machine { return newMachine(t) }

// Pools of host memory are never charged: one and a half times the vGPU is
// allocated from one, and the vGPU's free does not move.
func TestPoolHostKinds(t *testing.T) {
	t.Parallel()
	tests := []poolTest{
		{"create", 0, poolCase{}},
		{"numa", 0, poolCase{}},
		{"default", 0, poolCase{}},
		{"default_numa", 0, poolCase{}},
		{"current", 0, poolCase{}},
		{"create", 0, poolCase{unseen: true}},
		{"numa", 0, poolCase{unseen: true}},
		// CUDA 13.0: known by the location asked for, not by attributes.
		{"default", 0, poolCase{driver: "13000"}},
		{"default_numa", 0, poolCase{driver: "13000"}},
		{"current", 0, poolCase{driver: "13000"}},
		// CUDA 12: host pools from cuMemPoolCreate.
		{"create", 0, poolCase{driver: "12080"}},
		{"numa", 0, poolCase{driver: "12080"}},
	}
	eachPoolTest(t, tests, oneCard, func(t *testing.T, tc poolTest, m *machine) {
		r := m.ok("pools", "host", tc.how)
		assert.Greater(t, r.num(t, "host_bytes"), 1024*mib, "more than the vGPU")
		assert.Empty(t, r.lines("gpuslice["), "%s", r)
		used, _ := usage(t, openLedger(t, m.ledgerPath(0)))
		assert.Zero(t, used)
	})
}

// Managed pools are refused like cuMemAllocManaged: CUDA_ERROR_NOT_SUPPORTED
// at each location (device 0, host, host NUMA node 0, none) and one line
// on stderr per process. alloc allocates from a managed pool the shim
// never saw made: its allocation type attribute gives it away.
func TestPoolManagedRefused(t *testing.T) {
	t.Parallel()
	tests := []poolTest{
		{"create", 0, poolCase{}},
		{"default", 0, poolCase{}},
		{"current", 0, poolCase{}},
		{"set", 0, poolCase{}},
		{"alloc", 0, poolCase{unseen: true}},
		{"create", 0, poolCase{driver: "13000"}},
		{"default", 0, poolCase{driver: "13000"}},
		{"set", 0, poolCase{driver: "13000"}},
	}
	eachPoolTest(t, tests, oneCard, func(t *testing.T, tc poolTest, m *machine) {
		r := m.ok("pools", "managed", tc.how)
		assert.Equal(t, uint64(4), r.num(t, "refused"))
		assert.Len(t, r.lines("gpuslice[", "unified memory is not supported"), 1, "%s", r)
		assert.Len(t, r.lines("gpuslice["), 1, "nothing else on stderr: %s", r)
		// Without a cap the driver grants managed pools: the program
		// fails there, so the refusals are the shim's.
		u := m.with("GPU_CONTAINER_MEM", "", "GPU_IDX", "").run("pools", "managed", tc.how)
		assert.Equal(t, 1, u.code, "uncapped: %s", u)
	})
}

// The simulated driver keeps the documented rules of the CUDA 13 pool
// calls (which location and type pairs exist, which pools may be made
// current where, what the attributes answer, that host and managed pools
// take no device memory), which the tests above rely on.
func TestPoolDriverRules(t *testing.T) {
	t.Parallel()
	newMachine(t).unshimmed().ok("pools", "rules")
}

// A CUDA 12 driver refuses the pool attributes: the shim falls back on the
// pool's creation and on the devices' default and current pools. The
// existing cap paths hold exactly, device 1's default pool used from
// device 0 is charged to card 1 (found by the search), and managed pools,
// which such a driver cannot make, are refused all the same.
func TestPoolCUDA12Fallback(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"pool", "pool_ptsz", "async"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			m := newMachine(t, "SIMCUDA_DRIVER_VERSION", "12080")
			r := m.ok("cap", path)
			assert.Equal(t, 768*mib, r.num(t, "free"))
		})
	}
	t.Run("crossdev", func(t *testing.T) {
		t.Parallel()
		m := newMachine(t, "SIMCUDA_DRIVER_VERSION", "12080", "SIMCUDA_DEVICES", "2",
			"GPU_IDX", "0,1", "GPU_CONTAINER_MEM", "1024,2048")
		m.ok("edge", "crossdev", "1792M")
	})
	t.Run("managed", func(t *testing.T) {
		t.Parallel()
		m := newMachine(t, "SIMCUDA_DRIVER_VERSION", "12080")
		r := m.ok("pools", "managed", "create")
		assert.Len(t, r.lines("gpuslice[", "unified memory is not supported"), 1, "%s", r)
	})
	t.Run("no CUDA 13 calls", func(t *testing.T) {
		t.Parallel()
		m := newMachine(t, "SIMCUDA_DRIVER_VERSION", "12080", "GSTEST_PROCADDR", "v2")
		r := m.run("pools", "managed", "default")
		require.Equal(t, 1, r.code, "%s", r)
		assert.NotEmpty(t, r.lines("does not export cuMemGetDefaultMemPool"), "%s", r)
	})
}
