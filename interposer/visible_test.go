package interposer_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Which device is which card when CUDA_VISIBLE_DEVICES reorders or hides
// CUDA's devices (Ray workers, vLLM, DeepSpeed's launcher do, inside a
// multi-card container): a 3-card node, the container holds all three
// cards, each with its own cap, and every charge, every view of memory and
// every gated launch must land on the card that really is the device.

// visibleCaps are the caps of cards 0, 1 and 2, MiB.
var visibleCaps = []uint64{1024, 2048, 3072}

const contextMiB = 256 // GPUSLICE_CONTEXT_MIB's and SIMCUDA_CONTEXT_MIB's default

// visibleMachine is three simulated 8 GiB devices and a container of all
// three cards, capped at visibleCaps, in the no-module mode.
func visibleMachine(t *testing.T) *machine {
	return newMachine(t, "SIMCUDA_DEVICES", "3", "GPU_IDX", "0,1,2",
		"GPU_CONTAINER_MEM", "1024,2048,3072", "GPUSLICE_ENFORCE", "file",
		"GPUSLICE_LOG_LEVEL", "info")
}

// physicalUUIDs are the devices' UUIDs as NVML, which CUDA_VISIBLE_DEVICES
// does not affect, tells them.
func physicalUUIDs(t *testing.T, m *machine) []string {
	t.Helper()
	kv := m.unshimmed().with("CUDA_VISIBLE_DEVICES", "").ok("devices").kv()
	var uuids []string
	for i := range visibleCaps {
		u := kv[fmt.Sprintf("nvml.%d.uuid", i)]
		require.True(t, strings.HasPrefix(u, "GPU-"), "nvml.%d.uuid=%q", i, u)
		uuids = append(uuids, u)
	}
	return uuids
}

// shortPrefix is the shortest prefix of uuids[i] that names no other one.
func shortPrefix(t *testing.T, uuids []string, i int) string {
	t.Helper()
	for n := len("GPU-") + 1; n <= len(uuids[i]); n++ {
		unique := true
		for j, u := range uuids {
			unique = unique && (j == i || !strings.HasPrefix(u, uuids[i][:n]))
		}
		if unique {
			return uuids[i][:n]
		}
	}
	t.Fatalf("%s is a prefix of another UUID of %v", uuids[i], uuids)
	return ""
}

// visibleCase is a CUDA_VISIBLE_DEVICES ("": unset) and the physical device
// each ordinal must then be.
type visibleCase struct {
	name string
	cvd  func(t *testing.T, uuids []string) string
	phys []int
}

func fixed(s string) func(*testing.T, []string) string {
	return func(*testing.T, []string) string { return s }
}

var visibleCases = []visibleCase{
	{"unset", fixed(""), []int{0, 1, 2}},
	{"reordered", fixed("2,0"), []int{2, 0}},
	{"subset", fixed("1"), []int{1}},
	{"uuid", func(_ *testing.T, u []string) string { return u[2] + "," + u[1] }, []int{2, 1}},
	{"uuid prefix", func(t *testing.T, u []string) string {
		return shortPrefix(t, u, 0) + "," + shortPrefix(t, u, 2)
	}, []int{0, 2}},
}

// withAndWithoutUUIDs runs each case with the agent's GPUSLICE_CARD_UUIDS
// (devices matched to cards by UUID) and without it (through NVML).
func withAndWithoutUUIDs(t *testing.T, run func(t *testing.T, m *machine, c visibleCase, how string)) {
	for _, c := range visibleCases {
		for _, agent := range []bool{true, false} {
			how := "NVML"
			if agent {
				how = "GPUSLICE_CARD_UUIDS"
			}
			t.Run(c.name+"/"+how, func(t *testing.T) {
				t.Parallel()
				m := visibleMachine(t)
				uuids := physicalUUIDs(t, m)
				if agent {
					m.set("GPUSLICE_CARD_UUIDS", strings.Join(uuids, ","))
				}
				m.set("CUDA_VISIBLE_DEVICES", c.cvd(t, uuids))
				run(t, m, c, how)
			})
		}
	}
}

// checkMatched checks the shim's one line per device (info), once the
// program has exited: matched to the right card, by how.
func checkMatched(t *testing.T, r result, c visibleCase, how string) {
	t.Helper()
	for d, ph := range c.phys {
		assert.Len(t, r.lines(fmt.Sprintf("device %d (", d), fmt.Sprintf("is card %d (by %s)", ph, how)), 1,
			"device %d is card %d by %s\n%s", d, ph, how, r)
	}
}

