package interposer_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/pkg/ledger"
)

const (
	stormProcs   = 8
	stormThreads = 16
	stormCapMiB  = 512
	stormCtxMiB  = 16
	stormMaxMiB  = 16 // the largest single allocation
)

// stormMachine is a 512 MiB vGPU on an 8 GiB device, with contexts of
// 16 MiB so that eight processes and their extra contexts fit.
func stormMachine(t *testing.T) *machine {
	ctx := strconv.Itoa(stormCtxMiB)
	return newMachine(t, "GPU_CONTAINER_MEM", strconv.Itoa(stormCapMiB),
		"GPUSLICE_CONTEXT_MIB", ctx, "SIMCUDA_CONTEXT_MIB", ctx)
}

// watchers sample, for the whole storm, the ledger's total (through
// pkg/ledger) and the device's physical use (gstest watch, a process
// without the shim), and remember the highest of each.
type watchers struct {
	t      *testing.T
	capB   uint64
	device *proc

	devMax, devLast atomic.Uint64
	devSamples      atomic.Int64
	ledMax          atomic.Uint64
	ledSamples      atomic.Int64

	// Device samples taken in these windows (unix ns) are not held to the
	// cap: a SIGKILLed process's bytes leave the ledger when its files
	// close, but the simulator sees it dead only once it is a zombie.
	winMu   sync.Mutex
	windows [][2]int64
	skipped atomic.Int64

	mu      sync.Mutex // held while the ledger must not be touched
	stop    chan struct{}
	stopped sync.WaitGroup
	errs    chan error
}

