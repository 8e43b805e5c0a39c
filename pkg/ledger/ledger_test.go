package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const mib = 1 << 20

// newLedger creates a ledger in a fresh directory and opens it as the
// agent does.
func newLedger(t *testing.T, capBytes uint64) (string, *Ledger) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "card0.ledger")
	l, err := Create(path, capBytes)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return path, l
}

// usage asserts the invariants and returns the total, without reaping.
func usage(t *testing.T, l *Ledger) uint64 {
	t.Helper()
	st, err := l.state()
	require.NoError(t, err)
	require.Equal(t, st.sum, st.used, "total differs from the slots")
	require.LessOrEqual(t, st.used, st.capBytes, "over the cap")
	return st.used
}

// eventually polls cond until it holds, for up to a generous minute.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestExactCap(t *testing.T) {
	const capBytes = 8 * mib
	path, l := newLedger(t, capBytes)
	c := spawn(t, path, 0)

	steps := []struct {
		op   string
		n    uint64
		want error
		used uint64 // the total after the step
	}{
		{"charge", 0, nil, 0},
		{"charge", capBytes - 10, nil, capBytes - 10},
		{"charge", 10, nil, capBytes},
		{"charge", 1, syscall.ENOMEM, capBytes},
		{"charge", 0, nil, capBytes},
		{"charge", math.MaxUint64, syscall.ENOMEM, capBytes},
		{"uncharge", 10, nil, capBytes - 10},
		{"charge", 11, syscall.ENOMEM, capBytes - 10},
		{"charge", 10, nil, capBytes},
		{"uncharge", capBytes, nil, 0},
		{"charge", math.MaxUint64 - 1, syscall.ENOMEM, 0},
		{"charge", capBytes + 1, syscall.ENOMEM, 0},
		{"charge", capBytes, nil, capBytes},
		{"uncharge", 3 * capBytes, nil, 0}, // clamped
		{"uncharge", 1, nil, 0},
	}
	for i, s := range steps {
		var err error
		if s.op == "charge" {
			err = c.charge(s.n)
		} else {
			c.ok("uncharge %d", s.n)
		}
		require.Equal(t, s.want, err, "step %d: %s %d", i, s.op, s.n)
		require.Equal(t, s.used, usage(t, l), "step %d: %s %d", i, s.op, s.n)
	}
	used, capGot, err := l.Usage()
	require.NoError(t, err)
	assert.Equal(t, uint64(0), used)
	assert.Equal(t, uint64(capBytes), capGot)
}

func TestSharedCap(t *testing.T) {
	const capBytes, share = 4 * mib, mib
	path, l := newLedger(t, capBytes)
	kids := make([]*child, 4)
	for i := range kids {
		kids[i] = spawn(t, path, 0)
		require.NoError(t, kids[i].charge(share))
	}
	for _, k := range kids {
		require.Equal(t, syscall.ENOMEM, k.charge(1))
	}
	assert.Equal(t, uint64(capBytes), usage(t, l))

	// One process's over-uncharge is clamped to its own bytes.
	kids[0].ok("uncharge %d", 2*capBytes)
	assert.Equal(t, uint64(capBytes-share), usage(t, l))
	require.NoError(t, kids[1].charge(share))
	require.Equal(t, syscall.ENOMEM, kids[2].charge(1))

	procs, err := l.Procs()
	require.NoError(t, err)
	want := map[int32]uint64{kids[0].pid(): 0, kids[1].pid(): 2 * share,
		kids[2].pid(): share, kids[3].pid(): share}
	got := map[int32]uint64{}
	for _, p := range procs {
		got[p.PID] = p.Bytes
	}
	assert.Equal(t, want, got)

	// A clean close gives back what is left and frees the slot.
	kids[3].ok("close")
	kids[1].ok("close")
	procs, err = l.Procs()
	require.NoError(t, err)
	assert.Len(t, procs, 2)
	assert.Equal(t, uint64(share), usage(t, l))
}