// Each ordinal allocates its own amount (64 MiB x (ordinal + 1)) and
// holds it: the ledger of the card that is the device has it (with the
// context), the others nothing; the simulated device holds it physically;
// cuDeviceTotalMem, cuMemGetInfo and NVML show the right card's cap; CUDA's
// and NVML's identities of the device agree.
func TestVisibleDevicesCharges(t *testing.T) {
	t.Parallel()
	withAndWithoutUUIDs(t, func(t *testing.T, m *machine, c visibleCase, how string) {
		var sizes []string
		held := map[int]uint64{} // physical device -> MiB held there
		for d, ph := range c.phys {
			size := 64 * uint64(d+1)
			sizes = append(sizes, fmt.Sprint(size))
			held[ph] = contextMiB + size
		}
		p := m.start("devices", "alloc="+strings.Join(sizes, ","), "hold")
		p.await("ready", 30*time.Second)
		r := p.result()
		kv := r.kv()
		require.Equal(t, fmt.Sprint(len(c.phys)), kv["devices"], "%s", r)
		for d, ph := range c.phys {
			cu := func(k string) string { return kv[fmt.Sprintf("cuda.%d.%s", d, k)] }
			nv := func(k string) string { return kv[fmt.Sprintf("nvml.%d.%s", ph, k)] }
			capB := visibleCaps[ph] * mib
			assert.Equal(t, nv("uuid"), cu("uuid"), "device %d is physical %d\n%s", d, ph, r)
			assert.True(t, strings.EqualFold(nv("pci"), cu("pci")), "PCI bus ids %s and %s\n%s", cu("pci"), nv("pci"), r)
			assert.Equal(t, "CUDA_SUCCESS", cu("alloc.rc"), "%s", r)
			assert.Equal(t, fmt.Sprint(capB), cu("total"), "cuDeviceTotalMem of device %d\n%s", d, r)
			assert.Equal(t, fmt.Sprint(capB), cu("meminfo"), "cuMemGetInfo total of device %d\n%s", d, r)
			assert.Equal(t, fmt.Sprint(capB-held[ph]*mib), cu("free"), "cuMemGetInfo free of device %d\n%s", d, r)
		}
		for ph, capMiB := range visibleCaps {
			want := fmt.Sprint(held[ph] * mib)
			assert.Equal(t, fmt.Sprint(capMiB*mib), kv[fmt.Sprintf("nvml.%d.total", ph)], "NVML total of %d\n%s", ph, r)
			assert.Equal(t, want, kv[fmt.Sprintf("nvml.%d.used", ph)], "NVML used of %d\n%s", ph, r)
			assert.Equal(t, want, kv[fmt.Sprintf("phys.%d.used", ph)], "physical device %d\n%s", ph, r)
			// NVML's view opened every card's ledger.
			used, capBytes := usage(t, openLedger(t, m.ledgerPath(ph)))
			assert.Equal(t, capMiB*mib, capBytes, "card %d's ledger", ph)
			assert.Equal(t, held[ph]*mib, used, "card %d's ledger", ph)
		}
		res := p.stop(30 * time.Second)
		require.Equal(t, 0, res.code, "%s", res)
		checkMatched(t, res, c, how)
	})
}

// The no-module gate on card 1 only (GPU_POLICY 0,4,0): a launch on the
// ordinal that is card 1 goes through card1.sched (its vGPU is granted a
// slice), a launch on another card does not (its vGPU, if it joined the
// file because the process sees card 1, was granted nothing), and the
// kernel runs on the physical device of its ordinal.
func TestVisibleDevicesGate(t *testing.T) {
	t.Parallel()
	withAndWithoutUUIDs(t, func(t *testing.T, m *machine, c visibleCase, how string) {
		m.set("GPU_POLICY", "0,4,0", "GPU_CONTAINER_QUOTA_PERCENT", "50,50,50",
			"GPUSLICE_SCHED_DIR", filepath.Join(m.dir, "sched"), "GPUSLICE_CONTEXT_MIB", "4")
		file := filepath.Join(m.dir, "sched", "card1.sched")
		for d, ph := range c.phys {
			key := fmt.Sprintf("launch-%d", d)
			p := m.with("GPUSLICE_VGPU", key).start("devices", fmt.Sprintf("launch=%d", d), "hold")
			p.await("ready", 30*time.Second)
			r := p.result()
			kv := r.kv()
			require.Equal(t, "CUDA_SUCCESS", kv[fmt.Sprintf("cuda.%d.launch.rc", d)], "%s", r)
			for i := range visibleCaps {
				want := "0"
				if i == ph {
					want = "1"
				}
				assert.Equal(t, want, kv[fmt.Sprintf("phys.%d.kernels", i)], "kernels on physical %d\n%s", i, r)
			}
			granted, listed := vgpuSlices(t, m, file, key)
			if ph == 1 {
				assert.Positive(t, granted, "device %d is card 1: its launch is gated\n%s", d, r)
			} else {
				assert.Zero(t, granted, "device %d is card %d: its launch is not card 1's\n%s", d, ph, r)
			}
			if !slices.Contains(c.phys, 1) {
				assert.False(t, listed, "card 1 is not visible: its schedule file is not joined\n%s", r)
			}
			res := p.stop(30 * time.Second)
			require.Equal(t, 0, res.code, "%s", res)
			checkMatched(t, res, c, how)
		}
	})
}

