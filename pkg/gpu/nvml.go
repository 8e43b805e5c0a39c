package gpu

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// DefaultNVMLLibrary is the library NVML loads unless told otherwise.
const DefaultNVMLLibrary = "libnvidia-ml.so.1"

// NVML is a Discoverer that asks the NVIDIA driver through NVML. Each call
// of Cards initialises NVML, reads every device and shuts NVML down again,
// so an NVML value holds nothing between calls and may be kept for the
// agent's lifetime. Errors wrap the nvml.Return of the failed call.
type NVML struct {
	lib     nvml.Interface
	libName string
}

var _ Discoverer = (*NVML)(nil)

// NewNVML returns a discoverer of the real driver's cards. library is the
// path or soname of libnvidia-ml ("" for DefaultNVMLLibrary). Nothing is
// loaded until Cards is called.
func NewNVML(library string) *NVML {
	if library == "" {
		library = DefaultNVMLLibrary
	}
	return &NVML{lib: nvml.New(nvml.WithLibraryPath(library)), libName: library}
}

// NewNVMLFrom returns a discoverer over lib, an nvml.Interface such as
// go-nvml's mock.Interface. libName only names the library in errors.
func NewNVMLFrom(lib nvml.Interface, libName string) *NVML {
	if libName == "" {
		libName = DefaultNVMLLibrary
	}
	return &NVML{lib: lib, libName: libName}
}

// Cards initialises NVML, lists its devices and shuts NVML down.
func (n *NVML) Cards() (cards []Card, err error) {
	if ret := n.lib.Init(); ret != nvml.SUCCESS {
		return nil, n.initError(ret)
	}
	defer func() {
		if ret := n.lib.Shutdown(); ret != nvml.SUCCESS {
			cards = nil
			err = errors.Join(err, fmt.Errorf("NVML: shutdown: %w", ret))
		}
	}()

	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: counting the devices: %w", ret)
	}
	if count > MaxCards {
		return nil, fmt.Errorf("NVML: the driver reports %d devices; gpuslice handles at most %d cards per node (indices 0-%d)",
			count, MaxCards, MaxCards-1)
	}
	// The version only describes the cards (the DRA driver publishes it):
	// a driver that cannot say leaves it empty rather than failing.
	version, ret := n.lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		version = ""
	}
	cards = make([]Card, 0, count)
	for i := 0; i < count; i++ {
		c, err := n.card(i)
		if err != nil {
			return nil, err
		}
		c.DriverVersion = version
		cards = append(cards, c)
	}
	if err := Validate(cards); err != nil {
		return nil, fmt.Errorf("NVML: the driver's devices: %w", err)
	}
	return cards, nil
}

// card reads device i.
func (n *NVML) card(i int) (Card, error) {
	fail := func(what string, ret nvml.Return) (Card, error) {
		return Card{}, fmt.Errorf("NVML: device %d: %s: %w", i, what, ret)
	}
	dev, ret := n.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return fail("getting its handle", ret)
	}
	c := Card{Index: i}
	if c.UUID, ret = dev.GetUUID(); ret != nvml.SUCCESS {
		return fail("reading its UUID", ret)
	}
	if c.Name, ret = dev.GetName(); ret != nvml.SUCCESS {
		return fail("reading its name", ret)
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return fail("reading its memory size", ret)
	}
	c.MemoryBytes = mem.Total
	if c.Minor, ret = dev.GetMinorNumber(); ret != nvml.SUCCESS {
		return fail("reading its minor number", ret)
	}
	return c, nil
}

// initError explains a failed nvml.Init and what to do about it.
func (n *NVML) initError(ret nvml.Return) error {
	var hint string
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		hint = n.libName + " not found: is the NVIDIA driver installed? (or configure simulated cards)"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		hint = "the NVIDIA kernel driver is not loaded: load it (modprobe nvidia) or configure simulated cards"
	case nvml.ERROR_NO_PERMISSION:
		hint = "no permission to open the GPUs: run the agent as root"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		hint = "the driver library and kernel module versions differ: reload the nvidia module or reboot"
	default:
		hint = "initialisation failed"
	}
	return fmt.Errorf("NVML: %s: %w", hint, ret)
}
