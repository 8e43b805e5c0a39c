package gpu

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// eventLib is a mock NVML of monitored devices whose event set delivers
// what the test sends on events.
type eventLib struct {
	*fakeLib
	events  chan nvml.EventData
	waitRet nvml.Return
	freed   bool
}

func monDevice(i int, used uint64, util uint32) *mock.Device {
	d := fakeDevice(i)
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		return nvml.Memory{Total: 16 << 30, Used: used}, nvml.SUCCESS
	}
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		return nvml.Utilization{Gpu: util}, nvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: uint32(100 + i), UsedGpuMemory: used}}, nvml.SUCCESS
	}
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		return nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
	}
	d.RegisterEventsFunc = func(types uint64, _ nvml.EventSet) nvml.Return {
		if types != nvml.EventTypeXidCriticalError {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		return nvml.SUCCESS
	}
	return d
}

func newEventLib(devs ...*mock.Device) *eventLib {
	l := &eventLib{fakeLib: newFakeLib(devs...), events: make(chan nvml.EventData, 8), waitRet: nvml.SUCCESS}
	set := &mock.EventSet{
		WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
			select {
			case ev := <-l.events:
				return ev, nvml.SUCCESS
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
		},
		FreeFunc: func() nvml.Return { l.freed = true; return nvml.SUCCESS },
	}
	l.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	return l
}

func healthOf(t *testing.T, m *Monitor) []*bool {
	t.Helper()
	var out []*bool
	for _, s := range m.Sample() {
		out = append(out, s.Healthy)
	}
	return out
}

// waitHealth polls until card i's health is want (events are handled by
// the monitor's goroutine).
func waitHealth(t *testing.T, m *Monitor, i int, want bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		h := healthOf(t, m)[i]
		if h != nil && *h == want {
			return
		}
		require.True(t, time.Now().Before(deadline), "card %d never became healthy=%v", i, want)
		time.Sleep(5 * time.Millisecond)
	}
}

func TestMonitorSample(t *testing.T) {
	lib := newEventLib(monDevice(0, 1<<30, 40), monDevice(1, 2<<30, 0))
	m, err := StartMonitor(lib, "", []int{0, 1}, quiet)
	require.NoError(t, err)
	s := m.Sample()
	require.Len(t, s, 2)
	assert.Equal(t, 0, s[0].Index)
	assert.Equal(t, uint64(1<<30), *s[0].MemoryUsedBytes)
	assert.Equal(t, 40.0, *s[0].UtilPercent)
	assert.True(t, *s[0].Healthy)
	assert.Empty(t, s[0].Problems)
	assert.Equal(t, []ProcessMemory{{PID: 100, Bytes: 1 << 30}}, s[0].Processes)
	assert.Equal(t, uint64(2<<30), *s[1].MemoryUsedBytes)
	assert.Equal(t, 0.0, *s[1].UtilPercent, "a real zero is a zero")
	assert.Equal(t, []ProcessMemory{{PID: 101, Bytes: 2 << 30}}, s[1].Processes)
	require.NoError(t, m.Close())
	assert.True(t, lib.freed)
	assert.Equal(t, 1, lib.shutdowns)
	require.NoError(t, m.Close(), "closing twice is harmless")
}

