// The observer reads cgo-only sources (the ledger and schedule files' C
// layouts, NVML): kmod/guest builds this package static for its qemu guest
// without it.

//go:build cgo

package agent

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuslice/gpuslice/pkg/gpu"
	"github.com/gpuslice/gpuslice/pkg/ledger"
	"github.com/gpuslice/gpuslice/pkg/placement"
	"github.com/gpuslice/gpuslice/pkg/state"
	"github.com/gpuslice/gpuslice/pkg/status"
)

// DefaultObserveWindow is the sampling period when none is given.
const DefaultObserveWindow = time.Second

// CardSampler gives the cards' figures from NVML (*gpu.Monitor).
type CardSampler interface {
	Sample() []gpu.CardSample
}

// SchedReader reads a card's no-module schedule file (the path of
// card<N>.sched) and returns each vGPU's busy time on the card, in ns, by
// its key (GPUSLICE_VGPU: the container id). It must not take the file's
// lock: containers can hold it.
type SchedReader func(path string) (map[string]uint64, error)

// ObserveOptions are the sources of the node's status besides the
// agent's own records.
type ObserveOptions struct {
	Node   string        // the node's name (default: the host name)
	Window time.Duration // sampling period (default DefaultObserveWindow)
	// Cards samples NVML; nil when NVML is unavailable, NVMLProblem
	// saying why (a line in every snapshot's problems).
	Cards       CardSampler
	NVMLProblem string
	// Sched reads the schedule files (no-module mode); nil: compute used
	// is unknown in that mode.
	Sched SchedReader
}

// Observer samples the node's vGPUs every window in a goroutine and keeps
// the latest snapshot for /metrics and the status socket.
type Observer struct {
	a    *Agent
	o    ObserveOptions
	last atomic.Pointer[status.Node]

	mu       sync.Mutex // the sampling state below; one sample at a time
	prev     map[busyKey]busySample
	problems map[string]bool  // the last sample's, to log changes once
	over     map[busyKey]bool // vGPUs whose driver figure passed the cap (reconcile.go)

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

type busyKey struct {
	container string
	card      int
}

type busySample struct {
	busy uint64
	at   time.Time
}

// Observe starts sampling (the first sample is taken before it returns).
func (a *Agent) Observe(o ObserveOptions) *Observer {
	if o.Window <= 0 {
		o.Window = DefaultObserveWindow
	}
	if o.Node == "" {
		o.Node, _ = os.Hostname()
	}
	ob := &Observer{a: a, o: o, prev: map[busyKey]busySample{}, problems: map[string]bool{},
		over: map[busyKey]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	ob.Sample(time.Now())
	go ob.run()
	return ob
}

func (ob *Observer) run() {
	defer close(ob.done)
	t := time.NewTicker(ob.o.Window)
	defer t.Stop()
	for {
		select {
		case <-ob.stop:
			return
		case now := <-t.C:
			ob.Sample(now)
		}
	}
}

// Snapshot is the latest sample (nil before the first). Callers must not
// modify it.
func (ob *Observer) Snapshot() *status.Node { return ob.last.Load() }

// Close stops sampling.
func (ob *Observer) Close() {
	ob.once.Do(func() { close(ob.stop) })
	<-ob.done
}

// Sample reads every source now, stores the snapshot and returns it.
func (ob *Observer) Sample(now time.Time) *status.Node {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	n := &status.Node{Node: ob.o.Node, Enforce: ob.a.opts.Enforce, Time: now.UTC(),
		Problems: []string{}}
	problem := func(format string, args ...any) {
		n.Problems = append(n.Problems, fmt.Sprintf(format, args...))
	}
	byCard := map[int]*status.Card{}
	for _, c := range ob.a.opts.Cards {
		n.Cards = append(n.Cards, status.Card{Index: c.Index, UUID: c.UUID, Model: c.Model,
			Policy: c.Policy, MaxInst: c.MaxInst, MemoryTotalBytes: c.MemoryBytes, VGPUs: []status.VGPU{}})
	}
	slices.SortFunc(n.Cards, func(x, y status.Card) int { return x.Index - y.Index })
	for i := range n.Cards {
		byCard[n.Cards[i].Index] = &n.Cards[i]
	}
	allocs := ob.a.opts.Store.All()
	use := measureDriver(ob.nvml(byCard, problem), allocs)
	var refused map[uint64]uint64
	n.Guard, refused = ob.guard(problem)

	busy := map[int]map[string]uint64{} // file mode: by card, read once
	seen := map[busyKey]bool{}
	for _, al := range allocs {
		for _, v := range al.VGPUs {
			c := byCard[v.Card]
			if c == nil {
				problem("allocation of container %s names card %d, which the agent does not have", al.Container, v.Card)
				continue
			}
			s := status.VGPU{ID: v.KmodID, Namespace: al.Namespace, Pod: al.Pod, Container: al.Name,
				ContainerID: al.Container, Mode: modeName(v.Mode), QuotaPercent: int(v.Cores),
				HighPriority: v.Priority == 1, MemoryCapBytes: v.MemoryBytes}
			if al.Claim != nil {
				s.Claim = al.Claim.Namespace + "/" + al.Claim.Name
			}
			if al.Enforce != EnforceModule {
				s.ID = -1
			}
			k := busyKey{al.Container, v.Card}
			// Busy time is counted by the compute gate only: a vGPU it
			// does not gate has no compute figure, rather than a zero.
			gated := placement.Mode(v.Mode) == placement.Compute && c.Policy != 0
			var b *uint64
			if al.Enforce == EnforceModule {
				b = ob.module(&s, v, problem)
			} else {
				ob.ledger(&s, al, v, problem)
				if gated {
					b = ob.schedBusy(busy, c.Index, al.Container, problem)
				}
			}
			if b != nil && gated {
				seen[k] = true
				s.CoreUsedPercent = ob.rate(k, *b, now)
			}
			ob.reconcile(&s, use, al, v, problem)
			if refused != nil && al.CgroupID != 0 {
				r := refused[al.CgroupID]
				s.GuardRefusals = &r
			}
			c.VGPUs = append(c.VGPUs, s)
		}
	}
	ob.forget(allocs, seen)
	for i := range n.Cards {
		slices.SortFunc(n.Cards[i].VGPUs, func(x, y status.VGPU) int {
			return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Pod, y.Pod),
				cmp.Compare(x.Container, y.Container), cmp.Compare(x.ContainerID, y.ContainerID),
				cmp.Compare(x.ID, y.ID))
		})
	}
	ob.logProblems(n.Problems)
	ob.last.Store(n)
	return n
}

