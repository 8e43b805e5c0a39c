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

func sleepUntil(t uint64) {
	if n := now(); t > n {
		time.Sleep(time.Duration(t - n))
	}
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

// Two processes of one vGPU hold its slice: the card waits for both.
func TestDrainWaitsForEveryHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "card0.sched")
	w := Want{Policy: 3, MaxInst: 20, SliceNs: 100e6, Quota: 50, Key: "a"}
	a := procs(t, path, w, 2)
	start1, end1, err := a[0].Acquire()
	require.NoError(t, err)
	start2, _, err := a[1].Acquire()
	require.NoError(t, err)
	require.Equal(t, start1, start2, "both hold the same slice")
	sleepUntil(end1 + 1e6)
	a[0].Release(0)
	st := a[0].State()
	assert.True(t, st.Holding, "the card must wait for the second holder: %+v", st)
	assert.Equal(t, start1, st.SliceStart)
	a[1].Release(0)
	st = a[0].State()
	assert.False(t, st.Holding, "the last holder's release ends the drain: %+v", st)
	assert.Greater(t, st.SliceStart, end1, "the next slice starts at the release: %+v", st)
}

// A process that took a slice and stopped (never released) is passed over
// at the drain's bound, and its hold lapses with that slice: the vGPU's
// next slice, held by another of its processes, ends at that process's
// release, not 100 ms later.
func TestStoppedHolderLapses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "card0.sched")
	w := Want{Policy: 3, MaxInst: 20, SliceNs: 2e6, Quota: 50, Key: "a"}
	a := procs(t, path, w, 2)
	_, end1, err := a[0].Acquire()
	require.NoError(t, err)
	// a[0] stops. Past the drain's bound the card moves on without it.
	sleepUntil(end1 + 105e6)
	start2, end2, err := a[1].Acquire()
	require.NoError(t, err)
	require.Greater(t, start2, end1)
	require.True(t, a[1].State().Holding)
	sleepUntil(end2 + 1e6)
	a[1].Release(0)
	st := a[1].State()
	assert.False(t, st.Holding, "a[0]'s lapsed hold kept the card waiting: %+v", st)
	assert.Greater(t, st.SliceStart, end2, "the next slice starts at the release: %+v", st)
}