func startWatchers(t *testing.T, m *machine, l *ledger.Ledger) *watchers {
	w := &watchers{t: t, capB: stormCapMiB * mib, stop: make(chan struct{}), errs: make(chan error, 16)}
	w.device = m.unshimmed().start("watch", "2")
	w.stopped.Add(2)
	go func() {
		defer w.stopped.Done()
		for line := range w.device.lines {
			var n uint64
			var at int64
			if _, err := fmt.Sscanf(line, "used=%d at=%d", &n, &at); err != nil {
				w.errs <- fmt.Errorf("watch: %q: %v", line, err)
				return
			}
			w.devLast.Store(n)
			w.devSamples.Add(1)
			if w.inWindow(at) {
				w.skipped.Add(1)
				continue
			}
			for old := w.devMax.Load(); n > old && !w.devMax.CompareAndSwap(old, n); old = w.devMax.Load() {
			}
		}
	}()
	go func() {
		defer w.stopped.Done()
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			w.mu.Lock()
			used, capBytes, err := l.Usage()
			w.mu.Unlock()
			if err != nil {
				w.errs <- err
				return
			}
			if capBytes != w.capB {
				w.errs <- fmt.Errorf("ledger cap %d, want %d", capBytes, w.capB)
				return
			}
			w.ledSamples.Add(1)
			if used > w.ledMax.Load() {
				w.ledMax.Store(used)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return w
}

func (w *watchers) inWindow(at int64) bool {
	w.winMu.Lock()
	defer w.winMu.Unlock()
	for _, win := range w.windows {
		if at >= win[0] && (win[1] == 0 || at <= win[1]) {
			return true
		}
	}
	return false
}

// kill SIGKILLs p, excusing the device samples until the simulator has
// surely seen it die.
func (w *watchers) kill(p *proc) {
	w.winMu.Lock()
	i := len(w.windows)
	w.windows = append(w.windows, [2]int64{time.Now().UnixNano(), 0})
	w.winMu.Unlock()
	p.kill() // returns once the zombie is reaped: the simulator sees ESRCH
	w.winMu.Lock()
	w.windows[i][1] = time.Now().Add(50 * time.Millisecond).UnixNano()
	w.winMu.Unlock()
}

// finish stops the ledger sampler and checks both maxima against the cap.
// The device watcher keeps running: deviceSettles reads it afterwards.
func (w *watchers) finish() {
	t := w.t
	close(w.stop)
	select {
	case err := <-w.errs:
		t.Errorf("watcher: %v", err)
	default:
	}
	t.Logf("ledger: %d samples, max %.1f MiB; device: %d samples (%d during kills), max %.1f MiB; cap %d MiB",
		w.ledSamples.Load(), float64(w.ledMax.Load())/float64(mib), w.devSamples.Load(), w.skipped.Load(),
		float64(w.devMax.Load())/float64(mib), w.capB/mib)
	assert.Positive(t, w.ledSamples.Load())
	assert.Positive(t, w.devSamples.Load())
	assert.LessOrEqual(t, w.ledMax.Load(), w.capB, "the ledger went past the cap")
	assert.LessOrEqual(t, w.devMax.Load(), w.capB, "the device held more than the cap")
}

// deviceSettles waits for the device to be empty again.
func (w *watchers) deviceSettles() {
	w.t.Helper()
	assert.Eventually(w.t, func() bool { return w.devLast.Load() == 0 }, 10*time.Second, 10*time.Millisecond,
		"the device still holds %d bytes", w.devLast.Load())
	res := w.device.stop(30 * time.Second)
	w.stopped.Wait()
	assert.Equal(w.t, 0, res.code, "%s", res)
}

// startStorm starts n storm processes, waits until all have their context
// and only then lets them go, so that none is refused its context by the
// others' storms.
func startStorm(t *testing.T, m *machine, n int, seconds int) []*proc {
	procs := make([]*proc, n)
	for i := range procs {
		procs[i] = m.start("storm", strconv.Itoa(stormThreads), strconv.Itoa(seconds),
			strconv.Itoa(i+1), fmt.Sprintf("max=%dM", stormMaxMiB), "linger")
	}
	for _, p := range procs {
		p.await("ready", 60*time.Second)
	}
	for _, p := range procs {
		_, err := p.stdin.Write([]byte("go\n"))
		require.NoError(t, err)
	}
	return procs
}

// holdings maps the ledger's live processes to their bytes.
func holdings(t *testing.T, l *ledger.Ledger) map[int32]uint64 {
	t.Helper()
	procs, err := l.Procs()
	require.NoError(t, err)
	out := map[int32]uint64{}
	for _, p := range procs {
		out[p.PID] = p.Bytes
	}
	return out
}

// finishStorm waits for the processes' "done", checks that each then
// holds nothing in the ledger, lets them exit and sums their counters.
func finishStorm(t *testing.T, l *ledger.Ledger, procs []*proc) (ok, refused uint64) {
	for _, p := range procs {
		p.await("done", 120*time.Second)
	}
	held := holdings(t, l)
	for _, p := range procs {
		b, found := held[p.pid()]
		assert.True(t, found, "storm %d has no slot in the ledger", p.pid())
		assert.Zero(t, b, "storm %d freed everything but holds %d bytes", p.pid(), b)
	}
	for _, p := range procs {
		r := p.stop(60 * time.Second)
		require.Equal(t, 0, r.code, "%s", r)
		ok += r.num(t, "ok")
		refused += r.num(t, "refused")
		// The shim's own complaints, other than refusals, are worth seeing.
		for _, line := range r.lines("gpuslice[") {
			if !strings.Contains(line, " refused") {
				t.Logf("storm %d: %s", p.pid(), line)
			}
		}
		assert.Empty(t, r.lines("more than its vGPU could be charged"), "a pool grew past its charge")
	}
	return ok, refused
}

// ledgerEmpties waits for the ledger to be back at zero once every process
// is gone (what an exited process still held is reaped 250 ms later at most).
func ledgerEmpties(t *testing.T, l *ledger.Ledger) {
	t.Helper()
	var used uint64
	assert.Eventually(t, func() bool {
		used, _ = usage(t, l)
		return used == 0
	}, 5*time.Second, 20*time.Millisecond, "the ledger still holds %d bytes", used)
}

// Eight processes of sixteen threads allocate and free at random through
// every path. Neither the ledger nor the device is ever above the cap,
// the cap is hit (refusals), and everything ends at zero: each process,
// done and still alive, holds nothing; the ledger and the device are empty.
func TestStorm(t *testing.T) {
	m := stormMachine(t)
	procs := startStorm(t, m, stormProcs, 3)
	l := openLedger(t, m.ledgerPath(0))
	w := startWatchers(t, m, l)

	ok, refused := finishStorm(t, l, procs)
	w.finish()
	t.Logf("%d successful operations, %d refusals", ok, refused)
	assert.Positive(t, ok)
	assert.Positive(t, refused, "the storm never reached the cap")
	ledgerEmpties(t, l)
	w.deviceSettles()
}

// Two processes killed with SIGKILL mid-storm leave no lock held (the
// others keep running and finish) and their bytes are reclaimed by the
// survivors, without any help from an observer: with the watchers held
// off the ledger, two seconds later (the requirement is one second after a
// survivor's next operation; these never pause) there is nothing left to
// reap and the dead are gone from the ledger.
func TestStormKill(t *testing.T) {
	m := stormMachine(t)
	procs := startStorm(t, m, stormProcs, 5)
	l := openLedger(t, m.ledgerPath(0))
	w := startWatchers(t, m, l)

	time.Sleep(time.Second)
	w.mu.Lock()
	victims := []*proc{procs[2], procs[5]}
	for _, v := range victims {
		w.kill(v)
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	n, err := l.Reap()
	w.mu.Unlock()
	require.NoError(t, err)
	assert.Zero(t, n, "the survivors had not reclaimed the killed processes' bytes")
	held := holdings(t, l)
	for _, v := range victims {
		assert.NotContains(t, held, v.pid(), "killed process still in the ledger")
	}

	survivors := []*proc{}
	for _, p := range procs {
		if p != victims[0] && p != victims[1] {
			survivors = append(survivors, p)
		}
	}
	ok, refused := finishStorm(t, l, survivors)
	w.finish()
	t.Logf("survivors: %d successful operations, %d refusals", ok, refused)
	ledgerEmpties(t, l)
	w.deviceSettles()
}

// A process killed while holding memory gives it back to the others: the
// next charge that would not fit reclaims it first.
func TestKilledHolderReclaimed(t *testing.T) {
	t.Parallel()
	m := newMachine(t) // cap 1024 MiB, contexts 256 MiB
	holder := m.start("hold", "512M")
	holder.await("ready", 30*time.Second)
	// 256 + 512 held: a second process gets its context and no more.
	require.Equal(t, 2, m.run("alloc", "512M").code)
	holder.kill()
	// No observer has touched the ledger: the charge itself reclaims.
	r := m.run("alloc", "512M")
	require.Equal(t, 0, r.code, "%s", r)

	l := openLedger(t, m.ledgerPath(0))
	used, _ := usage(t, l)
	assert.Zero(t, used)
}

// One process alone on its vGPU, sixteen threads storming a few paths: once
// everything is freed and synchronised, cuMemGetInfo's free is exactly
// where it started (gstest storm ... solo): no charge is lost or left over.
func TestStormSolo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, paths string
		capMiB      int // small enough for the storm to reach it
		rounds      int
	}{
		{"linear+arrays+contexts", "alloc,pitch,array,array3d,mipmap,managed,context", 96, 3},
		{"stream-ordered", "async,async_ptsz,pool", 96, 3},
		{"vmm", "vmm", 96, 3},
		// Handles freed by the driver and reused by another thread
		// before the shim forgot them used to leave stale charges.
		{"stream-ordered+vmm", "async,vmm", 256, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for round := 1; round <= tc.rounds; round++ {
				m := newMachine(t, "GPU_CONTAINER_MEM", strconv.Itoa(tc.capMiB),
					"GPUSLICE_CONTEXT_MIB", "16", "SIMCUDA_CONTEXT_MIB", "16")
				r := m.run("storm", "16", "1", strconv.Itoa(round), "max=16M", "only="+tc.paths, "solo")
				require.Equal(t, 0, r.code, "round %d: %s", round, r)
				if tc.capMiB < 256 {
					assert.Positive(t, r.num(t, "refused"), "the cap was never reached")
				}
			}
		})
	}
}

// The ledger's descriptor sits above the driver's device files, so the
// kernel, closing a dying process's descriptors in ascending order, drops
// the slot lock last: survivors never reclaim bytes the card still holds.
func TestLedgerDescriptorClosesLast(t *testing.T) {
	t.Parallel()
	m := newMachine(t)
	holder := m.start("hold", "1M")
	holder.await("ready", 30*time.Second)
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", holder.pid()))
	require.NoError(t, err)
	found := -1
	for _, e := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", holder.pid(), e.Name()))
		// The creator holds it under the temporary name it was made as.
		if err == nil && strings.HasPrefix(target, m.ledgerPath(0)) {
			found, _ = strconv.Atoi(e.Name())
		}
	}
	assert.GreaterOrEqual(t, found, 1024, "ledger descriptor number")
	res := holder.stop(30 * time.Second)
	require.Equal(t, 0, res.code, "%s", res)
}