func TestKilledHolderIsReclaimed(t *testing.T) {
	const capBytes = 4 * mib
	for _, by := range []string{"Reap", "refused charge", "periodic reap", "Usage"} {
		t.Run(by, func(t *testing.T) {
			path, l := newLedger(t, capBytes)
			victim := spawn(t, path, 0)
			survivor := spawn(t, path, 0)
			hold := uint64(capBytes)
			if by == "periodic reap" {
				hold = capBytes / 2 // leave the survivor room
			}
			require.NoError(t, victim.charge(hold))
			require.Equal(t, syscall.ENOMEM, survivor.charge(capBytes))
			victim.kill()
			assert.Equal(t, hold, usage(t, l), "nothing reaps by itself")

			switch by {
			case "Reap":
				n, err := l.Reap()
				require.NoError(t, err)
				assert.Equal(t, 1, n)
				assert.Equal(t, uint64(0), usage(t, l))
			case "refused charge":
				// No room: the survivor reaps before refusing.
				require.NoError(t, survivor.charge(capBytes))
				assert.Equal(t, uint64(capBytes), usage(t, l))
			case "periodic reap":
				// Charges that fit reap too, every 250 ms.
				eventually(t, "the survivor's reap", func() bool {
					require.NoError(t, survivor.charge(1))
					survivor.ok("uncharge 1")
					return usage(t, l) == 0
				})
			case "Usage":
				eventually(t, "the observer's reap", func() bool {
					used, _, err := l.Usage()
					require.NoError(t, err)
					return used == 0
				})
			}
			n, err := l.Reap()
			require.NoError(t, err)
			assert.Equal(t, 0, n, "reaped twice")
			procs, err := l.Procs()
			require.NoError(t, err)
			require.Len(t, procs, 1)
			assert.Equal(t, survivor.pid(), procs[0].PID)
		})
	}
}

func TestKilledWhileHoldingTheLock(t *testing.T) {
	const capBytes, held = 4 * mib, 1000
	cases := []struct {
		name      string
		scribble  uint64 // the total the dying holder left behind
		recoverer string
	}{
		{"runaway total, observer recovers", math.MaxUint64 - 7, "observer"},
		{"zeroed total, observer recovers", 0, "observer"},
		{"over cap, survivor recovers", capBytes + 1, "survivor"},
		{"runaway total, survivor recovers", math.MaxUint64, "survivor"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path, l := newLedger(t, capBytes)
			survivor := spawn(t, path, 0)
			require.NoError(t, survivor.charge(held))
			victim := spawn(t, path, 0)
			require.NoError(t, victim.charge(held))
			require.Equal(t, "locked", victim.do("lockhang %d", tc.scribble))
			victim.kill()

			if tc.recoverer == "survivor" {
				// Room only once the victim's bytes are reaped.
				require.NoError(t, survivor.charge(capBytes-held))
				assert.Equal(t, uint64(capBytes), usage(t, l))
			} else {
				assert.Equal(t, uint64(2*held), usage(t, l))
				n, err := l.Reap()
				require.NoError(t, err)
				assert.Equal(t, 1, n)
				assert.Equal(t, uint64(held), usage(t, l))
			}
			st, err := l.state()
			require.NoError(t, err)
			assert.Equal(t, uint64(1), st.ownerDead, "recovered once")
			assert.Equal(t, uint64(1), st.inUse)

			// Nothing stuck: everyone locks normally again.
			survivor.ok("uncharge %d", capBytes)
			require.NoError(t, survivor.charge(capBytes))
			survivor.ok("uncharge %d", capBytes)
			assert.Equal(t, uint64(0), usage(t, l))
			st, err = l.state()
			require.NoError(t, err)
			assert.Equal(t, uint64(1), st.ownerDead)
		})
	}
}

