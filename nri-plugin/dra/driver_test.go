package dra

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/gpuslice/gpuslice/nri-plugin/agent"
	"github.com/gpuslice/gpuslice/pkg/placement"
	"github.com/gpuslice/gpuslice/pkg/state"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testNode is a node agent in no-module mode over two simulated 16 GiB
// cards (device nodes are links to /dev/null, a character device), with
// its DRA driver registered in a scratch kubelet root.
type testNode struct {
	dir    string
	agent  *agent.Agent
	store  *state.Store
	client *fake.Clientset
	driver *Driver
}

func newTestAgent(t testing.TB, dir string) (*agent.Agent, *state.Store) {
	t.Helper()
	root := filepath.Join(dir, "root")
	if _, err := os.Stat(root); err != nil { // a restart finds them there
		require.NoError(t, os.MkdirAll(filepath.Join(root, "dev"), 0o755))
		for _, d := range []string{"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"} {
			require.NoError(t, os.Symlink("/dev/null", filepath.Join(root, "dev", d)))
		}
		for _, f := range []string{"libgpuslice.so", "ld.so.preload"} {
			require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644))
		}
	}
	store, err := state.Open(filepath.Join(dir, "state"))
	require.NoError(t, err)
	a, err := agent.New(agent.Options{Cards: []agent.Card{simCard(0, 1), simCard(1, 1)}, SliceNs: 5e6,
		Strategy: placement.Binpack, Enforce: agent.EnforceFile, Store: store, Log: quiet,
		Layout: agent.Layout{ShimHost: filepath.Join(dir, "libgpuslice.so"),
			ShimContainer: "/usr/local/gpuslice/libgpuslice.so", PreloadHost: filepath.Join(dir, "ld.so.preload"),
			LedgerRoot: filepath.Join(dir, "ledger"), LedgerContainer: "/run/gpuslice/ledger",
			SchedRoot: filepath.Join(dir, "sched"), SchedContainer: "/run/gpuslice/sched", DeviceRoot: root}})
	require.NoError(t, err)
	return a, store
}

func startNode(t testing.TB) *testNode {
	t.Helper()
	// Short: the sockets' paths must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "dra")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	n := &testNode{dir: dir}
	n.client = fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node", UID: "node-uid"}})
	n.start(t)
	t.Cleanup(n.stop)
	return n
}

// start starts the agent and its driver over the node's directory.
func (n *testNode) start(t testing.TB) {
	t.Helper()
	n.agent, n.store = newTestAgent(t, n.dir)
	var err error
	n.driver, err = Start(context.Background(), Options{Agent: n.agent, NodeName: "node", Client: n.client,
		KubeletRootDir: filepath.Join(n.dir, "kubelet"), CDIDir: filepath.Join(n.dir, "cdi"), Log: quiet})
	require.NoError(t, err)
}

func (n *testNode) stop() {
	if n.driver != nil {
		n.driver.Stop()
		n.store.Close()
		n.driver = nil
	}
}

func dial(t testing.TB, path string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

// kubelet is the kubelet's side of the driver's two sockets, as the
// kubelet's plugin manager finds and uses them.
func (n *testNode) kubelet(t testing.TB) drapb.DRAPluginClient {
	t.Helper()
	ctx := context.Background()
	reg := registerapi.NewRegistrationClient(dial(t, filepath.Join(n.dir, "kubelet", "plugins_registry", "gpu.gpuslice.io-reg.sock")))
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	require.NoError(t, err)
	assert.Equal(t, "DRAPlugin", info.Type)
	assert.Equal(t, "gpu.gpuslice.io", info.Name)
	assert.Equal(t, filepath.Join(n.dir, "kubelet", "plugins", "gpu.gpuslice.io", "dra.sock"), info.Endpoint)
	assert.Contains(t, info.SupportedVersions, drapb.DRAPluginService)
	_, err = reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true})
	require.NoError(t, err)
	return drapb.NewDRAPluginClient(dial(t, info.Endpoint))
}

// claim stores an allocated claim of memory and cores on card, reserved
// for pod pod (a ReplicaSet's when owned).
func (n *testNode) claim(t testing.TB, name string, card int, memory, cores string, pod string, owned bool) *resourceapi.ResourceClaim {
	t.Helper()
	c := allocatedClaim([]resourceapi.DeviceRequestAllocationResult{result("gpu", card, memory, cores)})
	c.Name, c.UID = name, types.UID("uid-"+name)
	c.Status.ReservedFor[0].Name, c.Status.ReservedFor[0].UID = pod, types.UID("uid-"+pod)
	ctx := context.Background()
	c, err := n.client.ResourceV1().ResourceClaims("ns").Create(ctx, c, metav1.CreateOptions{})
	require.NoError(t, err)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: pod, UID: c.Status.ReservedFor[0].UID}}
	if owned {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs",
			UID: "rs-uid", Controller: ptrTrue()}}
	}
	_, err = n.client.CoreV1().Pods("ns").Create(ctx, p, metav1.CreateOptions{})
	require.NoError(t, err)
	return c
}

func ptrTrue() *bool { b := true; return &b }

func pbClaim(c *resourceapi.ResourceClaim) *drapb.Claim {
	return &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}
}

