package gpu

import (
	"errors"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeDevice is a healthy mock device: card i of 16 GiB, minor 10+i.
func fakeDevice(i int) *mock.Device {
	return &mock.Device{
		GetUUIDFunc:        func() (string, nvml.Return) { return "GPU-fake-" + string(rune('0'+i)), nvml.SUCCESS },
		GetNameFunc:        func() (string, nvml.Return) { return "Fake GPU", nvml.SUCCESS },
		GetMemoryInfoFunc:  func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 16 << 30, Free: 1}, nvml.SUCCESS },
		GetMinorNumberFunc: func() (int, nvml.Return) { return 10 + i, nvml.SUCCESS },
	}
}

func fakeCard(i int) Card {
	return Card{Index: i, UUID: "GPU-fake-" + string(rune('0'+i)), Name: "Fake GPU", MemoryBytes: 16 << 30, Minor: 10 + i,
		DriverVersion: "580.65.06"}
}

// fakeLib is a mock NVML of devs that counts Init and Shutdown calls.
type fakeLib struct {
	*mock.Interface
	inits, shutdowns int
}

func newFakeLib(devs ...*mock.Device) *fakeLib {
	f := &fakeLib{}
	f.Interface = &mock.Interface{
		InitFunc:                   func() nvml.Return { f.inits++; return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { f.shutdowns++; return nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "580.65.06", nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
	}
	return f
}

func TestNVMLCards(t *testing.T) {
	lib := newFakeLib(fakeDevice(0), fakeDevice(1))
	cards, err := NewNVMLFrom(lib, "").Cards()
	require.NoError(t, err)
	assert.Equal(t, []Card{fakeCard(0), fakeCard(1)}, cards)
	assert.Equal(t, 1, lib.inits)
	assert.Equal(t, 1, lib.shutdowns, "NVML is shut down after discovery")
}

func TestNVMLNoDevices(t *testing.T) {
	cards, err := NewNVMLFrom(newFakeLib(), "").Cards()
	require.NoError(t, err)
	assert.Empty(t, cards)
}

func TestNVMLInitFailure(t *testing.T) {
	for _, tc := range []struct {
		ret  nvml.Return
		want string
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND,
			"NVML: libnvidia-ml.so.1 not found: is the NVIDIA driver installed? (or configure simulated cards)"},
		{nvml.ERROR_DRIVER_NOT_LOADED, "NVML: the NVIDIA kernel driver is not loaded: load it (modprobe nvidia)"},
		{nvml.ERROR_NO_PERMISSION, "NVML: no permission to open the GPUs: run the agent as root"},
		{nvml.ERROR_LIB_RM_VERSION_MISMATCH, "NVML: the driver library and kernel module versions differ"},
		{nvml.ERROR_UNKNOWN, "NVML: initialisation failed: ERROR_UNKNOWN"},
	} {
		t.Run(tc.ret.String(), func(t *testing.T) {
			lib := newFakeLib(fakeDevice(0))
			lib.InitFunc = func() nvml.Return { return tc.ret }
			cards, err := NewNVMLFrom(lib, "").Cards()
			assert.Nil(t, cards)
			require.ErrorContains(t, err, tc.want)
			var ret nvml.Return
			require.True(t, errors.As(err, &ret), "the error wraps the nvml.Return")
			assert.Equal(t, tc.ret, ret)
			assert.Equal(t, 0, lib.shutdowns, "no Shutdown without a successful Init")
		})
	}
}

func TestNVMLLibraryNameInError(t *testing.T) {
	lib := newFakeLib()
	lib.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	_, err := NewNVMLFrom(lib, "/opt/nv/libnvidia-ml.so.1").Cards()
	require.ErrorContains(t, err, "NVML: /opt/nv/libnvidia-ml.so.1 not found")
}

// The real library, absent here, fails the same way: nothing is loaded
// before Cards, and its absence is an error, not a crash.
func TestNVMLMissingLibrary(t *testing.T) {
	n := NewNVML("/nonexistent/libnvidia-ml.so.1")
	_, err := n.Cards()
	require.ErrorContains(t, err, "NVML: /nonexistent/libnvidia-ml.so.1 not found: is the NVIDIA driver installed?")
}

func TestNVMLDeviceFailure(t *testing.T) {
	lost := nvml.ERROR_GPU_IS_LOST
	for _, tc := range []struct {
		name    string
		breakIt func(lib *fakeLib, d *mock.Device)
		want    string
	}{
		{"count", func(lib *fakeLib, _ *mock.Device) {
			lib.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, lost }
		}, "NVML: counting the devices: ERROR_GPU_IS_LOST"},
		{"handle", func(lib *fakeLib, _ *mock.Device) {
			lib.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
				if i == 1 {
					return nil, lost
				}
				return fakeDevice(i), nvml.SUCCESS
			}
		}, "NVML: device 1: getting its handle: ERROR_GPU_IS_LOST"},
		{"uuid", func(_ *fakeLib, d *mock.Device) {
			d.GetUUIDFunc = func() (string, nvml.Return) { return "", lost }
		}, "NVML: device 1: reading its UUID: ERROR_GPU_IS_LOST"},
		{"name", func(_ *fakeLib, d *mock.Device) {
			d.GetNameFunc = func() (string, nvml.Return) { return "", lost }
		}, "NVML: device 1: reading its name: ERROR_GPU_IS_LOST"},
		{"memory", func(_ *fakeLib, d *mock.Device) {
			d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, lost }
		}, "NVML: device 1: reading its memory size: ERROR_GPU_IS_LOST"},
		{"minor", func(_ *fakeLib, d *mock.Device) {
			d.GetMinorNumberFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		}, "NVML: device 1: reading its minor number: ERROR_NOT_SUPPORTED"},
		{"duplicate minor", func(_ *fakeLib, d *mock.Device) {
			d.GetMinorNumberFunc = func() (int, nvml.Return) { return 10, nvml.SUCCESS }
		}, "NVML: the driver's devices: card 1 (entry 1): minor 10 is also entry 0's: two cards cannot share /dev/nvidia10"},
		{"no memory", func(_ *fakeLib, d *mock.Device) {
			d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.SUCCESS }
		}, "NVML: the driver's devices: card 1 (entry 1): memory is 0: give the card's memory size (> 0)"},
		{"too many devices", func(lib *fakeLib, _ *mock.Device) {
			lib.DeviceGetCountFunc = func() (int, nvml.Return) { return 33, nvml.SUCCESS }
		}, "NVML: the driver reports 33 devices; gpuslice handles at most 32 cards per node (indices 0-31)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := fakeDevice(1)
			lib := newFakeLib(fakeDevice(0), bad, fakeDevice(2))
			tc.breakIt(lib, bad)
			cards, err := NewNVMLFrom(lib, "").Cards()
			assert.Nil(t, cards, "no partial list")
			require.EqualError(t, err, tc.want)
			assert.Equal(t, 1, lib.shutdowns, "NVML is shut down after a failure too")
		})
	}
}

func TestNVMLShutdownFailure(t *testing.T) {
	lib := newFakeLib(fakeDevice(0))
	lib.ShutdownFunc = func() nvml.Return { return nvml.ERROR_UNKNOWN }
	cards, err := NewNVMLFrom(lib, "").Cards()
	assert.Nil(t, cards)
	require.EqualError(t, err, "NVML: shutdown: ERROR_UNKNOWN")
}

// A driver that cannot tell its version still lists its cards.
func TestNVMLNoDriverVersion(t *testing.T) {
	lib := newFakeLib(fakeDevice(0))
	lib.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "", nvml.ERROR_NOT_SUPPORTED }
	cards, err := NewNVMLFrom(lib, "").Cards()
	require.NoError(t, err)
	want := fakeCard(0)
	want.DriverVersion = ""
	assert.Equal(t, []Card{want}, cards)
}
