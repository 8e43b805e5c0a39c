package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/pkg/status"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func ptr[T any](v T) *T { return &v }

const mb = 1 << 20

// nodes are the fixed reports the golden files show, by file name.
func nodes() map[string]*status.Node {
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	return map[string]*status.Node{
		// Module mode, two cards, every figure known; the vGPUs and the
		// cards out of order to show the table sorts them.
		"module": {
			Node: "gpu-node-1", Enforce: "module", Time: at,
			Guard: &status.Guard{Mode: "required", State: status.GuardOn,
				LostEvents: ptr(uint64(0)), BadMagic: ptr(uint64(0)), FilesFull: ptr(uint64(0))},
			Cards: []status.Card{
				{Index: 1, UUID: "GPU-9c0d11aa-2b3c-4d5e-8f90-123456789abc", Model: "Tesla T4",
					Policy: 0, MaxInst: 20, Healthy: ptr(false),
					MemoryTotalBytes: 15360 * mb, MemoryUsedBytes: ptr(uint64(1536 * mb)), UtilPercent: ptr(4.0),
					VGPUs: []status.VGPU{
						{ID: 7, Namespace: "web", Pod: "render-0", Container: "main", ContainerID: "c7",
							Mode: "memory", MemoryCapBytes: 1024 * mb, MemoryUsedBytes: ptr(uint64(1000 * mb)),
							CoreUsedPercent: ptr(3.25), Processes: ptr(1)},
						// A DRA claim's, shared by two containers of its pod.
						{ID: 8, Namespace: "web", Pod: "render-1", Container: "main,sidecar",
							ContainerID: "claim-3f1e", Claim: "web/render-1-gpu-x7k2p",
							Mode: "memory", MemoryCapBytes: 2048 * mb, MemoryUsedBytes: ptr(uint64(512 * mb)),
							Processes: ptr(2)},
					}},
				{Index: 0, UUID: "GPU-5f3e1a2b-0c4d-4e5f-9a6b-7c8d9e0f1a2b", Model: "NVIDIA A100-SXM4-40GB",
					Policy: 4, MaxInst: 20, Healthy: ptr(true),
					MemoryTotalBytes: 40960 * mb, MemoryUsedBytes: ptr(uint64(12288 * mb)), UtilPercent: ptr(37.4),
					VGPUs: []status.VGPU{
						{ID: 4, Namespace: "ml", Pod: "infer-7f9c", Container: "server", ContainerID: "c4",
							Mode: "compute", QuotaPercent: 20, MemoryCapBytes: 8192 * mb,
							MemoryUsedBytes: ptr(uint64(6144*mb + 512*1024)), CoreUsedPercent: ptr(19.96), Processes: ptr(3),
							GuardRefusals: ptr(uint64(14))},
						{ID: 3, Namespace: "default", Pod: "train", Container: "main", ContainerID: "c3",
							Mode: "compute", QuotaPercent: 30, HighPriority: true, MemoryCapBytes: 4096 * mb,
							MemoryUsedBytes: ptr(uint64(2048 * mb)), CoreUsedPercent: ptr(28.5), Processes: ptr(2),
							GuardRefusals: ptr(uint64(0))},
						{ID: 5, Namespace: "default", Pod: "train", Container: "sidecar", ContainerID: "c5",
							Mode: "compute", QuotaPercent: 5, MemoryCapBytes: 512 * mb,
							MemoryUsedBytes: ptr(uint64(0)), CoreUsedPercent: ptr(0.0), Processes: ptr(0)},
					}},
			},
		},
		// No module: vGPU ids -1, the figures the sources could not give
		// nil, one vGPU the agent knows only by container id.
		"file": {
			Node: "edge-3", Enforce: "file", Time: at,
			Guard: &status.Guard{Mode: "optional", State: status.GuardUnavailable,
				Reason: "the guard proves attachment through gpuslice.ko"},
			Cards: []status.Card{
				{Index: 0, UUID: "GPU-0badc0de-1111-2222-3333-444455556666", Model: "Tesla V100-PCIE-16GB",
					Policy: 5, MaxInst: 10, MemoryTotalBytes: 16384 * mb,
					VGPUs: []status.VGPU{
						{ID: -1, Namespace: "batch", Pod: "job-1", Container: "worker", ContainerID: "abc",
							Mode: "compute", QuotaPercent: 50, MemoryCapBytes: 2048 * mb},
						{ID: -1, ContainerID: "0123456789abcdef0123", Mode: "memory", MemoryCapBytes: 1024 * mb,
							MemoryUsedBytes: ptr(uint64(100 * mb)), Processes: ptr(1)},
					}},
				{Index: 1, UUID: "", Model: "", Policy: 2, MaxInst: 20, MemoryTotalBytes: 16384 * mb},
			},
		},
		// A node without cards.
		"empty": {Node: "cpu-only", Enforce: "file", Time: at},
		// Sources that failed: the figures missing and why, as warnings.
		"problems": {
			Node: "gpu-node-2", Enforce: "module", Time: at,
			Guard: &status.Guard{Mode: "required", State: status.GuardOn,
				LostEvents: ptr(uint64(2)), BadMagic: ptr(uint64(0)), FilesFull: ptr(uint64(1))},
			Cards: []status.Card{
				{Index: 0, UUID: "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", Model: "NVIDIA H100 80GB HBM3",
					Policy: 9, MaxInst: 20, Healthy: ptr(false), MemoryTotalBytes: 81559 * mb,
					VGPUs: []status.VGPU{
						{ID: 0, Namespace: "ml", Pod: "big", Container: "main", Mode: "compute",
							QuotaPercent: 100, MemoryCapBytes: 81559 * mb, Processes: ptr(1)},
					}},
			},
			Problems: []string{
				"NVML: nvmlDeviceGetUtilizationRates(card 0): GPU is lost",
				"gpuslice.ko statistics: open /proc/gpuslice/stats: permission denied",
			},
		},
	}
}

