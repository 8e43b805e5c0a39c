package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/containerd/nri/pkg/stub"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/pkg/simgpu"
)

// runtime is NRI's runtime side in process, with the agent connected to it
// over its socket through the NRI stub, as containerd would drive it.
type runtime struct {
	r    *adaptation.Adaptation
	node *testNode
}

func startRuntime(t testing.TB, n *testNode) *runtime {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "nri.sock")
	sync := func(ctx context.Context, cb adaptation.SyncCB) error {
		_, err := cb(ctx, nil, nil)
		return err
	}
	update := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}
	r, err := adaptation.New("test-runtime", "v0", sync, update, adaptation.WithSocketPath(sock),
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "conf.d")))
	require.NoError(t, err)
	require.NoError(t, r.Start())
	t.Cleanup(r.Stop)

	s, err := stub.New(n.agent, stub.WithPluginName("gpuslice"), stub.WithPluginIdx("50"),
		stub.WithSocketPath(sock))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = s.Run(ctx) }()

	rt := &runtime{r: r, node: n}
	// The runtime adds the plugin once its Synchronize returns: until then
	// a request with a vGPU comes back unadjusted.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := rt.create("probe", map[string]string{"gpuslice.io/gpu-memory": "1Mi"})
		if err == nil && env(resp.GetAdjust())["GPU_IDX"] != "" {
			break
		}
		require.True(t, time.Now().Before(deadline), "the agent never registered: %v", err)
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, rt.remove("probe"))
	return rt
}

func (rt *runtime) create(id string, ann map[string]string) (*adaptation.CreateContainerResponse, error) {
	return rt.r.CreateContainer(context.Background(), &adaptation.CreateContainerRequest{
		Pod: pod(ann), Container: ctr(id)})
}

func (rt *runtime) remove(id string) error {
	return rt.r.RemoveContainer(context.Background(), &adaptation.RemoveContainerRequest{
		Pod: pod(nil), Container: ctr(id)})
}

// Over the socket, each kind of request comes back as its adjustment and
// each refusal as the runtime's error, with the agent's message.
func TestThroughNRI(t *testing.T) {
	n := newNode(t, EnforceFile, cards16(3, 4)...)
	rt := startRuntime(t, n)
	tests := []struct {
		name    string
		ann     map[string]string
		wantEnv map[string]string
		wantErr []string
	}{
		{"memory only", map[string]string{"gpuslice.io/gpu-memory": "4096Mi"},
			map[string]string{"GPU_IDX": "0", "GPU_CONTAINER_MEM": "4096", "GPU_CONTAINER_QUOTA_PERCENT": "0"}, nil},
		{"cores and priority", map[string]string{"gpuslice.io/gpu-memory": "1Gi", "gpuslice.io/gpu-cores": "25", "gpuslice.io/gpu-priority": "high", "gpuslice.io/gpu-index": "1"},
			map[string]string{"GPU_IDX": "1", "GPU_CONTAINER_QUOTA_PERCENT": "25", "GPU_CONTAINER_PRIORITY": "1", "GPU_POLICY": "4"}, nil},
		{"two cards", map[string]string{"gpuslice.io/gpu-memory": "1Gi,2Gi", "gpuslice.io/gpu-cores": "10", "gpuslice.io/gpu-index": "2,1"},
			map[string]string{"GPU_IDX": "2,1", "GPU_CONTAINER_MEM": "1024,2048", "GPU_CONTAINER_QUOTA_PERCENT": "10,10",
				"GPUSLICE_CARD_UUIDS": simgpu.UUID(2) + "," + simgpu.UUID(1)}, nil},
		{"mixing modes", map[string]string{"gpuslice.io/gpu-memory": "1Gi", "gpuslice.io/gpu-index": "1"}, nil, []string{"gpuslice.io/gpu-cores", "isolation mode"}},
		{"per-container override", map[string]string{"gpuslice.io/gpu-memory": "1Gi", "gpuslice.io/gpu-memory/container.main": "3Gi"},
			map[string]string{"GPU_CONTAINER_MEM": "3072"}, nil},
		{"no request", map[string]string{"unrelated": "1"}, nil, nil},
		{"bad size", map[string]string{"gpuslice.io/gpu-memory": "lots"}, nil, []string{"gpuslice.io/gpu-memory", `"lots"`}},
		{"bad cores", map[string]string{"gpuslice.io/gpu-memory": "1Gi", "gpuslice.io/gpu-cores": "101"}, nil, []string{"gpuslice.io/gpu-cores", `"101"`}},
		{"over the card", map[string]string{"gpuslice.io/gpu-memory": "17Gi"}, nil, []string{"gpuslice.io/gpu-memory", `"17Gi"`}},
		{"unknown card", map[string]string{"gpuslice.io/gpu-memory": "1Gi", "gpuslice.io/gpu-index": "5"}, nil, []string{"gpuslice.io/gpu-index", `"5"`}},
		{"quota over 100", map[string]string{"gpuslice.io/gpu-memory": "1Gi", "gpuslice.io/gpu-cores": "100", "gpuslice.io/gpu-index": "1"}, nil, []string{"gpuslice.io/gpu-cores", `"100"`}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := rt.create("c"+strconv.Itoa(i), tc.ann)
			if tc.wantErr != nil {
				require.Error(t, err)
				for _, s := range tc.wantErr {
					assert.Contains(t, err.Error(), s)
				}
				return
			}
			require.NoError(t, err)
			if tc.wantEnv == nil {
				assert.Empty(t, resp.GetAdjust().GetEnv())
				assert.Empty(t, resp.GetAdjust().GetLinux().GetDevices())
				assert.Empty(t, resp.GetAdjust().GetMounts())
				return
			}
			got := env(resp.GetAdjust())
			for k, v := range tc.wantEnv {
				assert.Equal(t, v, got[k], k)
			}
			assert.Contains(t, devices(resp.GetAdjust()), "/dev/nvidiactl")
		})
	}
}

