package agent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/pkg/placement"
	"github.com/gpuslice/gpuslice/pkg/simgpu"
	"github.com/gpuslice/gpuslice/pkg/state"
)

const gib = uint64(1) << 30

// testNode is an agent over a scratch device root (nodes are symlinks to
// /dev/null, a character device), a shim file and a state directory.
type testNode struct {
	dir   string
	opts  Options
	agent *Agent
}

func newNode(t testing.TB, enforce string, cards ...Card) *testNode {
	t.Helper()
	dir := t.TempDir()
	n := &testNode{dir: dir}
	devs := []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "gpuslice"}
	for _, c := range cards {
		devs = append(devs, "nvidia"+strconv.Itoa(c.Minor))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "root", "dev"), 0o755))
	for _, d := range devs {
		require.NoError(t, os.Symlink("/dev/null", filepath.Join(dir, "root", "dev", d)))
	}
	shim := filepath.Join(dir, "libgpuslice.so")
	require.NoError(t, os.WriteFile(shim, []byte("shim"), 0o644))
	n.opts = Options{Cards: cards, SliceNs: 5e6, ReclaimNs: 250e6, Strategy: placement.Binpack, Enforce: enforce,
		Layout: Layout{ShimHost: shim, ShimContainer: "/usr/local/gpuslice/libgpuslice.so",
			LedgerRoot: filepath.Join(dir, "ledger"), LedgerContainer: "/run/gpuslice/ledger",
			SchedRoot: filepath.Join(dir, "sched"), SchedContainer: "/run/gpuslice/sched",
			DeviceRoot: filepath.Join(dir, "root"), CgroupRoot: filepath.Join(dir, "cgroup")},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if enforce == EnforceModule {
		n.opts.Kmod = newFakeKmod()
		n.opts.CgroupID = func(dir string) (uint64, error) {
			if _, err := os.Stat(dir); err != nil {
				return 0, err
			}
			return uint64(len(dir)), nil
		}
	}
	n.restart(t)
	return n
}

// restart is a new agent process over the same state, as after a crash.
func (n *testNode) restart(t testing.TB) {
	t.Helper()
	if n.opts.Store != nil {
		n.opts.Store.Close() // the old agent is gone, and its lock with it
	}
	store, err := state.Open(filepath.Join(n.dir, "state"))
	require.NoError(t, err)
	n.opts.Store = store
	n.agent, err = New(n.opts)
	require.NoError(t, err)
}

// cards16 is n simulated 16 GiB cards, each with the UUID the simulated
// driver gives its device (the shim of a test that runs processes matches
// devices to cards by it).
func cards16(n int, policy int) []Card {
	var out []Card
	for i := range n {
		out = append(out, Card{Index: i, UUID: simgpu.UUID(i), Minor: i, MemoryBytes: 16 * gib,
			Policy: policy, MaxInst: 20})
	}
	return out
}

func pod(ann map[string]string) *api.PodSandbox {
	return &api.PodSandbox{Id: "pod1", Name: "p", Namespace: "ns", Uid: "uid", Annotations: ann}
}

func ctr(id string) *api.Container {
	return &api.Container{Id: id, Name: "main", PodSandboxId: "pod1",
		Env:   []string{"PATH=/bin", "LD_PRELOAD=/lib/libimage.so"},
		Linux: &api.LinuxContainer{CgroupsPath: "/k8s.io/" + id}}
}

func (n *testNode) create(t *testing.T, id string, ann map[string]string) (*api.ContainerAdjustment, error) {
	t.Helper()
	adj, upd, err := n.agent.CreateContainer(context.Background(), pod(ann), ctr(id))
	assert.Nil(t, upd)
	return adj, err
}

func env(adj *api.ContainerAdjustment) map[string]string {
	out := map[string]string{}
	for _, kv := range adj.GetEnv() {
		out[kv.GetKey()] = kv.GetValue()
	}
	return out
}

func devices(adj *api.ContainerAdjustment) []string {
	var out []string
	for _, d := range adj.GetLinux().GetDevices() {
		out = append(out, d.GetPath())
	}
	return out
}

func mounts(adj *api.ContainerAdjustment) map[string]*api.Mount {
	out := map[string]*api.Mount{}
	for _, m := range adj.GetMounts() {
		out[m.GetDestination()] = m
	}
	return out
}

func TestNoRequestIsUntouched(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(1, 1)...)
	adj, err := n.create(t, "c1", map[string]string{"other": "x"})
	require.NoError(t, err)
	assert.Nil(t, adj)
	assert.Empty(t, n.opts.Store.All())
}