// vgpuSlices is the slices granted to the vGPU of key in a schedule file,
// and whether the file lists it at all (a file not created lists nothing).
func vgpuSlices(t *testing.T, m *machine, file, key string) (uint64, bool) {
	t.Helper()
	if _, err := os.Stat(file); os.IsNotExist(err) {
		return 0, false
	}
	n, ok := slicesGranted(t, m.ok("schedinfo", file).stdout)[key]
	return n, ok
}

// The simulated driver's CUDA_VISIBLE_DEVICES, without the shim, as
// NVIDIA documents it: indices or UUIDs (whole or a unique prefix) in the
// listed order, the list cut at its first invalid entry, no device at all
// when nothing valid is listed; NVML unaffected; a device's UUID and PCI
// bus id are the physical device's on both sides.
func TestSimVisibleDevices(t *testing.T) {
	t.Parallel()
	common := func(a, b string) string { // their longest common prefix
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		return a[:n]
	}
	for _, tc := range []struct {
		name string
		cvd  func(u []string) string
		phys []int // nil: cuInit says CUDA_ERROR_NO_DEVICE
	}{
		{"documented example", func([]string) string { return "0,2,-1,1" }, []int{0, 2}},
		{"reordered", func([]string) string { return "2,1" }, []int{2, 1}},
		{"index past the last", func([]string) string { return "1,3,0" }, []int{1}},
		{"repeated", func([]string) string { return "1,1,0" }, []int{1}},
		{"not a number", func([]string) string { return "2,x,0" }, []int{2}},
		{"whole uuid", func(u []string) string { return u[1] + "," + u[0] }, []int{1, 0}},
		{"ambiguous prefix", func(u []string) string { return "2," + common(u[0], u[1]) + ",0" }, []int{2}},
		{"mig", func(u []string) string { return u[1] + ",MIG-" + u[0][4:] + "/1/0,0" }, []int{1}},
		{"empty", func([]string) string { return "" }, nil},
		{"none valid", func([]string) string { return "3,0" }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := visibleMachine(t).unshimmed()
			uuids := physicalUUIDs(t, m)
			m.env["CUDA_VISIBLE_DEVICES"] = tc.cvd(uuids) // set, even when empty
			r := m.run("devices")
			kv := r.kv()
			if tc.phys == nil {
				require.Equal(t, 1, r.code, "%s", r)
				assert.Equal(t, "CUDA_ERROR_NO_DEVICE", kv["init.rc"], "%s", r)
				return
			}
			require.Equal(t, 0, r.code, "%s", r)
			require.Equal(t, fmt.Sprint(len(tc.phys)), kv["devices"], "%s", r)
			assert.Equal(t, "3", kv["nvml.count"], "NVML shows every device\n%s", r)
			for d, ph := range tc.phys {
				assert.Equal(t, uuids[ph], kv[fmt.Sprintf("cuda.%d.uuid", d)], "device %d\n%s", d, r)
				assert.True(t, strings.EqualFold(kv[fmt.Sprintf("nvml.%d.pci", ph)], kv[fmt.Sprintf("cuda.%d.pci", d)]),
					"device %d's PCI bus id is physical %d's\n%s", d, ph, r)
			}
			for i, u := range uuids {
				assert.Equal(t, u, kv[fmt.Sprintf("nvml.%d.uuid", i)], "NVML device %d\n%s", i, r)
			}
		})
	}
}