// watch samples the ledger until stop is closed; it reports the first
// broken invariant.
func watch(l *Ledger, stop <-chan struct{}) <-chan error {
	res := make(chan error, 1)
	go func() {
		samples := 0
		for {
			st, err := l.state()
			switch {
			case err != nil:
				res <- err
				return
			case st.used > st.capBytes:
				res <- fmt.Errorf("sample %d: used %d over cap %d", samples, st.used, st.capBytes)
				return
			case st.used != st.sum:
				res <- fmt.Errorf("sample %d: used %d, slots hold %d", samples, st.used, st.sum)
				return
			}
			samples++
			select {
			case <-stop:
				if samples < 2 {
					res <- fmt.Errorf("only %d samples", samples)
				}
				close(res)
				return
			default:
			}
		}
	}()
	return res
}

func TestStorm(t *testing.T) {
	const capBytes, procs, threads = 64 * mib, 8, 16
	iters := uint64(3000)
	if testing.Short() {
		iters = 300
	}
	for _, killOne := range []bool{false, true} {
		t.Run(fmt.Sprintf("kill=%v", killOne), func(t *testing.T) {
			path, l := newLedger(t, capBytes)
			kids := make([]*child, procs)
			for i := range kids {
				kids[i] = spawn(t, path, 0)
			}
			stop := make(chan struct{})
			watcher := watch(l, stop)
			for i, k := range kids {
				n := iters
				switch {
				case killOne && i == 0:
					n = math.MaxUint32 // runs until killed
				case killOne:
					n = 4 * iters // still running at the kill
				}
				// Each thread keeps up to 8 charges of up to cap/32:
				// plenty of refusals at the cap.
				k.send("storm %d %d %d %d", threads, n, i+1, capBytes/32)
			}
			if killOne {
				time.Sleep(time.Duration(50+time.Now().UnixNano()%200) * time.Millisecond)
				kids[0].kill()
			}
			for i, k := range kids {
				if killOne && i == 0 {
					continue
				}
				vals := parseOK(t, "storm", k.recv())
				assert.Equal(t, uint64(0), vals[0], "child %d: unexpected results", i)
			}
			close(stop)
			require.NoError(t, <-watcher)

			if killOne {
				_, err := l.Reap() // may already be done by the others
				require.NoError(t, err)
				st, err := l.state()
				require.NoError(t, err)
				t.Logf("killed the lock holder: %v", st.ownerDead > 0)
			}
			assert.Equal(t, uint64(0), usage(t, l))
			used, _, err := l.Usage()
			require.NoError(t, err)
			assert.Equal(t, uint64(0), used)
			st, err := l.state()
			require.NoError(t, err)
			live := uint64(procs)
			if killOne {
				live--
			}
			assert.Equal(t, live, st.inUse)
			for _, k := range kids[1:] {
				k.ok("close")
			}
			if !killOne {
				kids[0].ok("close")
			}
			st, err = l.state()
			require.NoError(t, err)
			assert.Equal(t, uint64(0), st.inUse)
		})
	}
}

// Kill -9 a storming process at random instants, again and again: the
// others must always finish. This is what caught waiters left asleep on a
// free lock when a woken waiter was killed (see lf_lock_wait).
func TestStormKillRounds(t *testing.T) {
	const capBytes, procs, threads = 16 * mib, 4, 16
	rounds := 6
	if testing.Short() {
		rounds = 2
	}
	path, l := newLedger(t, capBytes)
	for r := 0; r < rounds; r++ {
		kids := make([]*child, procs)
		for i := range kids {
			kids[i] = spawn(t, path, 0)
		}
		for i, k := range kids {
			n := uint64(2000)
			if i == 0 {
				n = math.MaxUint32
			}
			k.send("storm %d %d %d %d", threads, n, 100*r+i+1, capBytes/32)
		}
		time.Sleep(time.Duration(5+(time.Now().UnixNano()/1000)%60) * time.Millisecond)
		kids[0].kill()
		for i, k := range kids[1:] {
			vals := parseOK(t, "storm", k.recv())
			require.Equal(t, uint64(0), vals[0], "round %d child %d", r, i+1)
			k.ok("close")
		}
		_, err := l.Reap()
		require.NoError(t, err)
		require.Equal(t, uint64(0), usage(t, l), "round %d", r)
	}
}

