package gpu

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ApplicationXIDs are the XIDs an application's own faults raise (NVIDIA's
// k8s-device-plugin ignores the same ones): the card itself is fine.
//
//	13 graphics engine exception, 31 GPU memory page fault, 43 GPU stopped
//	processing, 45 preemptive cleanup, 68 video processor exception,
//	109 context switch timeout
var ApplicationXIDs = []uint64{13, 31, 43, 45, 68, 109}

// eventWaitMs is how long the event goroutine blocks in NVML at a time:
// it bounds how long Close waits for it.
const eventWaitMs = 500

// ProcessMemory is one process's device memory on a card, as the driver
// itself counts it (NVML's running compute processes): all its contexts
// took, whatever an interposer saw.
type ProcessMemory struct {
	PID   uint32 // as NVML reports it: the agent's (the host's) pid namespace
	Bytes uint64
}

// CardSample is one card's figures from NVML. A nil field is one NVML
// could not give; Problems says why.
type CardSample struct {
	Index           int
	MemoryUsedBytes *uint64  // all processes on the card
	UtilPercent     *float64 // NVML's utilization over its last period
	// Processes are the card's compute processes and their memory;
	// nil when NVML could not list them (an empty list is known).
	Processes []ProcessMemory
	// Healthy is false once a critical XID was reported for the card
	// (sticky until the agent restarts, as NVIDIA's device plugin does),
	// nil when its events could not be watched.
	Healthy  *bool
	Problems []string
}

// Monitor samples the cards' memory and utilization through NVML and
// watches their XID critical-error events in a goroutine. NVML stays
// initialised until Close.
type Monitor struct {
	lib nvml.Interface
	log *slog.Logger

	mu      sync.Mutex
	cards   []monCard
	byUUID  map[string]int // UUID -> position in cards
	set     nvml.EventSet  // nil: no events watched
	stop    chan struct{}
	done    chan struct{}
	closed  bool
	lastErr string // the event goroutine's last failure, logged once
}

type monCard struct {
	index    int
	dev      nvml.Device
	uuid     string
	watched  bool   // registered for XID events
	why      string // why not watched, or why unhealthy
	xid      uint64 // the critical XID that marked it unhealthy; 0 none
	badEvent bool   // marked unhealthy by an event-set failure
}

// OpenMonitor loads NVML from library (path or soname; "" for
// DefaultNVMLLibrary) and starts a Monitor of the cards of the given
// indices.
func OpenMonitor(library string, indices []int, log *slog.Logger) (*Monitor, error) {
	if library == "" {
		library = DefaultNVMLLibrary
	}
	return StartMonitor(nvml.New(nvml.WithLibraryPath(library)), library, indices, log)
}

// StartMonitor initialises NVML (lib: the library, or go-nvml's mock;
// libName names it in errors) and watches the cards of the given
// indices. It fails only when NVML cannot be initialised at all; a card
// NVML does not know, or whose events cannot be watched, has the missing
// figures and a problem in its samples.
func StartMonitor(lib nvml.Interface, libName string, indices []int, log *slog.Logger) (*Monitor, error) {
	if log == nil {
		log = slog.Default()
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, NewNVMLFrom(lib, libName).initError(ret)
	}
	m := &Monitor{lib: lib, log: log, byUUID: map[string]int{},
		stop: make(chan struct{}), done: make(chan struct{})}
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		log.Warn("NVML: no event set: card health is unknown", "error", ret)
		set = nil
	}
	m.set = set
	for _, idx := range indices {
		c := monCard{index: idx}
		dev, ret := lib.DeviceGetHandleByIndex(idx)
		if ret != nvml.SUCCESS {
			c.why = fmt.Sprintf("NVML: card %d: getting its handle: %v", idx, ret)
			m.cards = append(m.cards, c)
			continue
		}
		c.dev = dev
		if c.uuid, ret = dev.GetUUID(); ret != nvml.SUCCESS {
			c.why = fmt.Sprintf("NVML: card %d: reading its UUID: %v", idx, ret)
		} else {
			m.byUUID[c.uuid] = len(m.cards)
			c.watched, c.why = m.watch(dev, idx)
		}
		m.cards = append(m.cards, c)
	}
	if m.set != nil {
		go m.events()
	} else {
		close(m.done)
	}
	return m, nil
}

// watch registers dev for XID events; false and why when it cannot.
func (m *Monitor) watch(dev nvml.Device, idx int) (bool, string) {
	if m.set == nil {
		return false, fmt.Sprintf("NVML: card %d: no event set, health unknown", idx)
	}
	supported, ret := dev.GetSupportedEventTypes()
	if ret != nvml.SUCCESS {
		return false, fmt.Sprintf("NVML: card %d: its event types: %v; health unknown", idx, ret)
	}
	if supported&nvml.EventTypeXidCriticalError == 0 {
		return false, fmt.Sprintf("NVML: card %d reports no XID events; health unknown", idx)
	}
	if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, m.set); ret != nvml.SUCCESS {
		return false, fmt.Sprintf("NVML: card %d: registering for XID events: %v; health unknown", idx, ret)
	}
	return true, ""
}