// Application XIDs and other event types leave the card healthy; a
// critical XID marks only its own card, for good.
func TestMonitorXID(t *testing.T) {
	lib := newEventLib(monDevice(0, 0, 0), monDevice(1, 0, 0))
	m, err := StartMonitor(lib, "", []int{0, 1}, quiet)
	require.NoError(t, err)
	defer m.Close()
	d1 := lib.fakeLib.DeviceGetHandleByIndexFunc
	dev1, _ := d1(1)
	for _, xid := range ApplicationXIDs {
		lib.events <- nvml.EventData{Device: dev1, EventType: nvml.EventTypeXidCriticalError, EventData: xid}
	}
	lib.events <- nvml.EventData{Device: dev1, EventType: nvml.EventTypeSingleBitEccError, EventData: 0}
	lib.events <- nvml.EventData{Device: dev1, EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	waitHealth(t, m, 1, false)
	// Events are handled in order: had an application XID marked the
	// card, it would be the reason.
	assert.Contains(t, m.Sample()[1].Problems, "NVML: card 1 reported critical XID 79")
	assert.True(t, *healthOf(t, m)[0], "the other card is untouched")
	lib.events <- nvml.EventData{Device: dev1, EventType: nvml.EventTypeXidCriticalError, EventData: 48}
	time.Sleep(50 * time.Millisecond)
	assert.Contains(t, m.Sample()[1].Problems, "NVML: card 1 reported critical XID 79", "the first XID stays the reason")
}

func TestMonitorDegraded(t *testing.T) {
	t.Run("no events supported", func(t *testing.T) {
		d := monDevice(0, 0, 0)
		d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return 0, nvml.SUCCESS }
		m, err := StartMonitor(newEventLib(d), "", []int{0}, quiet)
		require.NoError(t, err)
		defer m.Close()
		s := m.Sample()[0]
		assert.Nil(t, s.Healthy, "unknown, not healthy")
		assert.NotNil(t, s.MemoryUsedBytes)
		assert.Contains(t, s.Problems, "NVML: card 0 reports no XID events; health unknown")
	})
	t.Run("figures fail", func(t *testing.T) {
		d := monDevice(0, 0, 0)
		d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED }
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NO_PERMISSION }
		m, err := StartMonitor(newEventLib(d), "", []int{0}, quiet)
		require.NoError(t, err)
		defer m.Close()
		s := m.Sample()[0]
		assert.Nil(t, s.MemoryUsedBytes)
		assert.Nil(t, s.UtilPercent)
		assert.Nil(t, s.Processes)
		assert.Equal(t, []string{"NVML: card 0: memory info: ERROR_GPU_IS_LOST",
			"NVML: card 0: utilization: ERROR_NOT_SUPPORTED",
			"NVML: card 0: running processes: ERROR_NO_PERMISSION"}, s.Problems)
	})
	t.Run("a process's memory not available", func(t *testing.T) {
		d := monDevice(0, 0, 0)
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: 7, UsedGpuMemory: 1 << 20}, {Pid: 8, UsedGpuMemory: ^uint64(0)}}, nvml.SUCCESS
		}
		m, err := StartMonitor(newEventLib(d), "", []int{0}, quiet)
		require.NoError(t, err)
		defer m.Close()
		s := m.Sample()[0]
		assert.Nil(t, s.Processes, "a partial list would understate")
		assert.Equal(t, []string{"NVML: card 0: the memory of process 8 is not available"}, s.Problems)
	})
	t.Run("no process", func(t *testing.T) {
		d := monDevice(0, 0, 0)
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
		m, err := StartMonitor(newEventLib(d), "", []int{0}, quiet)
		require.NoError(t, err)
		defer m.Close()
		s := m.Sample()[0]
		assert.NotNil(t, s.Processes, "known: none")
		assert.Empty(t, s.Processes)
	})
	t.Run("unknown card", func(t *testing.T) {
		m, err := StartMonitor(newEventLib(monDevice(0, 0, 0)), "", []int{0, 3}, quiet)
		require.NoError(t, err)
		defer m.Close()
		s := m.Sample()[1]
		assert.Equal(t, 3, s.Index)
		assert.Nil(t, s.Healthy)
		assert.Nil(t, s.MemoryUsedBytes)
		assert.Equal(t, []string{"NVML: card 3: getting its handle: ERROR_INVALID_ARGUMENT"}, s.Problems)
	})
	t.Run("event set fails", func(t *testing.T) {
		lib := newEventLib(monDevice(0, 0, 0), monDevice(1, 0, 0))
		set, _ := lib.EventSetCreateFunc()
		set.(*mock.EventSet).WaitFunc = func(uint32) (nvml.EventData, nvml.Return) {
			return nvml.EventData{}, nvml.ERROR_UNKNOWN
		}
		m, err := StartMonitor(lib, "", []int{0, 1}, quiet)
		require.NoError(t, err)
		defer m.Close()
		waitHealth(t, m, 0, false)
		waitHealth(t, m, 1, false)
		assert.Contains(t, m.Sample()[0].Problems, "NVML: waiting for events: ERROR_UNKNOWN")
	})
	t.Run("no library", func(t *testing.T) {
		_, err := OpenMonitor("/nonexistent/libnvidia-ml.so.1", []int{0}, quiet)
		require.ErrorContains(t, err, "NVML: /nonexistent/libnvidia-ml.so.1 not found")
	})
}
