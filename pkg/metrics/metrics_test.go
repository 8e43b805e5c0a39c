package metrics

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/pkg/status"
)

func p[T any](v T) *T { return &v }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func node() *status.Node {
	return &status.Node{Node: "n1", Enforce: "file", Time: time.Unix(1, 0).UTC(), Problems: []string{"x"},
		Guard: &status.Guard{Mode: "required", State: status.GuardOn, LostEvents: p(uint64(0)),
			BadMagic: p(uint64(0)), FilesFull: p(uint64(3))},
		Cards: []status.Card{
			{Index: 0, UUID: "GPU-a", Policy: 1, MaxInst: 20, Healthy: p(true), MemoryTotalBytes: 16 << 30,
				MemoryUsedBytes: p(uint64(3 << 30)), UtilPercent: p(50.0), VGPUs: []status.VGPU{
					{ID: -1, Namespace: "ns", Pod: "a", Container: "main", ContainerID: "c1", Mode: "compute",
						QuotaPercent: 30, MemoryCapBytes: 4 << 30, MemoryUsedBytes: p(uint64(1 << 30)),
						CoreUsedPercent: p(29.5), Processes: p(2),
						MemoryDriverBytes: p(uint64(3 << 29)), MemoryUnseenBytes: p(uint64(1 << 29)),
						GuardRefusals: p(uint64(12))},
					{ID: -1, Namespace: "ns", Pod: "b", Container: "main", ContainerID: "c2", Mode: "compute",
						QuotaPercent: 20, MemoryCapBytes: 2 << 30, MemoryUsedBytes: p(uint64(1 << 29)), Processes: p(1)},
				}},
			// NVML failed for card 1; one vGPU's ledger unreadable.
			{Index: 1, UUID: "GPU-b", MemoryTotalBytes: 8 << 30, VGPUs: []status.VGPU{
				{ID: 3, Namespace: "ns", Pod: "c", Container: "main", Mode: "memory", MemoryCapBytes: 1 << 30},
				// Same names, another container id (a restart): one series.
				{ID: 3, Namespace: "ns", Pod: "c", Container: "main", Mode: "memory", MemoryCapBytes: 1 << 30},
			}},
			{Index: 2, UUID: "GPU-c", MemoryTotalBytes: 8 << 30, Healthy: p(false), VGPUs: []status.VGPU{}},
		}}
}

