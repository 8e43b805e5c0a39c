package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/pkg/guard"
)

// fakeGuard is the eBPF guard as the agent sees it: the guarded cgroups
// and the refusals counted for them.
type fakeGuard struct {
	mu        sync.Mutex
	set       map[uint64]bool
	dirs      map[string]uint64 // ledger directories: their cgroups
	calls     []string          // "dir <path>" and "cgroup <id>", in order
	refused   map[uint64]uint64
	stats     guard.Stats
	err       error // AddCgroup's answer
	refreshes int
}

func newFakeGuard() *fakeGuard {
	return &fakeGuard{set: map[uint64]bool{}, dirs: map[string]uint64{}, refused: map[uint64]uint64{}}
}

func (g *fakeGuard) AddLedgerDir(path string, id uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dirs[path] = id
	g.calls = append(g.calls, "dir "+path)
	return nil
}

func (g *fakeGuard) RemoveLedgerDir(path string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.dirs, path)
	return nil
}

func (g *fakeGuard) Rescan() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = append(g.calls, "rescan")
	return nil
}

func (g *fakeGuard) ledgerDirs() map[string]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.dirs)
}

// Refusals, as the guard's map: the guarded cgroups, each with its count.
func (g *fakeGuard) Refusals() (map[uint64]uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[uint64]uint64{}
	for id := range g.set {
		out[id] = g.refused[id]
	}
	return out, nil
}

func (g *fakeGuard) Stats() (guard.Stats, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stats, nil
}

func (g *fakeGuard) AddCgroup(id uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return g.err
	}
	g.set[id] = true
	g.calls = append(g.calls, fmt.Sprintf("cgroup %d", id))
	return nil
}

func (g *fakeGuard) RemoveCgroup(id uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.set, id)
	return nil
}

func (g *fakeGuard) Refresh() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refreshes++
	return nil
}

func (g *fakeGuard) cgroups() map[uint64]bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[uint64]bool{}
	for k := range g.set {
		out[k] = true
	}
	return out
}

// A bound container's cgroup is guarded from its start to its removal,
// and again by a restarted agent's new guard, from the agent's state.
func TestModuleGuard(t *testing.T) {
	n := newNode(t, EnforceModule, cards16(1, 4)...)
	g := newFakeGuard()
	n.opts.Guard = g
	n.restart(t)
	ann := map[string]string{"gpuslice.io/gpu-memory": "1Gi", "gpuslice.io/gpu-cores": "20"}
	for _, c := range []string{"c1", "c2"} {
		_, err := n.create(t, c, ann)
		require.NoError(t, err)
		n.cgroup(t, c)
	}
	id := func(c string) uint64 {
		return uint64(len(filepath.Join(n.opts.Layout.CgroupRoot, "k8s.io", c)))
	}
	assert.Empty(t, g.cgroups(), "nothing guarded before a start")
	require.NoError(t, n.agent.StartContainer(context.Background(), pod(nil), ctr("c1")))
	assert.Equal(t, map[uint64]bool{id("c1"): true}, g.cgroups())
	assert.Equal(t, 1, g.refreshes, "the majors reread before the cgroup is added")

	// The agent restarts: its new guard knows nothing, the state does.
	g = newFakeGuard()
	n.opts.Guard = g
	n.restart(t)
	assert.Equal(t, map[uint64]bool{id("c1"): true}, g.cgroups(), "guarded again from the state")

	require.NoError(t, n.agent.RemoveContainer(context.Background(), pod(nil), ctr("c1")))
	assert.Empty(t, g.cgroups())

	// A guard that cannot take the cgroup: the start fails, unbound.
	g.err = errors.New("guard: the guard holds 4096 vGPU cgroups already")
	err := n.agent.StartContainer(context.Background(), pod(nil), ctr("c2"))
	require.ErrorContains(t, err, "4096 vGPU cgroups")
	assert.Empty(t, n.opts.Kmod.(*fakeKmod).list())
}

// guard: required on a node whose guard did not load: in either mode,
// a container asking for a vGPU by annotations and a DRA claim are
// refused with the guard's reason, and nothing is placed or bound; a
// container without a vGPU is left alone.
func TestGuardRequired(t *testing.T) {
	for _, mode := range []string{EnforceModule, EnforceFile} {
		t.Run(mode, func(t *testing.T) {
			n := newNode(t, mode, cards16(1, 4)...)
			n.opts.GuardErr = errors.New("guard: the BPF LSM is not active (active LSMs: lockdown,yama); add bpf to lsm=")
			n.restart(t)
			_, err := n.create(t, "c1", map[string]string{"gpuslice.io/gpu-memory": "1Gi"})
			require.Error(t, err)
			assert.Contains(t, err.Error(), "eBPF guard is not running")
			assert.Contains(t, err.Error(), "(guard: required)")
			assert.Contains(t, err.Error(), "the BPF LSM is not active")
			_, err = n.agent.PrepareClaim(claimReq("u1", 0, 1, 20))
			require.ErrorContains(t, err, "eBPF guard is not running")
			assert.Empty(t, n.opts.Store.All(), "nothing placed")
			if k, ok := n.opts.Kmod.(*fakeKmod); ok {
				assert.Empty(t, k.list())
			}
			adj, err := n.create(t, "plain", nil)
			require.NoError(t, err)
			assert.Nil(t, adj)
		})
	}
}

