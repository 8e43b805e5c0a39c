//go:build cgo

package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuslice/gpuslice/internal/testenv"
	"github.com/gpuslice/gpuslice/pkg/gpu"
	"github.com/gpuslice/gpuslice/pkg/metrics"
)

// The agent's observability end to end, no-module mode: containers
// created through NRI, real processes under the shim on the simulated
// GPU (simcuda) with the environment the agent returned, the agent's
// NVML monitor on the simulated libnvidia-ml.so.1, /metrics scraped over
// HTTP and parsed with expfmt.
const ctxMiB = 4 // GPUSLICE_CONTEXT_MIB: the shim's charge per context

func TestObserveEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the C artifacts")
	}
	require.NoError(t, testenv.BuildC())
	state := filepath.Join(t.TempDir(), "sim.state")
	sim := map[string]string{"SIMCUDA_STATE": state, "SIMCUDA_DEVICES": "2",
		"SIMCUDA_MEM_MIB": "16384,16384", "SIMCUDA_CONTEXT_MIB": strconv.Itoa(ctxMiB)}
	for k, v := range sim {
		t.Setenv(k, v) // the agent's NVML reads them at nvmlInit
	}
	// Card 0 under policy 1 (fixed shares), card 1 too.
	n := newNode(t, EnforceFile, cards16(2, 1)...)
	rt := startRuntime(t, n)
	url := observing(t, n, []int{0, 1}, ObserveOptions{Sched: ReadSchedFile})

	// "mem" holds memory on card 1; "tenant" computes on card 0 (a 30 %
	// quota under policy 1: it gets about 30 % of the card).
	memEnv := rt.createNamed(t, "c-mem", "mem", map[string]string{"gpuslice.io/gpu-memory": "1Gi",
		"gpuslice.io/gpu-cores": "20", "gpuslice.io/gpu-index": "1"}, n, sim)
	tenEnv := rt.createNamed(t, "c-tenant", "tenant", map[string]string{"gpuslice.io/gpu-memory": "1Gi",
		"gpuslice.io/gpu-cores": "30", "gpuslice.io/gpu-index": "0"}, n, sim)

	memLabels := map[string]string{"container": "mem", "card": "1"}
	tenLabels := map[string]string{"container": "tenant", "card": "0"}
	waitMetric(t, url, "xgpu_memory_total", memLabels, func(v float64) bool { return v == 1<<30 })
	waitMetric(t, url, "xgpu_memory_used", memLabels, func(v float64) bool { return v == 0 })
	waitMetric(t, url, "xgpu_core_percentage_total", tenLabels, func(v float64) bool { return v == 30 })
	waitMetric(t, url, "gpu_schedule_policy", map[string]string{"card": "0"}, func(v float64) bool { return v == 1 })
	waitMetric(t, url, "xgpu_node_vgpus", nil, func(v float64) bool { return v == 2 })

	// 64 MiB held: the vGPU shows it plus the context's charge; the card
	// (NVML, physical) shows the same bytes; freed at exit.
	hold := startProc(t, memEnv, "hold", strconv.Itoa(64<<20), "1")
	hold.await(t, "ready")
	want := float64((64 + ctxMiB) << 20)
	waitMetric(t, url, "xgpu_memory_used", memLabels, func(v float64) bool { return v == want })
	waitMetric(t, url, "xgpu_processes", memLabels, func(v float64) bool { return v == 1 })
	waitMetric(t, url, "xgpu_device_memory_used", map[string]string{"card": "1"}, func(v float64) bool { return v == want })
	waitMetric(t, url, "xgpu_device_vgpu_memory_ratio", map[string]string{"card": "1"},
		func(v float64) bool { return v == want/float64(16<<30) })
	hold.stop(t)
	waitMetric(t, url, "xgpu_memory_used", memLabels, func(v float64) bool { return v == 0 })

	// A launching tenant: its compute used is above 0 and near its share.
	ten := startProc(t, tenEnv, "tenant", "4", "1000", "2")
	waitMetric(t, url, "xgpu_core_percentage_used", tenLabels, func(v float64) bool { return v > 15 && v < 50 })
	waitMetric(t, url, "xgpu_device_utilization", map[string]string{"card": "0"}, func(v float64) bool { return v > 0 })
	ten.stop(t)

	// An XID on card 1 flips its health only.
	waitMetric(t, url, "xgpu_device_health", map[string]string{"card": "1"}, func(v float64) bool { return v == 0 })
	out, err := simCmd(sim, testenv.Bin("simcuda-xid"), "1", "79").CombinedOutput()
	require.NoError(t, err, "%s", out)
	waitMetric(t, url, "xgpu_device_health", map[string]string{"card": "1"}, func(v float64) bool { return v == 1 })
	waitMetric(t, url, "xgpu_device_health", map[string]string{"card": "0"}, func(v float64) bool { return v == 0 })

	// A removed container's series go.
	require.NoError(t, rt.r.RemoveContainer(context.Background(), &adaptation.RemoveContainerRequest{
		Pod: pod(nil), Container: &api.Container{Id: "c-mem", Name: "mem", PodSandboxId: "pod1"}}))
	deadline := time.Now().Add(time.Minute)
	for {
		fams := scrape(t, url)
		if find(fams, "xgpu_memory_total", memLabels) == nil {
			require.NotNil(t, find(fams, "xgpu_memory_total", tenLabels), "the other container stays")
			break
		}
		require.True(t, time.Now().Before(deadline), "the removed container's series stay")
		time.Sleep(50 * time.Millisecond)
	}
}