const want = `
# HELP gpu_schedule_policy Card isolation: 0 memory isolation + shared compute, 1 memory + compute isolation, 2 card not yet used for vGPUs.
# TYPE gpu_schedule_policy gauge
gpu_schedule_policy{card="0",uuid="GPU-a"} 1
gpu_schedule_policy{card="1",uuid="GPU-b"} 0
gpu_schedule_policy{card="2",uuid="GPU-c"} 2
# HELP xgpu_core_percentage_total vGPU compute quota, percent of the card (0: memory isolation only).
# TYPE xgpu_core_percentage_total gauge
xgpu_core_percentage_total{card="0",container="main",namespace="ns",pod="a",uuid="GPU-a",vgpu="-1"} 30
xgpu_core_percentage_total{card="0",container="main",namespace="ns",pod="b",uuid="GPU-a",vgpu="-1"} 20
xgpu_core_percentage_total{card="1",container="main",namespace="ns",pod="c",uuid="GPU-b",vgpu="3"} 0
# HELP xgpu_core_percentage_used vGPU compute used over the agent's sampling window: busy time / window, percent of the card.
# TYPE xgpu_core_percentage_used gauge
xgpu_core_percentage_used{card="0",container="main",namespace="ns",pod="a",uuid="GPU-a",vgpu="-1"} 29.5
# HELP xgpu_device_health Card health: 0 healthy, 1 unhealthy (a critical XID).
# TYPE xgpu_device_health gauge
xgpu_device_health{card="0",uuid="GPU-a"} 0
xgpu_device_health{card="2",uuid="GPU-c"} 1
# HELP xgpu_device_memory_total Card memory, bytes.
# TYPE xgpu_device_memory_total gauge
xgpu_device_memory_total{card="0",uuid="GPU-a"} 1.7179869184e+10
xgpu_device_memory_total{card="1",uuid="GPU-b"} 8.589934592e+09
xgpu_device_memory_total{card="2",uuid="GPU-c"} 8.589934592e+09
# HELP xgpu_device_memory_used Card memory in use by all processes (NVML), bytes.
# TYPE xgpu_device_memory_used gauge
xgpu_device_memory_used{card="0",uuid="GPU-a"} 3.221225472e+09
# HELP xgpu_device_utilization Card utilization (NVML), percent of its last sample period with a kernel running.
# TYPE xgpu_device_utilization gauge
xgpu_device_utilization{card="0",uuid="GPU-a"} 50
# HELP xgpu_device_vgpu_memory_ratio Sum of the card's vGPU memory used / card memory, 0-1.
# TYPE xgpu_device_vgpu_memory_ratio gauge
xgpu_device_vgpu_memory_ratio{card="0",uuid="GPU-a"} 0.09375
xgpu_device_vgpu_memory_ratio{card="2",uuid="GPU-c"} 0
# HELP xgpu_device_vgpus vGPUs on the card.
# TYPE xgpu_device_vgpus gauge
xgpu_device_vgpus{card="0",uuid="GPU-a"} 2
xgpu_device_vgpus{card="1",uuid="GPU-b"} 2
xgpu_device_vgpus{card="2",uuid="GPU-c"} 0
# HELP xgpu_guard_refusals_total Opens, ioctls and mmaps of the NVIDIA device nodes the guard refused to the container's processes that are not attached to its vGPU (started without the shim).
# TYPE xgpu_guard_refusals_total counter
xgpu_guard_refusals_total{card="0",container="main",namespace="ns",pod="a",uuid="GPU-a",vgpu="-1"} 12
# HELP xgpu_memory_driver_used Device memory the driver reports for the container's processes on the card (NVML's running processes), bytes.
# TYPE xgpu_memory_driver_used gauge
xgpu_memory_driver_used{card="0",container="main",namespace="ns",pod="a",uuid="GPU-a",vgpu="-1"} 1.610612736e+09
# HELP xgpu_memory_total vGPU memory cap, bytes.
# TYPE xgpu_memory_total gauge
xgpu_memory_total{card="0",container="main",namespace="ns",pod="a",uuid="GPU-a",vgpu="-1"} 4.294967296e+09
xgpu_memory_total{card="0",container="main",namespace="ns",pod="b",uuid="GPU-a",vgpu="-1"} 2.147483648e+09
xgpu_memory_total{card="1",container="main",namespace="ns",pod="c",uuid="GPU-b",vgpu="3"} 1.073741824e+09
# HELP xgpu_memory_unseen Driver-reported vGPU memory beyond what the container's processes charged, counted against the cap from the next allocation on, bytes.
# TYPE xgpu_memory_unseen gauge
xgpu_memory_unseen{card="0",container="main",namespace="ns",pod="a",uuid="GPU-a",vgpu="-1"} 5.36870912e+08
# HELP xgpu_memory_used vGPU memory in use by the container's processes, bytes.
# TYPE xgpu_memory_used gauge
xgpu_memory_used{card="0",container="main",namespace="ns",pod="a",uuid="GPU-a",vgpu="-1"} 1.073741824e+09
xgpu_memory_used{card="0",container="main",namespace="ns",pod="b",uuid="GPU-a",vgpu="-1"} 5.36870912e+08
# HELP xgpu_node_guard The eBPF guard: 1 while it keeps the GPU from processes that bypass the shim, 0 when it does not run (state off: configured off; unavailable: it could not run, the status says why).
# TYPE xgpu_node_guard gauge
xgpu_node_guard{mode="required",state="on"} 1
# HELP xgpu_node_guard_lost_total What the guard lost: events (refusals not logged, still refused), bad_magic (a gpuslice.ko without the guard word: its processes are refused), files_full (attachments not recorded: refused).
# TYPE xgpu_node_guard_lost_total counter
xgpu_node_guard_lost_total{kind="bad_magic"} 0
xgpu_node_guard_lost_total{kind="events"} 0
xgpu_node_guard_lost_total{kind="files_full"} 3
# HELP xgpu_node_source_problems Sources that failed at the last sample (their series are absent; the agent's log says why).
# TYPE xgpu_node_source_problems gauge
xgpu_node_source_problems 1
# HELP xgpu_node_vgpu_memory_allocated vGPU memory allocated on the node (sum of the caps), bytes.
# TYPE xgpu_node_vgpu_memory_allocated gauge
xgpu_node_vgpu_memory_allocated 8.589934592e+09
# HELP xgpu_node_vgpus vGPUs on the node.
# TYPE xgpu_node_vgpus gauge
xgpu_node_vgpus 4
# HELP xgpu_processes Processes holding the vGPU.
# TYPE xgpu_processes gauge
xgpu_processes{card="0",container="main",namespace="ns",pod="a",uuid="GPU-a",vgpu="-1"} 2
xgpu_processes{card="0",container="main",namespace="ns",pod="b",uuid="GPU-a",vgpu="-1"} 1
`