func TestAdjustmentFileMode(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(2, 1)...)
	adj, err := n.create(t, "c1", map[string]string{
		"gpuslice.io/gpu-memory": "4Gi", "gpuslice.io/gpu-cores": "30"})
	require.NoError(t, err)
	e := env(adj)
	assert.Equal(t, map[string]string{
		"GPU_IDX": "0", "GPU_CONTAINER_MEM": "4096", "GPU_CONTAINER_QUOTA_PERCENT": "30",
		"GPU_POLICY": "1", "GPU_CONTAINER_PRIORITY": "0", "GPUSLICE_ENFORCE": "file",
		"GPUSLICE_LEDGER_DIR": "/run/gpuslice/ledger", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
		"GPUSLICE_SCHED_DIR": "/run/gpuslice/sched", "GPUSLICE_VGPU": "c1",
		"GPUSLICE_MAX_INST": "20", "GPUSLICE_SLICE_MS": "5", "GPUSLICE_RECLAIM_MS": "250",
		"LD_PRELOAD":             "/usr/local/gpuslice/libgpuslice.so:/lib/libimage.so",
		"NVIDIA_VISIBLE_DEVICES": simgpu.UUID(0),
		"GPUSLICE_CARD_UUIDS":    simgpu.UUID(0),
	}, e)
	assert.Equal(t, []string{"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}, devices(adj))
	for _, d := range adj.GetLinux().GetDevices() {
		assert.Equal(t, "c", d.GetType())
		assert.Equal(t, int64(1), d.GetMajor(), "/dev/null's major")
		assert.Equal(t, int64(3), d.GetMinor(), "/dev/null's minor")
	}
	m := mounts(adj)
	require.Contains(t, m, "/usr/local/gpuslice/libgpuslice.so")
	assert.Contains(t, m["/usr/local/gpuslice/libgpuslice.so"].GetOptions(), "ro")
	require.Contains(t, m, "/run/gpuslice/sched")
	assert.Equal(t, n.opts.Layout.SchedRoot, m["/run/gpuslice/sched"].GetSource())
	require.Contains(t, m, "/run/gpuslice/ledger")
	ledger := m["/run/gpuslice/ledger"].GetSource()
	st, err := os.Stat(ledger)
	require.NoError(t, err)
	assert.Equal(t, os.ModeDir|os.ModeSticky|0o777, st.Mode(), "every user of the container writes its ledger")
	assert.NotContains(t, m, "/etc/ld.so.preload")

	// Removing the container releases it all.
	require.NoError(t, n.agent.RemoveContainer(context.Background(), pod(nil), ctr("c1")))
	assert.NoDirExists(t, ledger)
	assert.Empty(t, n.opts.Store.All())
}

// The reclaim window in whole ms (at least 1); without one (0) the shim
// keeps its default, as the module does.
func TestAdjustmentReclaimWindow(t *testing.T) {
	for _, tc := range []struct {
		ns   uint64
		want string // "": not set
	}{
		{10e9, "10000"},
		{1e6, "1"},
		{5e5, "1"},
		{0, ""},
	} {
		n := newNode(t, EnforceFile, cards16(1, 1)...)
		n.opts.ReclaimNs = tc.ns
		n.restart(t)
		adj, err := n.create(t, "c1", map[string]string{"gpuslice.io/gpu-memory": "1Gi", "gpuslice.io/gpu-cores": "30"})
		require.NoError(t, err)
		v, ok := env(adj)["GPUSLICE_RECLAIM_MS"]
		assert.Equal(t, tc.want != "", ok, "%d ns", tc.ns)
		assert.Equal(t, tc.want, v, "%d ns", tc.ns)
	}
}

func TestPreloadFileAndCDI(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(2, 1)...)
	n.opts.Layout.PreloadHost = filepath.Join(n.dir, "ld.so.preload")
	n.opts.Layout.PreloadAnnotated = true
	n.opts.CDI = func(c Card) string {
		if c.Index == 1 {
			return "nvidia.com/gpu=1"
		}
		return ""
	}
	n.restart(t)
	adj, err := n.create(t, "c1", map[string]string{"gpuslice.io/gpu-memory": "1Gi,1Gi"})
	require.NoError(t, err)
	assert.Equal(t, "0,1", env(adj)["GPU_IDX"])
	assert.Contains(t, mounts(adj), "/etc/ld.so.preload")
	var cdi []string
	for _, d := range adj.GetCDIDevices() {
		cdi = append(cdi, d.GetName())
	}
	assert.Equal(t, []string{"nvidia.com/gpu=1"}, cdi)
	assert.Equal(t, []string{"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}, devices(adj))
}

// Each refusal fails the creation with one message naming the annotation
// and the value, and records nothing.
func TestRefusals(t *testing.T) {
	tests := []struct {
		name   string
		policy int
		ann    map[string]string
		want   []string // substrings of the error
	}{
		{"malformed size", 1, map[string]string{"gpuslice.io/gpu-memory": "4GB"}, []string{"gpuslice.io/gpu-memory", `"4GB"`}},
		{"cores not a step of 5", 1, map[string]string{"gpuslice.io/gpu-memory": "1Gi", "gpuslice.io/gpu-cores": "33"}, []string{"gpuslice.io/gpu-cores", `"33"`, "5"}},
		{"memory over the card", 1, map[string]string{"gpuslice.io/gpu-memory": "64Gi"}, []string{"gpuslice.io/gpu-memory", `"64Gi"`}},
		{"unknown card", 1, map[string]string{"gpuslice.io/gpu-memory": "1Gi", "gpuslice.io/gpu-index": "7"}, []string{"gpuslice.io/gpu-index", `"7"`}},
		{"high priority under hybrid", 5, map[string]string{"gpuslice.io/gpu-memory": "1Gi", "gpuslice.io/gpu-cores": "30", "gpuslice.io/gpu-priority": "high"}, []string{"gpuslice.io/gpu-priority", "hybrid"}},
		{"cores on a native card", 0, map[string]string{"gpuslice.io/gpu-memory": "1Gi", "gpuslice.io/gpu-cores": "30"}, []string{"gpuslice.io/gpu-cores", "native"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, EnforceFile, cards16(2, tc.policy)...)
			_, err := n.create(t, "c1", tc.ann)
			require.Error(t, err)
			for _, s := range tc.want {
				assert.Contains(t, err.Error(), s)
			}
			assert.Empty(t, n.opts.Store.All())
			entries, _ := os.ReadDir(n.opts.Layout.LedgerRoot)
			assert.Empty(t, entries, "no ledger directory left")
		})
	}
}

func TestMaxInstAndModes(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(1, 1)...)
	mem := map[string]string{"gpuslice.io/gpu-memory": "512Mi"}
	for i := range 20 {
		_, err := n.create(t, "m"+strconv.Itoa(i), mem)
		require.NoError(t, err, "vGPU %d", i+1)
	}
	_, err := n.create(t, "m21", mem)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "20")

	// One isolation mode per card: memory-only vGPUs hold card 0.
	_, err = n.create(t, "c1", map[string]string{"gpuslice.io/gpu-memory": "1Gi", "gpuslice.io/gpu-cores": "10", "gpuslice.io/gpu-index": "0"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "gpuslice.io/gpu-cores")
}

