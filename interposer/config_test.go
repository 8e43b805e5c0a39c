package interposer_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A malformed configuration fails closed: one stderr line naming the
// variable (and the allowed range where there is one), then every device
// allocation is refused, including the context, and the process sees a
// vGPU of 0 bytes.
func TestInvalidConfigFailsClosed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		env       []string
		variable  string // named on the one line, as NAME=value
		wantRange bool
	}{
		{"mem not a number", []string{"GPU_CONTAINER_MEM", "lots"}, "GPU_CONTAINER_MEM", true},
		{"mem zero", []string{"GPU_CONTAINER_MEM", "0"}, "GPU_CONTAINER_MEM", true},
		{"mem negative", []string{"GPU_CONTAINER_MEM", "-5"}, "GPU_CONTAINER_MEM", true},
		{"mem too large", []string{"GPU_CONTAINER_MEM", "99999999999"}, "GPU_CONTAINER_MEM", true},
		{"mem unit", []string{"GPU_CONTAINER_MEM", "1024M"}, "GPU_CONTAINER_MEM", true},
		{"mem trailing comma", []string{"GPU_CONTAINER_MEM", "1024,"}, "GPU_CONTAINER_MEM", true},
		{"mem empty item", []string{"GPU_CONTAINER_MEM", "1024,,512", "GPU_IDX", "0,1"}, "GPU_CONTAINER_MEM", true},
		{"idx not a number", []string{"GPU_IDX", "first"}, "GPU_IDX", true},
		{"idx too large", []string{"GPU_IDX", "256"}, "GPU_IDX", true},
		{"idx twice", []string{"GPU_IDX", "0,0", "GPU_CONTAINER_MEM", "512,512"}, "GPU_IDX", false},
		{"idx and mem counts differ", []string{"GPU_IDX", "0,1", "GPU_CONTAINER_MEM", "1024"}, "GPU_IDX", false},
		{"context not a number", []string{"GPUSLICE_CONTEXT_MIB", "some"}, "GPUSLICE_CONTEXT_MIB", true},
		{"context too large", []string{"GPUSLICE_CONTEXT_MIB", "70000"}, "GPUSLICE_CONTEXT_MIB", true},
		{"enforce unknown", []string{"GPUSLICE_ENFORCE", "kernel"}, "GPUSLICE_ENFORCE", false},
		// The agent's card UUIDs, which devices are matched by.
		{"uuids malformed", []string{"GPUSLICE_CARD_UUIDS", "GPU-8932f937"}, "GPUSLICE_CARD_UUIDS", true},
		{"uuids not hex", []string{"GPUSLICE_CARD_UUIDS", "GPU-8932f937-d72c-4106-c12f-20bd9faed9fg"}, "GPUSLICE_CARD_UUIDS", true},
		{"uuids trailing comma", []string{"GPUSLICE_CARD_UUIDS", "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6,"}, "GPUSLICE_CARD_UUIDS", true},
		{"uuids fewer than cards", []string{"GPU_IDX", "0,1", "GPU_CONTAINER_MEM", "512,512",
			"GPUSLICE_CARD_UUIDS", "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"}, "GPUSLICE_CARD_UUIDS", true},
		{"uuids more than cards", []string{"GPUSLICE_CARD_UUIDS",
			"GPU-8932f937-d72c-4106-c12f-20bd9faed9f6,GPU-8932f937-d72c-4106-c12f-20bd9faed9f7"}, "GPUSLICE_CARD_UUIDS", true},
		{"uuids twice", []string{"GPU_IDX", "0,1", "GPU_CONTAINER_MEM", "512,512", "GPUSLICE_CARD_UUIDS",
			"GPU-8932f937-d72c-4106-c12f-20bd9faed9f6,GPU-8932F937-D72C-4106-C12F-20BD9FAED9F6"}, "GPUSLICE_CARD_UUIDS", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newMachine(t, tc.env...)
			r := m.run("alloc", "1M")
			require.Equal(t, 2, r.code, "the context must be refused: %s", r)
			assert.Equal(t, uint64(2), r.num(t, "ctx.rc"))
			named := r.lines("gpuslice[", tc.variable+"=")
			require.Len(t, named, 1, "one line naming %s: %s", tc.variable, r)
			if tc.wantRange {
				assert.Regexp(t, rangeRE, named[0])
			}

			// cuDeviceTotalMem and NVML show a vGPU of nothing.
			r = m.run("meminfo")
			assert.Equal(t, 2, r.code, "%s", r)
			assert.Equal(t, "0", r.kv()["device.0.total"], "%s", r)
			r = m.ok("nvmlinfo")
			assert.Equal(t, "0", r.kv()["nvml.0.total"], "%s", r)
			assert.Equal(t, "0", r.kv()["nvml.0.free"], "%s", r)

			// Without the shim the same program runs: the refusal was its.
			assert.Equal(t, 0, m.unshimmed().run("alloc", "1M").code)
		})
	}
}