// TestRenderGolden compares the table of each fixed node with its golden
// file; go test ./cmd/gpuslice -run Golden -update rewrites them.
func TestRenderGolden(t *testing.T) {
	for name, node := range nodes() {
		t.Run(name, func(t *testing.T) {
			before, _ := json.Marshal(node)
			var out bytes.Buffer
			if err := render(&out, node); err != nil {
				t.Fatal(err)
			}
			after, _ := json.Marshal(node)
			if !bytes.Equal(before, after) {
				t.Error("render changed its input")
			}
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test -run Golden -update writes it)", err)
			}
			if got := out.String(); got != string(want) {
				t.Errorf("render(%s) differs from %s (-update rewrites it)\ngot:\n%s\nwant:\n%s", name, golden, got, want)
			}
		})
	}
}

// TestRenderDeterministic: the same node in any card and vGPU order
// renders the same.
func TestRenderDeterministic(t *testing.T) {
	node := nodes()["module"]
	var a bytes.Buffer
	if err := render(&a, node); err != nil {
		t.Fatal(err)
	}
	for i, j := 0, len(node.Cards)-1; i < j; i, j = i+1, j-1 {
		node.Cards[i], node.Cards[j] = node.Cards[j], node.Cards[i]
	}
	for _, c := range node.Cards {
		for i, j := 0, len(c.VGPUs)-1; i < j; i, j = i+1, j-1 {
			c.VGPUs[i], c.VGPUs[j] = c.VGPUs[j], c.VGPUs[i]
		}
	}
	var b bytes.Buffer
	if err := render(&b, node); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Errorf("order changed the output:\n%s\n---\n%s", a.String(), b.String())
	}
}

// TestRenderJSONRoundTrip: --json's output decodes back into the node it
// was made from, nil figures as null.
func TestRenderJSONRoundTrip(t *testing.T) {
	for name, node := range nodes() {
		var out bytes.Buffer
		if err := renderJSON(&out, node); err != nil {
			t.Fatal(err)
		}
		var back status.Node
		if err := json.Unmarshal(out.Bytes(), &back); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(&back, node) {
			t.Errorf("%s: decoded %+v, want %+v", name, back, *node)
		}
	}
	var out bytes.Buffer
	if err := renderJSON(&out, nodes()["file"]); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"memory_used_bytes": null`, `"util_percent": null`, `"healthy": null`, `"core_used_percent": null`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--json output lacks %s:\n%s", want, out.String())
		}
	}
}

func TestHelpers(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{policyName(0), "native"}, {policyName(4), "weighted preemptive"}, {policyName(6), "weighted weak"},
		{policyName(7), "unknown"}, {policyName(-1), "unknown"},
		{mib(0), "0"}, {mib(3 * mb), "3"}, {mib(3*mb + mb/2), "3.5"}, {mibp(nil), "-"},
		{shortUUID("GPU-5f3e1a2b-0c4d"), "GPU-5f3e1a2b"}, {shortUUID("MIG-1"), "MIG-1"}, {shortUUID(""), "-"},
		{plural(1, "card"), "1 card"}, {plural(0, "card"), "0 cards"},
		{readAt(time.Time{}), "-"},
		{readAt(time.Date(2025, 1, 2, 4, 4, 5, 0, time.FixedZone("CET", 3600))), "2025-01-02T03:04:05Z"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