// observing starts the agent's observer of n, every 200 ms, on the
// simulated NVML's cards, and serves its /metrics: their URL.
func observing(t *testing.T, n *testNode, cards []int, o ObserveOptions) string {
	t.Helper()
	mon, err := gpu.OpenMonitor(filepath.Join(testenv.Lib(), "libnvidia-ml.so.1"), cards, n.opts.Log)
	require.NoError(t, err)
	t.Cleanup(func() { mon.Close() })
	o.Window, o.Cards = 200*time.Millisecond, mon
	ob := n.agent.Observe(o)
	t.Cleanup(ob.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := metrics.Serve(l, metrics.MetricsHandler(metrics.Registry(ob.Snapshot), n.opts.Log), "metrics", n.opts.Log)
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String() + "/metrics"
}

// createNamed creates container id (named name) through NRI and returns
// the environment of a process in it, on this host: the agent's
// variables with the container paths mapped to the host's, the shim
// preloaded and the simulated driver found.
func (rt *runtime) createNamed(t *testing.T, id, name string, ann map[string]string, n *testNode, sim map[string]string) []string {
	t.Helper()
	return rt.createIn(t, id, name, "", ann, n, sim)
}

// createIn is createNamed for a container whose cgroupsPath the runtime
// names ("" none).
func (rt *runtime) createIn(t *testing.T, id, name, cgroupsPath string, ann map[string]string, n *testNode,
	sim map[string]string) []string {
	t.Helper()
	c := &api.Container{Id: id, Name: name, PodSandboxId: "pod1"}
	if cgroupsPath != "" {
		c.Linux = &api.LinuxContainer{CgroupsPath: cgroupsPath}
	}
	resp, err := rt.r.CreateContainer(context.Background(), &adaptation.CreateContainerRequest{
		Pod: pod(ann), Container: c})
	require.NoError(t, err)
	e := env(resp.GetAdjust())
	require.Equal(t, "file", e["GPUSLICE_ENFORCE"])
	e["GPUSLICE_LEDGER_DIR"] = filepath.Join(n.opts.Layout.LedgerRoot, id)
	e["GPUSLICE_SCHED_DIR"] = n.opts.Layout.SchedRoot
	e["LD_PRELOAD"] = testenv.Shim()
	e["LD_LIBRARY_PATH"] = testenv.Lib()
	e["GPUSLICE_CONTEXT_MIB"] = strconv.Itoa(ctxMiB)
	delete(e, "NVIDIA_VISIBLE_DEVICES")
	for k, v := range sim {
		e[k] = v
	}
	out := []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range e {
		out = append(out, k+"="+v)
	}
	return out
}

func simCmd(sim map[string]string, bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+testenv.Lib())
	for k, v := range sim {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd
}

// proc is a gstest process.
type proc struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

func startProc(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(testenv.Bin("gstest"), args...), lines: make(chan string, 64)}
	p.cmd.Env = env
	var err error
	p.in, err = p.cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	p.cmd.Stderr = os.Stderr
	require.NoError(t, p.cmd.Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		close(p.lines)
	}()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); _ = p.cmd.Wait() })
	return p
}

func (p *proc) await(t *testing.T, line string) {
	t.Helper()
	p.next(t, fmt.Sprintf("%q", line), func(l string) bool { return l == line })
}

// next waits for the first line of stdout that match takes (what names it).
func (p *proc) next(t *testing.T, what string, match func(string) bool) string {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case l, ok := <-p.lines:
			require.True(t, ok, "gstest %v exited before %s", p.cmd.Args, what)
			if match(l) {
				return l
			}
		case <-deadline:
			t.Fatalf("gstest %v: no %s", p.cmd.Args, what)
		}
	}
}

// stop closes stdin (hold exits) or kills, and reaps.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.in.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// find is the value of the series of name whose labels include want.
func find(fams map[string]*dto.MetricFamily, name string, want map[string]string) *float64 {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		v := m.GetGauge().GetValue()
		return &v
	}
	return nil
}

// waitMetric polls /metrics until the series is there and ok(value).
func waitMetric(t *testing.T, url, name string, labels map[string]string, ok func(float64) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last *float64
	for {
		if last = find(scrape(t, url), name, labels); last != nil && ok(*last) {
			return
		}
		if time.Now().After(deadline) {
			if last == nil {
				t.Fatalf("%s%v: no series", name, labels)
			}
			t.Fatalf("%s%v: last value %v", name, labels, *last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