// BenchmarkCreateContainer is the agent's share of a container creation
// (parse, place, persist, adjust) through the NRI runtime, with 0, 20 and
// 200 vGPUs already placed on 10 cards; it reports p50 and p99.
func BenchmarkCreateContainer(b *testing.B) {
	for _, placed := range []int{0, 20, 200} {
		b.Run(fmt.Sprintf("placed=%d", placed), func(b *testing.B) {
			var cards []Card
			for i := range 10 {
				cards = append(cards, Card{Index: i, Minor: i, MemoryBytes: 80 * gib, Policy: 2, MaxInst: 64})
			}
			benchCreate(b, placed, cards)
		})
	}
}

func benchCreate(b *testing.B, placed int, cards []Card) {
	n := newNode(b, EnforceFile, cards...)
	// On a node the ledger root is under /run, a tmpfs; here /run may be a
	// disk, whose mkdir would be what this measures.
	shm, err := os.MkdirTemp("/dev/shm", "gpuslice-bench-")
	require.NoError(b, err)
	b.Cleanup(func() { os.RemoveAll(shm) })
	n.opts.Layout.LedgerRoot = shm
	n.restart(b)
	rt := startRuntime(b, n)
	ann := map[string]string{"gpuslice.io/gpu-memory": "256Mi"}
	for i := range placed {
		_, err := rt.create("placed"+strconv.Itoa(i), ann)
		require.NoError(b, err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		id := "bench" + strconv.Itoa(i)
		t0 := time.Now()
		_, err := rt.create(id, ann)
		lat = append(lat, time.Since(t0))
		require.NoError(b, err)
		b.StopTimer()
		require.NoError(b, rt.remove(id))
		b.StartTimer()
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
}

// quietLog keeps NRI's runtime and stub logs out of test output.
type quietLog struct{}

func (quietLog) Debugf(context.Context, string, ...any) {}
func (quietLog) Infof(context.Context, string, ...any)  {}
func (quietLog) Warnf(context.Context, string, ...any)  {}
func (quietLog) Errorf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	nrilog.Set(quietLog{})
	os.Exit(m.Run())
}