// GPUSLICE_ENFORCE=module where the kernel module cannot be used (not
// loaded here, or this process's cgroup has no vGPU) refuses every device
// allocation, saying so, rather than falling back to the cooperative file
// ledger. The module's side is tested in the qemu guest (kmod/guest).
func TestEnforceModuleWithoutModuleFailsClosed(t *testing.T) {
	t.Parallel()
	m := newMachine(t, "GPUSLICE_ENFORCE", "module")
	r := m.run("alloc", "1M")
	require.Equal(t, 2, r.code, "the context must be refused: %s", r)
	assert.NotEmpty(t, r.lines("gpuslice[", "/dev/gpuslice"), "%s", r)
	m.with("GPUSLICE_ENFORCE", "file").ok("alloc", "1M")
}

// A ledger directory that cannot be used refuses everything, saying why.
func TestUnusableLedgerFailsClosed(t *testing.T) {
	t.Parallel()
	m := newMachine(t)
	file := filepath.Join(m.dir, "a-file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	for _, dir := range []string{file, filepath.Join(file, "sub")} {
		r := m.with("GPUSLICE_LEDGER_DIR", dir).run("alloc", "1M")
		require.Equal(t, 2, r.code, "%s", r)
		assert.NotEmpty(t, r.lines("gpuslice[", "GPUSLICE_LEDGER_DIR"), "%s", r)
	}
	// A directory that does not exist yet is created.
	m.with("GPUSLICE_LEDGER_DIR", filepath.Join(m.dir, "new")).ok("alloc", "1M")
}

// GPUSLICE_LOG_LEVEL: a bad value is reported and changes nothing else;
// "error" silences the refusal warnings but not the errors.
func TestLogLevel(t *testing.T) {
	t.Parallel()
	m := newMachine(t)
	r := m.with("GPUSLICE_LOG_LEVEL", "loud").ok("alloc", "1M")
	assert.Len(t, r.lines("gpuslice[", "GPUSLICE_LOG_LEVEL=loud"), 1, "%s", r)

	r = m.with("GPUSLICE_LOG_LEVEL", "error").run("alloc", "769M")
	assert.Equal(t, 2, r.code, "%s", r)
	assert.Empty(t, r.lines("gpuslice["), "%s", r)

	r = m.with("GPUSLICE_LOG_LEVEL", "info").ok("alloc", "1M")
	assert.NotEmpty(t, r.lines("gpuslice[", "card 0", "1024 MiB"), "%s", r)
}

// Two cards, each with its own cap and its own ledger.
// GPU_IDX may list the cards in any order: devices appear in PCI order,
// the order of the physical indices, and each keeps the cap paired with
// its index.
func TestMultiCardUnsortedIndex(t *testing.T) {
	t.Parallel()
	m := newMachine(t, "SIMCUDA_DEVICES", "2", "GPU_IDX", "1,0", "GPU_CONTAINER_MEM", "2048,1024")
	kv := m.ok("meminfo", "1").kv()
	assert.Equal(t, fmt.Sprint(1024*mib), kv["device.0.total"])
	assert.Equal(t, fmt.Sprint(2048*mib), kv["device.1.total"])
	assert.Equal(t, 2, m.run("alloc", "769M", "0").code, "card 0's cap is 1024 MiB")
	assert.Equal(t, 0, m.run("alloc", "1792M", "1").code, "card 1's cap is 2048 MiB")
}