// events waits for XID events until Close.
func (m *Monitor) events() {
	defer close(m.done)
	for {
		select {
		case <-m.stop:
			return
		default:
		}
		ev, ret := m.set.Wait(eventWaitMs)
		switch {
		case ret == nvml.ERROR_TIMEOUT:
			continue
		case ret != nvml.SUCCESS:
			// As NVIDIA's device plugin: a failing event set leaves no
			// card known to be healthy.
			m.markAll(fmt.Sprintf("NVML: waiting for events: %v", ret))
			select {
			case <-m.stop:
				return
			case <-time.After(time.Second):
			}
			continue
		}
		m.handle(ev)
	}
}

func (m *Monitor) handle(ev nvml.EventData) {
	if ev.EventType != nvml.EventTypeXidCriticalError || slices.Contains(ApplicationXIDs, ev.EventData) {
		m.log.Info("NVML: ignoring an event (an application's fault, the card is fine)",
			"type", ev.EventType, "xid", ev.EventData)
		return
	}
	uuid, ret := ev.Device.GetUUID()
	m.mu.Lock()
	defer m.mu.Unlock()
	if ret != nvml.SUCCESS {
		m.log.Error("NVML: an XID on a card that cannot be named: marking every card unhealthy",
			"xid", ev.EventData, "error", ret)
		for i := range m.cards {
			m.unhealthy(i, ev.EventData)
		}
		return
	}
	i, ok := m.byUUID[uuid]
	if !ok {
		m.log.Info("NVML: an XID on a card the agent does not manage", "uuid", uuid, "xid", ev.EventData)
		return
	}
	m.log.Error("NVML: critical XID: the card is unhealthy", "card", m.cards[i].index,
		"uuid", uuid, "xid", ev.EventData)
	m.unhealthy(i, ev.EventData)
}

// unhealthy marks card i; m.mu held.
func (m *Monitor) unhealthy(i int, xid uint64) {
	c := &m.cards[i]
	if c.xid == 0 {
		c.xid = xid
		c.why = fmt.Sprintf("NVML: card %d reported critical XID %d", c.index, xid)
	}
}

func (m *Monitor) markAll(why string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if why != m.lastErr {
		m.log.Error(why + ": every card is marked unhealthy")
		m.lastErr = why
	}
	for i := range m.cards {
		if m.cards[i].xid == 0 && !m.cards[i].badEvent {
			m.cards[i].badEvent = true
			m.cards[i].why = why
		}
	}
}

// Sample reads every card's memory use and utilization now, with its
// health as the events left it.
func (m *Monitor) Sample() []CardSample {
	m.mu.Lock()
	cards := slices.Clone(m.cards)
	closed := m.closed
	m.mu.Unlock()
	out := make([]CardSample, len(cards))
	for i, c := range cards {
		s := CardSample{Index: c.index}
		if c.watched {
			ok := c.xid == 0 && !c.badEvent
			s.Healthy = &ok
		}
		if c.why != "" {
			s.Problems = append(s.Problems, c.why)
		}
		if c.dev != nil && !closed {
			if mem, ret := c.dev.GetMemoryInfo(); ret == nvml.SUCCESS {
				s.MemoryUsedBytes = &mem.Used
			} else {
				s.Problems = append(s.Problems, fmt.Sprintf("NVML: card %d: memory info: %v", c.index, ret))
			}
			if u, ret := c.dev.GetUtilizationRates(); ret == nvml.SUCCESS {
				pct := float64(u.Gpu)
				s.UtilPercent = &pct
			} else {
				s.Problems = append(s.Problems, fmt.Sprintf("NVML: card %d: utilization: %v", c.index, ret))
			}
			s.Processes, s.Problems = processes(c, s.Problems)
		}
		out[i] = s
	}
	return out
}

// processes lists a card's compute processes, or nil with a problem. A
// process whose memory NVML does not know (NVML_VALUE_NOT_AVAILABLE)
// leaves the whole list unknown: a partial sum would understate.
func processes(c monCard, problems []string) ([]ProcessMemory, []string) {
	ps, ret := c.dev.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return nil, append(problems, fmt.Sprintf("NVML: card %d: running processes: %v", c.index, ret))
	}
	out := make([]ProcessMemory, 0, len(ps))
	for _, p := range ps {
		if p.UsedGpuMemory == nvmlValueNotAvailable {
			return nil, append(problems, fmt.Sprintf("NVML: card %d: the memory of process %d is not available", c.index, p.Pid))
		}
		out = append(out, ProcessMemory{PID: p.Pid, Bytes: p.UsedGpuMemory})
	}
	return out, problems
}

// nvmlValueNotAvailable is NVML_VALUE_NOT_AVAILABLE as a 64-bit value.
const nvmlValueNotAvailable = ^uint64(0)

// Close stops watching events and shuts NVML down.
func (m *Monitor) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	close(m.stop)
	<-m.done
	var errs []error
	if m.set != nil {
		if ret := m.set.Free(); ret != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("NVML: freeing the event set: %w", ret))
		}
	}
	if ret := m.lib.Shutdown(); ret != nvml.SUCCESS {
		errs = append(errs, fmt.Errorf("NVML: shutdown: %w", ret))
	}
	return errors.Join(errs...)
}