// slice waits for the published ResourceSlice whose card has mode.
func (n *testNode) slice(t *testing.T, card int, mode string) resourceapi.ResourceSlice {
	t.Helper()
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		list, err := n.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		require.NoError(t, err)
		if len(list.Items) == 1 {
			s := list.Items[0]
			last = *s.Spec.Devices[card].Attributes["mode"].StringValue
			if last == mode {
				return s
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("card %d's mode never became %q (last %q)", card, mode, last)
	return resourceapi.ResourceSlice{}
}

// The kubelet's whole conversation with the driver: registration, the
// published slice, a claim prepared (twice, and after an agent restart,
// once), its CDI spec, the slice republished with the card's new mode,
// and the claim unprepared (twice) with everything released.
func TestDriverWithTheKubelet(t *testing.T) {
	n := startNode(t)
	kubelet := n.kubelet(t)
	ctx := context.Background()

	s := n.slice(t, 0, "unused")
	assert.Equal(t, "gpu.gpuslice.io", s.Spec.Driver)
	assert.Equal(t, "node", *s.Spec.NodeName)
	assert.Equal(t, "node", s.Spec.Pool.Name)
	require.Len(t, s.Spec.Devices, 2)
	assert.Equal(t, []string{"gpu-0", "gpu-1"}, []string{s.Spec.Devices[0].Name, s.Spec.Devices[1].Name})

	c := n.claim(t, "train", 0, "10Gi", "30", "p1", false)
	req := &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{pbClaim(c)}}
	var first *drapb.NodePrepareResourceResponse
	for i := range 2 {
		resp, err := kubelet.NodePrepareResources(ctx, req)
		require.NoError(t, err)
		got := resp.Claims[string(c.UID)]
		require.NotNil(t, got)
		require.Empty(t, got.Error)
		require.Len(t, got.Devices, 1)
		d := got.Devices[0]
		assert.Equal(t, []string{"gpu"}, d.RequestNames)
		assert.Equal(t, "node", d.PoolName)
		assert.Equal(t, "gpu-0", d.DeviceName)
		assert.Equal(t, []string{"gpu.gpuslice.io/vgpu=uid-train"}, d.CdiDeviceIds)
		assert.Equal(t, "share-gpu", d.GetShareId())
		if i == 0 {
			first = got
		}
	}
	assert.Len(t, n.store.All(), 1, "prepared twice, recorded once")
	spec := filepath.Join(n.dir, "cdi", "gpu.gpuslice.io-vgpu_uid-train.json")
	assert.FileExists(t, spec)
	n.slice(t, 0, "compute")

	// The agent restarted, and the CDI spec lost (a reboot emptied
	// /var/run/cdi): the kubelet, registered again, prepares again; the
	// record answers and the spec is written again.
	n.stop()
	require.NoError(t, os.Remove(spec))
	n.start(t)
	kubelet = n.kubelet(t)
	resp, err := kubelet.NodePrepareResources(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, first.Devices[0].CdiDeviceIds, resp.Claims[string(c.UID)].Devices[0].CdiDeviceIds)
	assert.FileExists(t, spec)
	assert.Len(t, n.store.All(), 1, "the record of before the restart")
	n.slice(t, 0, "compute")

	unreq := &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{pbClaim(c)}}
	for range 2 {
		uresp, err := kubelet.NodeUnprepareResources(ctx, unreq)
		require.NoError(t, err)
		assert.Empty(t, uresp.Claims[string(c.UID)].Error)
	}
	assert.Empty(t, n.store.All())
	assert.NoFileExists(t, spec)
	n.slice(t, 0, "unused")
}

// Two claims of different modes allocated one unused card: the second
// prepare fails with the reason, the slice says the card's mode at once,
// and the losing pod is evicted when a controller owns it (its
// replacement is scheduled against the new slice), left alone when bare.
func TestDriverModeRace(t *testing.T) {
	for _, owned := range []bool{true, false} {
		t.Run("owned="+strconv.FormatBool(owned), func(t *testing.T) {
			n := startNode(t)
			kubelet := n.kubelet(t)
			ctx := context.Background()
			compute := n.claim(t, "compute", 0, "4Gi", "30", "p1", false)
			memory := n.claim(t, "memory", 0, "4Gi", "0", "p2", owned)
			resp, err := kubelet.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{
				Claims: []*drapb.Claim{pbClaim(compute)}})
			require.NoError(t, err)
			require.Empty(t, resp.Claims[string(compute.UID)].Error)
			n.client.ClearActions()

			resp, err = kubelet.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{
				Claims: []*drapb.Claim{pbClaim(memory)}})
			require.NoError(t, err)
			assert.Equal(t, `claim ns/memory: consumedCapacity.cores="0": card 0 runs compute-isolated vGPUs (one isolation mode per card)`,
				resp.Claims[string(memory.UID)].Error)
			n.slice(t, 0, "compute")
			_, ok := n.agent.Claim(string(memory.UID))
			assert.False(t, ok, "nothing recorded: the pod never runs there")

			n.driver.resch.wg.Wait()
			var evicted []string
			for _, a := range n.client.Actions() {
				if c, ok := a.(clienttesting.CreateAction); ok && a.GetSubresource() == "eviction" {
					evicted = append(evicted, c.GetObject().(metav1.Object).GetName())
				}
			}
			if owned {
				assert.Equal(t, []string{"p2"}, evicted)
			} else {
				assert.Empty(t, evicted, "a bare pod is not evicted: nothing would make it again")
			}
		})
	}
}