func TestMultiCard(t *testing.T) {
	t.Parallel()
	m := newMachine(t, "SIMCUDA_DEVICES", "2", "GPU_IDX", "0,1", "GPU_CONTAINER_MEM", "1024,2048")
	caps := []uint64{1024, 2048}
	for dev, capMiB := range caps {
		for _, path := range []string{"alloc", "async", "pool", "vmm", "array", "context"} {
			r := m.ok("cap", path, fmt.Sprint(dev))
			assert.Equal(t, capMiB*mib, r.num(t, "total"), "device %d %s", dev, path)
			assert.Equal(t, (capMiB-256)*mib, r.num(t, "free"), "device %d %s", dev, path)
		}
	}

	r := m.ok("meminfo", "1")
	kv := r.kv()
	assert.Equal(t, fmt.Sprint(1024*mib), kv["device.0.total"], "%s", r)
	assert.Equal(t, fmt.Sprint(2048*mib), kv["device.1.total"], "%s", r)
	assert.Equal(t, fmt.Sprint(1024*mib), kv["nvml.0.total"], "%s", r)
	assert.Equal(t, fmt.Sprint(2048*mib), kv["nvml.1.total"], "%s", r)
	assert.Equal(t, fmt.Sprint(1792*mib), kv["cuda.free"], "%s", r)

	// With the context on device 0, device 1's memory is card 1's (its own
	// context, which the case opens for a stream of it, takes 256 MiB).
	m.ok("edge", "crossdev", "1792M")

	// Card 0 full does not take anything from card 1.
	holder := m.start("hold", "768M", "0")
	holder.await("ready", 30*time.Second)
	assert.Equal(t, 2, m.run("alloc", "1M", "0").code, "card 0 is full")
	assert.Equal(t, 0, m.run("alloc", "1792M", "1").code, "card 1 is not")
	assert.Equal(t, 2, m.run("alloc", "1793M", "1").code)

	l0, l1 := openLedger(t, m.ledgerPath(0)), openLedger(t, m.ledgerPath(1))
	used, capBytes := usage(t, l0)
	assert.Equal(t, 1024*mib, capBytes)
	assert.Equal(t, 1024*mib, used)
	used, capBytes = usage(t, l1)
	assert.Equal(t, 2048*mib, capBytes)
	assert.Zero(t, used)
	res := holder.stop(30 * time.Second)
	require.Equal(t, 0, res.code, "%s", res)
}

// GPU_IDX=1 alone on a machine with two devices (no container around the
// process): device 1 is the container's card, device 0 gets nothing.
func TestOneCardOfTwo(t *testing.T) {
	t.Parallel()
	m := newMachine(t, "SIMCUDA_DEVICES", "2", "GPU_IDX", "1", "GPU_CONTAINER_MEM", "1024")
	r := m.ok("cap", "alloc", "1")
	assert.Equal(t, 1024*mib, r.num(t, "total"))
	assert.Equal(t, 768*mib, r.num(t, "free"))
	m.ok("cap", "vmm", "1")
	m.ok("cap", "pool", "1")

	r = m.run("alloc", "1M", "0")
	require.Equal(t, 2, r.code, "device 0 is not the container's: %s", r)
	assert.NotEmpty(t, r.lines("gpuslice[", "GPU_IDX"), "%s", r)

	r = m.run("meminfo", "0")
	assert.Equal(t, 2, r.code, "%s", r)
	assert.Equal(t, "0", r.kv()["device.0.total"], "%s", r)
	assert.Equal(t, fmt.Sprint(1024*mib), r.kv()["device.1.total"], "%s", r)
	r = m.ok("nvmlinfo")
	assert.Equal(t, "0", r.kv()["nvml.0.total"], "%s", r)
	assert.Equal(t, fmt.Sprint(1024*mib), r.kv()["nvml.1.total"], "%s", r)

	assert.FileExists(t, m.ledgerPath(1))
	assert.NoFileExists(t, m.ledgerPath(0))
}

// A ledger made earlier with another cap keeps it (the agent creates the
// ledger before the container starts); every view of the vGPU must then
// agree on that one cap.
func TestStaleLedgerCapConsistent(t *testing.T) {
	t.Parallel()
	m := newMachine(t)
	m.ok("alloc", "1M") // creates the ledger with 1024 MiB
	r := m.with("GPU_CONTAINER_MEM", "2048").ok("meminfo")
	kv := r.kv()
	assert.Equal(t, kv["cuda.total"], kv["device.0.total"], "%s", r)
	assert.Equal(t, kv["cuda.total"], kv["nvml.0.total"], "%s", r)
}
