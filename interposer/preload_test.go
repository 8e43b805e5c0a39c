package interposer_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A second preloaded library that wraps malloc and puts with
// dlsym(RTLD_NEXT, ...), as UCX's memory hooks and profilers do
// (tests/lib/gswrap.c), gets the next definition after itself, libc's,
// whether it is preloaded after the shim or before it and whether the
// shim is enabled or not; in the same process the shim's hooks still hold
// an allocation to the cap (tests/wrap.c). Answered as if asked from the
// shim, the wrapper after the shim would get its own malloc back (it says
// so and aborts rather than recurse).
func TestPreloadedWrapper(t *testing.T) {
	t.Parallel()
	wrap := filepath.Join(libDir, "libgswrap.so")
	for _, tc := range []struct {
		name, preload string
		enabled       bool
	}{
		{"after-shim/enabled", shim + ":" + wrap, true},
		{"after-shim/disabled", shim + ":" + wrap, false},
		{"before-shim/enabled", wrap + ":" + shim, true},
		{"before-shim/disabled", wrap + ":" + shim, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newMachine(t, "LD_PRELOAD", tc.preload)
			if !tc.enabled {
				m.set("GPU_CONTAINER_MEM", "", "GPU_IDX", "")
			}
			r := m.ok("wrap", "2048M")
			kv := r.kv()
			assert.GreaterOrEqual(t, r.num(t, "wrap.malloc"), uint64(1), "%s", r)
			assert.Equal(t, uint64(1), r.num(t, "wrap.puts"), "%s", r)
			assert.Contains(t, r.stdout, "wrap: puts reached libc\n")
			for _, fn := range []string{"next.malloc", "next.puts"} {
				assert.True(t, strings.HasPrefix(filepath.Base(kv[fn]), "libc.so"),
					"%s=%s, want libc's", fn, kv[fn])
			}
			if tc.enabled {
				assert.Equal(t, "2", kv["alloc.rc"], "over the cap: CUDA_ERROR_OUT_OF_MEMORY\n%s", r)
				assert.NotEmpty(t, r.lines("cuMemAlloc", "refused"), "%s", r)
			} else {
				assert.Equal(t, "0", kv["alloc.rc"], "no cap: the driver's answer\n%s", r)
			}
		})
	}
}

// dlsym(RTLD_DEFAULT, ...) searches the scope of the object that asked:
// from a library loaded with RTLD_LOCAL, that library's own names are
// found (tests/wrap.c, scope), with the shim enabled or disabled as
// without it. Asked from the shim instead, the same lookup searches the
// global scope and finds nothing.
func TestDefaultScope(t *testing.T) {
	t.Parallel()
	wrap := filepath.Join(libDir, "libgswrap.so")
	m := newMachine(t)
	for name, mm := range map[string]*machine{
		"enabled":  m,
		"disabled": m.with("GPU_CONTAINER_MEM", "", "GPU_IDX", ""),
		"no-shim":  m.unshimmed(),
	} {
		r := mm.ok("scope", wrap)
		assert.Equal(t, "1", r.kv()["default.found"], "%s:\n%s", name, r)
	}
}

// The WSL2 driver's layout (tests/lib/wslstub.c): the libcuda.so.1 that
// applications load is a stub that dlopen()s the driver proper under
// another name and forwards each call to it, through dlsym on that handle.
// The shim lets those lookups of the driver's own through, so the stub
// reaches the driver while the application still gets the shim's
// wrappers: the cap holds, through dlopen + dlsym (gstest) and through
// linking (gsdirect). Given the shim's wrapper, the stub would call back
// into the shim, which deadlocks on its own lock.
func TestForwardingDriver(t *testing.T) {
	t.Parallel()
	m := newMachine(t, "LD_LIBRARY_PATH", filepath.Join(libDir, "wsl")+":"+libDir)
	r := m.run("alloc", "2048M")
	assert.Equal(t, 2, r.code, "over the cap: refused\n%s", r)
	assert.NotEmpty(t, r.lines("wslstub: forwarding to", "driver/libcuda.so.1.1"), "%s", r)
	assert.NotEmpty(t, r.lines("cuMemAlloc", "refused"), "%s", r)
	assert.Equal(t, 1024*mib, r.num(t, "total"))
	m.ok("alloc", "768M")

	r = m.run(direct, "2147483648")
	assert.Equal(t, 2, r.code, "gsdirect over the cap: refused\n%s", r)
	assert.Equal(t, 1024*mib, r.num(t, "device.total"))

	off := m.with("GPU_CONTAINER_MEM", "", "GPU_IDX", "")
	r = off.ok("alloc", "2048M")
	assert.Equal(t, 8192*mib, r.num(t, "total"))
	assert.NotEmpty(t, r.lines("wslstub: forwarding to"), "%s", r)
}