// Every series from a snapshot; a nil figure is an absent series (card 1
// has no NVML figures, card 1's ratio is unknown, pod b has no compute
// figure and no driver figure), never a zero.
func TestCollect(t *testing.T) {
	n := node()
	reg := Registry(func() *status.Node { return n })
	assert.Equal(t, strings.TrimPrefix(want, "\n"), gatherText(t, reg))
}

// gatherText is the registry's text exposition, as /metrics serves it.
func gatherText(t testing.TB, reg prometheus.Gatherer) string {
	fams, err := reg.Gather()
	require.NoError(t, err)
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		require.NoError(t, enc.Encode(f))
	}
	return buf.String()
}

func TestCollectNothingYet(t *testing.T) {
	reg := Registry(func() *status.Node { return nil })
	fams, err := reg.Gather()
	require.NoError(t, err)
	assert.Empty(t, fams)
}

func TestStatusHandler(t *testing.T) {
	var cur *status.Node
	h := StatusHandler(func() *status.Node { return cur })
	sock := filepath.Join(t.TempDir(), "run", "agent.sock")
	l, err := ListenUnix(sock)
	require.NoError(t, err)
	srv := Serve(l, h, "status", quiet)
	defer srv.Close()
	st, err := os.Stat(sock)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o660), st.Mode().Perm())

	client := &http.Client{Transport: &http.Transport{DialContext: func(_ context.Context, _, _ string) (net.Conn, error) {
		return net.Dial("unix", sock)
	}}}
	get := func() (*http.Response, []byte) {
		resp, err := client.Get("http://agent" + StatusPath)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, b
	}
	resp, _ := get()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "no sample yet")
	cur = node()
	resp, b := get()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var got status.Node
	require.NoError(t, json.Unmarshal(b, &got))
	assert.Equal(t, *cur, got)
	assert.Contains(t, string(b), `"memory_used_bytes": null`, "unknown is null")

	resp, err = client.Post("http://agent"+StatusPath, "text/plain", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)

	// A second agent does not steal the live socket.
	_, err = ListenUnix(sock)
	require.ErrorContains(t, err, "another agent answers on it")
	srv.Close()
	// A stale one (no one answers) is replaced.
	l, err = ListenUnix(sock)
	require.NoError(t, err)
	l.Close()
	// Anything else in the way is left alone.
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err = ListenUnix(file)
	require.ErrorContains(t, err, "not a socket")
}

// BenchmarkScrape is one scrape of 20 cards x 20 vGPUs through the
// registry and the text encoding, as /metrics serves it.
func BenchmarkScrape(b *testing.B) {
	n := &status.Node{Node: "bench", Enforce: "module"}
	for c := range 20 {
		card := status.Card{Index: c, UUID: fmt.Sprintf("GPU-%08x-0000-4000-8000-000000000000", c),
			Policy: 4, MaxInst: 20, Healthy: p(true), MemoryTotalBytes: 80 << 30,
			MemoryUsedBytes: p(uint64(40 << 30)), UtilPercent: p(73.0)}
		for v := range 20 {
			card.VGPUs = append(card.VGPUs, status.VGPU{ID: v, Namespace: "team-" + fmt.Sprint(v%4),
				Pod: fmt.Sprintf("train-%d-%d", c, v), Container: "main", Mode: "compute", QuotaPercent: 5,
				MemoryCapBytes: 4 << 30, MemoryUsedBytes: p(uint64(2 << 30)), CoreUsedPercent: p(4.9), Processes: p(1)})
		}
		n.Cards = append(n.Cards, card)
	}
	reg := Registry(func() *status.Node { return n })
	var buf bytes.Buffer
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		buf.Reset()
		fams, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, f := range fams {
			if err := enc.Encode(f); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(buf.Len()), "bytes/scrape")
}