func TestFork(t *testing.T) {
	const capBytes, parentBytes, childBytes = 8 * mib, 3 * mib, mib
	path, l := newLedger(t, capBytes)
	p := spawn(t, path, 0)
	require.NoError(t, p.charge(parentBytes))

	t.Run("child uncharges", func(t *testing.T) {
		vals := p.ok("fork %d %d 0", childBytes, parentBytes+childBytes)
		require.Equal(t, uint64(0), vals[0], "child's exit status")
		assert.Equal(t, uint64(parentBytes), usage(t, l))
		// It exited without closing: its empty slot is reaped.
		n, err := l.Reap()
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		assert.Equal(t, uint64(parentBytes), usage(t, l))
	})
	t.Run("child dies holding bytes", func(t *testing.T) {
		vals := p.ok("fork %d %d 1", childBytes, parentBytes+childBytes)
		require.Equal(t, uint64(0), vals[0], "child's exit status")
		assert.Equal(t, uint64(parentBytes+childBytes), usage(t, l))
		n, err := l.Reap()
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		assert.Equal(t, uint64(parentBytes), usage(t, l))
	})
	t.Run("forks while threads hold the lock", func(t *testing.T) {
		vals := p.ok("forkstorm 4 20")
		require.Equal(t, uint64(0), vals[0], "failed children")
		assert.Equal(t, uint64(parentBytes), usage(t, l))
	})

	procs, err := l.Procs()
	require.NoError(t, err)
	assert.Equal(t, []Proc{{PID: p.pid(), Bytes: parentBytes}}, procs)
	p.ok("uncharge %d", parentBytes)
	assert.Equal(t, uint64(0), usage(t, l))
}

func TestConcurrentCreate(t *testing.T) {
	const n = 8
	dir := filepath.Join(t.TempDir(), "vgpu") // created by the ledger
	path := filepath.Join(dir, "card0.ledger")
	kids := make([]*child, n)
	for i := range kids {
		kids[i] = start(t)
	}
	for i, k := range kids {
		k.send("open %s %d", path, uint64(i+1)*mib)
	}
	for _, k := range kids {
		parseOK(t, "open", k.recv())
	}
	// And observers in this process at the same time.
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := Create(path, 100*mib)
			if err == nil {
				err = l.Close()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "temporary files left behind")
	assert.Equal(t, "card0.ledger", entries[0].Name())

	l, err := Open(path)
	require.NoError(t, err)
	defer l.Close()
	_, capBytes, err := l.Usage()
	require.NoError(t, err)
	for _, k := range kids {
		vals := k.ok("usage")
		assert.Equal(t, capBytes, vals[1], "all share one file")
		require.NoError(t, k.charge(1))
	}
	assert.Equal(t, uint64(n), usage(t, l))
}

func TestBadFiles(t *testing.T) {
	good, l := newLedger(t, mib)
	require.NoError(t, l.Close())
	img, err := os.ReadFile(good)
	require.NoError(t, err)
	patched := func(off int, b ...byte) []byte {
		out := bytes.Clone(img)
		copy(out[off:], b)
		return out
	}
	cases := []struct {
		name    string
		content []byte // nil: a directory
		want    syscall.Errno
	}{
		{"empty", []byte{}, syscall.EINVAL},
		{"short", []byte("gsledger"), syscall.EINVAL},
		{"wrong magic", patched(0, 'x'), syscall.EPROTO},
		{"wrong version", patched(8, 99), syscall.EPROTO},
		{"truncated", img[:len(img)-64], syscall.EINVAL},
		{"too long", append(bytes.Clone(img), 0), syscall.EINVAL},
		{"wrong size field", patched(16, 1), syscall.EINVAL},
		{"directory", nil, syscall.EISDIR},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.ledger")
			if tc.content == nil {
				require.NoError(t, os.Mkdir(path, 0o755))
			} else {
				require.NoError(t, os.WriteFile(path, tc.content, 0o644))
			}
			for _, open := range []func() (*Ledger, error){
				func() (*Ledger, error) { return Open(path) },
				func() (*Ledger, error) { return Create(path, mib) },
			} {
				l, err := open()
				require.Error(t, err)
				assert.Nil(t, l)
				assert.ErrorIs(t, err, tc.want)
				assert.Contains(t, err.Error(), path)
			}
			_, err := openCharger(path, mib)
			assert.ErrorIs(t, err, tc.want)
		})
	}

	t.Run("missing", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "none.ledger")
		_, err := Open(path)
		assert.ErrorIs(t, err, syscall.ENOENT)
		assert.Contains(t, err.Error(), "agent creates it")
		_, err = os.Stat(path)
		assert.True(t, errors.Is(err, os.ErrNotExist), "Open must not create")
	})
}