// Without NVML and without the agent's GPUSLICE_CARD_UUIDS the shim can
// only take ordinals as positions: with CUDA_VISIBLE_DEVICES set it says
// so, once. With the variable it needs no NVML.
func TestVisibleDevicesWithoutNVML(t *testing.T) {
	t.Parallel()
	m := visibleMachine(t)
	uuids := physicalUUIDs(t, m)
	m.set("GPUSLICE_REAL_LIBNVML", "/nonexistent/libnvidia-ml.so.1", "CUDA_VISIBLE_DEVICES", "2,0")

	r := m.ok("alloc", "1M", "0")
	assert.Equal(t, visibleCaps[0]*mib, r.num(t, "total"), "taken as card 0, by position\n%s", r)
	assert.Len(t, r.lines("gpuslice[", "CUDA_VISIBLE_DEVICES=2,0", "by ordinal, not by UUID"), 1, "%s", r)

	r = m.with("CUDA_VISIBLE_DEVICES", "").ok("alloc", "1M", "0")
	assert.Empty(t, r.lines("gpuslice[", "by ordinal, not by UUID"), "%s", r)

	// Upper-case hex is the same UUID.
	r = m.with("GPUSLICE_CARD_UUIDS", strings.ToUpper(strings.Join(uuids, ","))).ok("alloc", "1M", "0")
	assert.Equal(t, visibleCaps[2]*mib, r.num(t, "total"), "device 0 is card 2, by UUID\n%s", r)
	assert.Empty(t, r.lines("gpuslice[", "by ordinal"), "%s", r)
}

// A device whose UUID GPUSLICE_CARD_UUIDS does not list is not the
// container's: nothing may be allocated on it, and one line says why.
func TestCardUUIDsNotListedRefused(t *testing.T) {
	t.Parallel()
	m := newMachine(t, "GPUSLICE_CARD_UUIDS", "GPU-00000000-0000-4000-8000-000000000000")
	r := m.run("alloc", "1M")
	require.Equal(t, 2, r.code, "the context must be refused: %s", r)
	assert.Len(t, r.lines("gpuslice[", "device 0 (GPU-", "none of this container's cards (GPUSLICE_CARD_UUIDS)"), 1, "%s", r)
	r = m.ok("nvmlinfo")
	assert.Equal(t, "0", r.kv()["nvml.0.total"], "NVML agrees: not the container's card\n%s", r)
}

// GPUSLICE_CARD_UUIDS is in GPU_IDX's order, whatever that order: each
// UUID stays with its card (and its cap) when the shim sorts the cards.
func TestCardUUIDsFollowGPUIdx(t *testing.T) {
	t.Parallel()
	m := visibleMachine(t)
	u := physicalUUIDs(t, m)
	m.set("GPU_IDX", "2,0", "GPU_CONTAINER_MEM", "3072,1024", "GPUSLICE_CARD_UUIDS", u[2]+","+u[0])
	assert.Equal(t, 3072*mib, m.ok("alloc", "1M", "2").num(t, "total"))
	assert.Equal(t, 1024*mib, m.ok("alloc", "1M", "0").num(t, "total"))
	r := m.run("alloc", "1M", "1")
	assert.Equal(t, 2, r.code, "device 1 is not the container's\n%s", r)
}

// A container holds only its cards' device nodes, and the driver shows
// only the GPUs whose /dev/nvidia<minor> it can open, renumbered from 0;
// CUDA_VISIBLE_DEVICES then counts those. The simulated driver does the
// same with SIMCUDA_DEVICE_NODES naming the container's /dev.
func TestDeviceNodes(t *testing.T) {
	m := visibleMachine(t)
	uuids := physicalUUIDs(t, m)
	dev := t.TempDir()
	for _, d := range []int{0, 2} {
		require.NoError(t, os.WriteFile(filepath.Join(dev, fmt.Sprintf("nvidia%d", d)), nil, 0o644))
	}
	for _, c := range []struct {
		cvd  string
		phys []int
	}{
		{"", []int{0, 2}},
		{"1", []int{2}},
		{"1,0", []int{2, 0}},
		{uuids[2], []int{2}},
		{uuids[1], nil}, // a card whose node is not there: no device
		{"2", nil},      // past the reachable ones
	} {
		t.Run("CUDA_VISIBLE_DEVICES="+c.cvd, func(t *testing.T) {
			u := m.unshimmed().with("SIMCUDA_DEVICE_NODES", dev)
			if c.cvd != "" {
				u = u.with("CUDA_VISIBLE_DEVICES", c.cvd)
			}
			r := u.run("devices")
			kv := r.kv()
			if c.phys == nil {
				assert.Equal(t, "CUDA_ERROR_NO_DEVICE", kv["init.rc"], "cuInit with no reachable device listed\n%s", r)
				return
			}
			assert.Equal(t, fmt.Sprint(len(c.phys)), kv["devices"], "%s", r)
			for d, ph := range c.phys {
				assert.Equal(t, uuids[ph], kv[fmt.Sprintf("cuda.%d.uuid", d)], "ordinal %d\n%s", d, r)
			}
			assert.Empty(t, kv[fmt.Sprintf("cuda.%d.uuid", len(c.phys))], "no ordinal past the reachable ones\n%s", r)
		})
	}
}