// The same container created again (a retried create) gets the same
// allocation, not a second one.
func TestCreateIsIdempotent(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(2, 1)...)
	ann := map[string]string{"gpuslice.io/gpu-memory": "10Gi"}
	a1, err := n.create(t, "c1", ann)
	require.NoError(t, err)
	a2, err := n.create(t, "c1", ann)
	require.NoError(t, err)
	assert.Equal(t, env(a1), env(a2))
	assert.Len(t, n.opts.Store.All(), 1)
}

// A restarted agent keeps every allocation and places around them; one
// whose container went away meanwhile is released by Synchronize.
func TestRestartAndReconcile(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(2, 1)...)
	ann := map[string]string{"gpuslice.io/gpu-memory": "6Gi"}
	for _, id := range []string{"a", "b"} {
		_, err := n.create(t, id, ann)
		require.NoError(t, err)
	}
	gone, _ := n.opts.Store.Get("b")

	n.restart(t)
	_, err := n.agent.Synchronize(context.Background(), nil, []*api.Container{ctr("a")})
	require.NoError(t, err)
	all := n.opts.Store.All()
	require.Len(t, all, 1)
	assert.Equal(t, "a", all[0].Container)
	assert.NoDirExists(t, gone.LedgerDir)

	// Binpack: a (6 GiB on card 0) is still there, so 6 GiB more fit on
	// card 0 and the next 6 GiB go to card 1.
	adj, err := n.create(t, "c", ann)
	require.NoError(t, err)
	assert.Equal(t, "0", env(adj)["GPU_IDX"])
	adj, err = n.create(t, "d", ann)
	require.NoError(t, err)
	assert.Equal(t, "1", env(adj)["GPU_IDX"])
}

// A stopped container never runs again (CRI restarts are new containers):
// its vGPU is released at once, not when the kubelet removes it.
func TestStopReleases(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(1, 1)...)
	ann := map[string]string{"gpuslice.io/gpu-memory": "16Gi"}
	_, err := n.create(t, "c1", ann)
	require.NoError(t, err)
	_, err = n.create(t, "c2", ann)
	require.Error(t, err, "the card is full")
	upd, err := n.agent.StopContainer(context.Background(), pod(nil), ctr("c1"))
	require.NoError(t, err)
	assert.Nil(t, upd)
	_, err = n.create(t, "c2", ann)
	require.NoError(t, err, "the restart's new container fits")
	require.NoError(t, n.agent.RemoveContainer(context.Background(), pod(nil), ctr("c1")), "removal after stop")
	assert.Len(t, n.opts.Store.All(), 1)
}

func TestLedgerRootIsPrivateAndIDsChecked(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(1, 1)...)
	st, err := os.Stat(n.opts.Layout.LedgerRoot)
	require.NoError(t, err)
	assert.Equal(t, os.ModeDir|0o700, st.Mode())
	_, _, err = n.agent.CreateContainer(context.Background(),
		pod(map[string]string{"gpuslice.io/gpu-memory": "1Gi"}), ctr("../escape"))
	require.Error(t, err)
	assert.Empty(t, n.opts.Store.All())
}