func TestObserver(t *testing.T) {
	path, l := newLedger(t, mib)
	assert.Equal(t, syscall.EPERM, l.rawCharge(1))

	// An existing ledger keeps its cap.
	l2, err := Create(path, 5*mib)
	require.NoError(t, err)
	_, capBytes, err := l2.Usage()
	require.NoError(t, err)
	assert.Equal(t, uint64(mib), capBytes)
	require.NoError(t, l2.Close())
	require.NoError(t, l2.Close())
	_, _, err = l2.Usage()
	assert.ErrorIs(t, err, ErrClosed)
	_, err = l2.Reap()
	assert.ErrorIs(t, err, ErrClosed)
	_, err = l2.Procs()
	assert.ErrorIs(t, err, ErrClosed)
	assert.Equal(t, path, l.Path())
}

// Slot locks belong to an open file description, not to the process:
// observers opening and closing the same file in a charging process must
// not make its slot look dead.
func TestObserverInChargingProcess(t *testing.T) {
	path, l := newLedger(t, mib)
	ch, err := openCharger(path, 0)
	require.NoError(t, err)
	defer ch.close()
	require.NoError(t, ch.charge(1000))
	for i := 0; i < 3; i++ {
		o, err := Open(path)
		require.NoError(t, err)
		require.NoError(t, o.Close())
	}
	other := spawn(t, path, 0)
	n := other.ok("state")
	assert.Equal(t, []uint64{1000, 1000, 1}, n)
	require.NoError(t, other.charge(1)) // claims its slot: reaps nothing
	nr, err := l.Reap()
	require.NoError(t, err)
	assert.Equal(t, 0, nr)
	assert.Equal(t, uint64(1001), usage(t, l))
}

// Every handle takes a slot of its own; when all are taken, charges fail
// with ENOSPC until one is given back.
func TestSlotsRunOut(t *testing.T) {
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	// The Go runtime raises the soft limit to the hard one at start-up.
	require.GreaterOrEqual(t, lim.Cur, uint64(MaxProcs+100),
		"this test needs %d open files: raise RLIMIT_NOFILE (ulimit -n)", MaxProcs+100)
	path, l := newLedger(t, 1<<40)
	var chs []*charger
	defer func() {
		for _, ch := range chs {
			ch.close()
		}
	}()
	for i := 0; i < MaxProcs; i++ {
		ch, err := openCharger(path, 0)
		require.NoError(t, err)
		chs = append(chs, ch)
		require.NoError(t, ch.charge(1))
	}
	extra, err := openCharger(path, 0)
	require.NoError(t, err)
	defer extra.close()
	assert.Equal(t, syscall.ENOSPC, extra.charge(1))
	n, err := l.Reap()
	require.NoError(t, err)
	assert.Equal(t, 0, n)

	chs[7].close()
	chs = append(chs[:7], chs[8:]...)
	require.NoError(t, extra.charge(1))
	assert.Equal(t, uint64(MaxProcs), usage(t, l))
}

// The file is shared by every process of the container whatever its user:
// a ledger the agent creates as root is writable by the others.
func TestFileWritableByAllUsers(t *testing.T) {
	path, _ := newLedger(t, 1<<20)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o666), fi.Mode().Perm())
}
