package sfcore

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func now() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return uint64(ts.Nano())
}

// procs opens n processes' slots of container key on one schedule file.
func procs(t *testing.T, path string, w Want, n int) []*File {
	t.Helper()
	var fs []*File
	for i := 0; i < n; i++ {
		f, err := Open(path, w)
		require.NoError(t, err)
		fs = append(fs, f)
	}
	return fs
}

// acquire takes a slice for f in the background: its end on the channel.
func acquire(t *testing.T, f *File) <-chan uint64 {
	got := make(chan uint64, 1)
	go func() {
		_, end, err := f.Acquire()
		assert.NoError(t, err)
		got <- end
	}()
	return got
}

// Two processes of vGPU a hold its slice while b waits: at the slice's end
// the card is b's at once (the early handover) and a drains until its
// last holder releases, which moves b's slice end to a slice after it.
func TestDrainWaitsForEveryHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "card0.sched")
	w := Want{Policy: 3, MaxInst: 20, SliceNs: 20e6, Quota: 50, Key: "a"}
	a := procs(t, path, w, 2)
	w.Key = "b"
	b := procs(t, path, w, 1)[0]
	start1, end1, err := a[0].Acquire()
	require.NoError(t, err)
	start2, _, err := a[1].Acquire()
	require.NoError(t, err)
	require.Equal(t, start1, start2, "both hold the same slice")
	bEnd := <-acquire(t, b)
	st := b.State()
	require.Equal(t, b.ID, st.Owner, "b's at a's slice's end: %+v", st)
	assert.Equal(t, end1, st.SliceStart, "b's slice begins at a's end: %+v", st)
	assert.Equal(t, a[0].ID, st.Drainer, "a drains: %+v", st)
	a[0].Release(0)
	st = b.State()
	assert.Equal(t, a[0].ID, st.Drainer, "a drains until its last holder releases: %+v", st)
	assert.Equal(t, bEnd, st.SliceEnd)
	released := now()
	a[1].Release(0)
	st = b.State()
	assert.Equal(t, -1, st.Drainer, "the last holder's release ends the drain: %+v", st)
	assert.Less(t, st.SliceEnd, bEnd, "b's end moved earlier: %+v", st)
	assert.GreaterOrEqual(t, st.SliceEnd, released+20e6, "b's slice whole after the drain: %+v", st)
}

// A process that took a slice and stopped (never released) is passed over:
// its vGPU's drain lapses at the bound, and its hold lapses with that
// slice. Its late release, once another of its processes holds the
// vGPU's next slice, ends nothing of that one.
func TestStoppedHolderLapses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "card0.sched")
	w := Want{Policy: 3, MaxInst: 20, SliceNs: 10e6, Quota: 50, Key: "a"}
	a := procs(t, path, w, 2)
	w.Key = "b"
	b := procs(t, path, w, 1)[0]
	_, end1, err := a[0].Acquire()
	require.NoError(t, err)
	// a[0] stops. b takes the card at a's end; past the most a drain is
	// charged (its hold no longer carries into a's next slice) a[1]
	// waits for a's next.
	<-acquire(t, b)
	time.Sleep(time.Duration(end1 + 110e6 - now()))
	end2 := <-acquire(t, a[1])
	st := a[1].State()
	require.Equal(t, a[1].ID, st.Owner, "%+v", st)
	require.Greater(t, st.SliceStart, end1)
	require.True(t, st.Holding, "a[1] holds a's next slice: %+v", st)
	a[0].Release(0) // late, of the slice that lapsed
	st = a[1].State()
	assert.True(t, st.Holding, "a[0]'s stale release ended a[1]'s hold: %+v", st)
	assert.Equal(t, end2, st.SliceEnd, "a[0]'s stale release moved the slice: %+v", st)
}

// A process still fencing its slice when its vGPU's next slice begins
// holds that one too, the work it waits for running on in it: the next
// slice's end is a drain, charged, not work run on into the next owner's
// slice uncharged (a 20 ms kernel 64 deep took all of its second 100 ms
// before).
func TestFencingHoldCarries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "card0.sched")
	w := Want{Policy: 3, MaxInst: 20, SliceNs: 10e6, Quota: 50, Key: "a"}
	a := procs(t, path, w, 1)[0]
	w.Key = "b"
	b := procs(t, path, w, 1)[0]
	_, _, err := a.Acquire()
	require.NoError(t, err)
	<-acquire(t, b) // b's at a's end; a's fence goes on
	deadline := time.Now().Add(time.Second)
	st := a.State()
	for st.Owner != a.ID && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		a.Tick()
		st = a.State()
	}
	require.Equal(t, a.ID, st.Owner, "a's next slice: %+v", st)
	assert.True(t, st.Holding, "the fencing hold carried into a's next slice: %+v", st)
	a.Release(0)
	st = a.State()
	assert.False(t, st.Holding, "the release ends it: %+v", st)
}