// guard is the guard's status and its refusals by cgroup (nil while it
// does not run, or when it could not be read).
func (ob *Observer) guard(problem func(string, ...any)) (*status.Guard, map[uint64]uint64) {
	if ob.a.opts.GuardStatus == nil {
		return nil, nil
	}
	s := *ob.a.opts.GuardStatus
	g := ob.a.opts.Guard
	if g == nil {
		return &s, nil
	}
	st, err := g.Stats()
	if err != nil {
		problem("the eBPF guard's counters: %v", err)
	} else {
		s.LostEvents, s.BadMagic, s.FilesFull = &st.LostEvents, &st.BadMagic, &st.FilesFull
	}
	refused, err := g.Refusals()
	if err != nil {
		problem("the eBPF guard's refusals: %v", err)
		return &s, nil
	}
	return &s, refused
}

// nvml fills the cards' NVML figures and returns each card's processes
// (the cards whose list NVML gave).
func (ob *Observer) nvml(byCard map[int]*status.Card, problem func(string, ...any)) map[int][]gpu.ProcessMemory {
	procs := map[int][]gpu.ProcessMemory{}
	if ob.o.Cards == nil {
		if ob.o.NVMLProblem != "" {
			problem("%s", ob.o.NVMLProblem)
		}
		return procs
	}
	for _, s := range ob.o.Cards.Sample() {
		c := byCard[s.Index]
		if c == nil {
			continue
		}
		c.MemoryUsedBytes, c.UtilPercent, c.Healthy = s.MemoryUsedBytes, s.UtilPercent, s.Healthy
		if s.Processes != nil {
			procs[s.Index] = s.Processes
		}
		for _, p := range s.Problems {
			problem("%s", p)
		}
	}
	return procs
}

