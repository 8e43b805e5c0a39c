package interposer_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A loaded image's charge holds the cap exactly, through every loader and
// whether the loader came from dlsym or cuGetProcAddress (whose answer may
// be a private entry point, SIMCUDA_PROCADDR=private): gstest module fills
// the vGPU around a 1 MiB PTX image, has one byte more refused, gets the
// image back at the unload and with its context, has a load that does not
// fit refused by the shim, and checks that a library takes device memory
// only when a context first uses it (see tests/module.c).
func TestModuleCharge(t *testing.T) {
	t.Parallel()
	for _, loader := range []string{"data", "dataex", "fatbinary", "file", "library", "libfile"} {
		for _, via := range []string{"dlsym", "procaddr", "private"} {
			t.Run(fmt.Sprintf("%s/%s", loader, via), func(t *testing.T) {
				t.Parallel()
				m := newMachine(t, "GPUSLICE_CONTEXT_MIB", "16", "SIMCUDA_CONTEXT_MIB", "16")
				arg := via
				if via == "private" {
					m.set("SIMCUDA_PROCADDR", "private")
					arg = "procaddr"
				}
				r := m.ok("module", loader, arg)
				assert.Equal(t, (1024-16)*mib, r.num(t, "free"))
				assert.Equal(t, mib, r.num(t, "image"))
				// The refusals came from the shim: the device had room.
				assert.NotEmpty(t, r.lines("gpuslice[", "refused"), "%s", r)
				l := openLedger(t, m.ledgerPath(0))
				used, _ := usage(t, l)
				assert.Zero(t, used, "everything was given back")
			})
		}
	}
}