// Each refusal is one log line naming the container and the process.
func TestLogRefusals(t *testing.T) {
	n := newNode(t, EnforceModule, cards16(1, 4)...)
	var logs bytes.Buffer
	n.opts.Log = slog.New(slog.NewTextHandler(&logs, nil))
	n.opts.Guard = newFakeGuard()
	n.restart(t)
	_, err := n.create(t, "c1", map[string]string{"gpuslice.io/gpu-memory": "1Gi"})
	require.NoError(t, err)
	n.cgroup(t, "c1")
	require.NoError(t, n.agent.StartContainer(context.Background(), pod(nil), ctr("c1")))
	al, _ := n.opts.Store.Get("c1")

	logs.Reset() // the allocation's own lines name the container too
	rs := []guard.Refusal{{Cgroup: al.CgroupID, PID: 4242, Comm: "python", Op: "open", Major: 195, Minor: 255}}
	done := errors.New("guard closed")
	err = n.agent.LogRefusals(func() (guard.Refusal, error) {
		if len(rs) == 0 {
			return guard.Refusal{}, done
		}
		r := rs[0]
		rs = rs[1:]
		return r, nil
	})
	assert.ErrorIs(t, err, done)
	line := logs.String()
	assert.Contains(t, line, "the eBPF guard refused a GPU device")
	require.NotEmpty(t, al.Name)
	assert.Contains(t, line, "pod="+al.Namespace+"/"+al.Pod+" container="+al.Name+" id=c1 ")
	assert.Contains(t, line, "pid=4242 comm=python op=open device=195:255")
	assert.Equal(t, 1, strings.Count(line, "eBPF guard refused"))
}

// File mode: a started container's ledger directory is registered as its
// processes' proof, for its cgroup, and the cgroup guarded, before its
// first process runs; a restarted agent's new guard learns both again
// from the state, the directories first; the removal forgets both. A DRA
// claim's pod cgroup is guarded at its first container's start.
func TestFileGuard(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(1, 4)...)
	n.opts.CgroupID = func(dir string) (uint64, error) { return uint64(len(dir)), nil }
	g := newFakeGuard()
	n.opts.Guard = g
	n.restart(t)
	_, err := n.create(t, "c1", map[string]string{"gpuslice.io/gpu-memory": "1Gi"})
	require.NoError(t, err)
	assert.Empty(t, g.cgroups(), "nothing guarded before the start")
	require.NoError(t, n.agent.StartContainer(context.Background(), pod(nil), ctr("c1")))
	al, _ := n.opts.Store.Get("c1")
	id := uint64(len(filepath.Join(n.opts.Layout.CgroupRoot, "k8s.io", "c1")))
	assert.Equal(t, id, al.CgroupID, "recorded in the state")
	assert.Equal(t, map[uint64]bool{id: true}, g.cgroups())
	assert.Equal(t, map[string]uint64{al.LedgerDir: id}, g.ledgerDirs())
	// The first agent's start rescanned (nothing to find), then c1's.
	assert.Equal(t, []string{"rescan", "dir " + al.LedgerDir, fmt.Sprintf("cgroup %d", id)}, g.calls, "the proof before the guarding")

	_, err = n.agent.PrepareClaim(claimReq("u1", 0, 1, 0))
	require.NoError(t, err)
	p := claimPod("pa", nil)
	for _, c := range []string{"k1", "k2"} {
		_, err = n.createIn(t, p, claimCtr(c, "pa", "u1"))
		require.NoError(t, err)
		require.NoError(t, n.agent.StartContainer(context.Background(), p, claimCtr(c, "pa", "u1")))
	}
	claim, _ := n.agent.Claim("u1")
	podID := uint64(len(filepath.Join(n.opts.Layout.CgroupRoot, "kubepods/besteffort/podpa")))
	assert.Equal(t, podID, claim.CgroupID, "the pod's cgroup")
	assert.Equal(t, map[string]uint64{al.LedgerDir: id, claim.LedgerDir: podID}, g.ledgerDirs())

	g = newFakeGuard()
	n.opts.Guard = g
	n.restart(t)
	assert.Equal(t, map[uint64]bool{id: true, podID: true}, g.cgroups(), "guarded again from the state")
	assert.Equal(t, map[string]uint64{al.LedgerDir: id, claim.LedgerDir: podID}, g.ledgerDirs())
	require.Len(t, g.calls, 5)
	assert.Equal(t, "dir", g.calls[0][:3])
	assert.Equal(t, "dir", g.calls[1][:3], "every directory before any cgroup: %v", g.calls)
	assert.Equal(t, "rescan", g.calls[2], "the running processes' attachments before any cgroup: %v", g.calls)

	require.NoError(t, n.agent.RemoveContainer(context.Background(), pod(nil), ctr("c1")))
	n.agent.UnprepareClaim("u1")
	assert.Empty(t, g.cgroups())
	assert.Empty(t, g.ledgerDirs())
}