// forget drops the sampling state of vGPUs gone: the busy counters of
// those not sampled now, the cap warnings of those no allocation holds.
func (ob *Observer) forget(allocs []state.Allocation, seen map[busyKey]bool) {
	for k := range ob.prev {
		if !seen[k] {
			delete(ob.prev, k)
		}
	}
	held := map[busyKey]bool{}
	for _, al := range allocs {
		for _, v := range al.VGPUs {
			held[busyKey{al.Container, v.Card}] = true
		}
	}
	for k := range ob.over {
		if !held[k] {
			delete(ob.over, k)
		}
	}
}

// module fills a module-mode vGPU's figures from gpuslice.ko's statistics
// and returns its busy time (nil: unknown).
func (ob *Observer) module(s *status.VGPU, v state.VGPU, problem func(string, ...any)) *uint64 {
	if v.KmodID < 0 {
		return nil // not bound yet: the container has not started
	}
	st, err := ob.a.opts.Kmod.Stats(uint32(v.Card), uint32(v.KmodID))
	if err != nil {
		problem("gpuslice.ko: statistics of vGPU %d on card %d: %v", v.KmodID, v.Card, err)
		return nil
	}
	used, procs, busy := st.MemUsed, int(st.NProcs), st.BusyNs
	s.MemoryUsedBytes, s.Processes = &used, &procs
	return &busy
}

// ledger fills a no-module vGPU's memory figures from its ledger file,
// read without its lock.
func (ob *Observer) ledger(s *status.VGPU, al state.Allocation, v state.VGPU, problem func(string, ...any)) {
	path := filepath.Join(al.LedgerDir, fmt.Sprintf("card%d.ledger", v.Card))
	snap, err := ledger.Peek(path)
	if errors.Is(err, fs.ErrNotExist) {
		// The shim creates the file at its first use: nothing was
		// ever charged, a true zero.
		snap, err = ledger.Snapshot{}, nil
	}
	if err != nil {
		problem("ledger of container %s on card %d: %v", al.Container, v.Card, err)
		return
	}
	s.MemoryUsedBytes, s.Processes = &snap.Used, &snap.Procs
}

// schedBusy is a no-module vGPU's busy time from its card's schedule
// file (read once per card and sample); nil when it cannot be known.
func (ob *Observer) schedBusy(cache map[int]map[string]uint64, card int, key string, problem func(string, ...any)) *uint64 {
	m, ok := cache[card]
	if !ok && ob.o.Sched == nil {
		problem("card %d: no schedule file reader: compute used is absent in no-module mode", card)
		cache[card] = nil
		return nil
	}
	if !ok {
		path := filepath.Join(ob.a.opts.Layout.SchedRoot, fmt.Sprintf("card%d.sched", card))
		var err error
		m, err = ob.o.Sched(path)
		if errors.Is(err, fs.ErrNotExist) {
			m, err = map[string]uint64{}, nil // no gated launch on the card yet
		}
		if err != nil {
			problem("schedule file of card %d: %v", card, err)
			m = nil
		}
		cache[card] = m
	}
	if m == nil {
		return nil
	}
	b := m[key] // absent: none of its processes launched yet
	return &b
}

// rate is the share of the card the vGPU used since the previous sample,
// in percent; nil at the first sample, or when the counter went back (a
// vGPU re-created under the same key).
func (ob *Observer) rate(k busyKey, busy uint64, now time.Time) *float64 {
	p, had := ob.prev[k]
	ob.prev[k] = busySample{busy: busy, at: now}
	dt := now.Sub(p.at)
	if !had || busy < p.busy || dt <= 0 {
		return nil
	}
	pct := min(100, float64(busy-p.busy)/float64(dt.Nanoseconds())*100)
	return &pct
}

// logProblems logs each source failure once, when it appears, and once
// when it clears.
func (ob *Observer) logProblems(now []string) {
	cur := make(map[string]bool, len(now))
	for _, p := range now {
		cur[p] = true
		if !ob.problems[p] {
			ob.a.opts.Log.Warn("metrics: a source failed; its series are absent", "problem", p)
		}
	}
	for p := range ob.problems {
		if !cur[p] {
			ob.a.opts.Log.Info("metrics: a source works again", "was", p)
		}
	}
	ob.problems = cur
}

func modeName(m int) string {
	if placement.Mode(m) == placement.Compute {
		return "compute"
	}
	return "memory"
}
