package cluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// series is the value of the agent's metric name for the pod's vGPU (its
// labels namespace, pod and container come from Kubernetes); ok is false
// when there is no such series.
func (n *node) series(name, ns, pod string) (v float64, ok bool, err error) {
	text, err := n.scrape()
	if err != nil {
		return 0, false, err
	}
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, `namespace="`+ns+`"`) ||
			!strings.Contains(line, `pod="`+pod+`"`) || !strings.Contains(line, `container="main"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		return v, err == nil, err
	}
	return 0, false, nil
}

// waitSeries waits until the pod's series of name has the value want.
func (n *node) waitSeries(t *testing.T, name, ns, pod string, want float64) {
	t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for {
		got, ok, err := n.series(name, ns, pod)
		if ok && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s of %s/%s: %v (there: %v, error %v); want %v\nagent log:\n%s",
				name, ns, pod, got, ok, err, want, n.agentLog())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// holdBytes is what the kept pod's process holds across the restarts.
const holdBytes = 1 << 30

// Restarting the agent (killed) and the kubelet with pods running keeps
// their vGPUs: the same records, the caps and quotas in the containers and
// the metrics, a process's memory still charged; deleting the pods then
// releases everything (records, ledger directories, CDI specs, metrics,
// the cards' modes).
func TestRestartsKeepVGPUs(t *testing.T) {
	n := theNode(t)
	ns := n.c.Namespace(t)
	template(t, n.c, ns, "six", vgpu{memory: "6Gi", cores: 20})
	n.run(t, ns, n.gpuPod("kept", "six"))
	// A process that holds 1 GiB in the background of the container,
	// until its stdin (a sleep's pipe) closes.
	if out, err := n.c.Exec(ns, "kept", "main", "sh", "-c",
		fmt.Sprintf("(sleep 100000 | %s/gstest hold %d) > /tmp/hold.out 2>&1 < /dev/null &", gsBin, holdBytes)); err != nil {
		t.Fatalf("starting gstest hold: %v\n%s", err, out)
	}
	held := func() {
		t.Helper()
		deadline := time.Now().Add(pollTimeout)
		for {
			out, _ := n.c.Exec(ns, "kept", "main", "cat", "/tmp/hold.out")
			if strings.Contains(out, "ready") && !strings.Contains(out, "hold:") { // hold: its exit
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("gstest hold is not holding: %q", out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	held()
	before := n.waitVGPUs(t, ns, "kept", 1)
	records, err := n.claimRecords()
	if err != nil || len(records) != 1 {
		t.Fatalf("the agent's claim records: %v, %v; want one", records, err)
	}
	n.waitSeries(t, "xgpu_memory_total", ns, "kept", 6*gib)
	n.waitSeries(t, "xgpu_core_percentage_total", ns, "kept", 20)
	var used float64
	deadline := time.Now().Add(pollTimeout)
	for {
		v, ok, err := n.series("xgpu_memory_used", ns, "kept")
		if ok && v >= holdBytes {
			used = v
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("xgpu_memory_used of kept: %v (there: %v, error %v); want at least the held %d\nagent log:\n%s",
				v, ok, err, holdBytes, n.agentLog())
		}
		time.Sleep(200 * time.Millisecond)
	}

	same := func(after string) {
		t.Helper()
		got := n.waitVGPUs(t, ns, "kept", 1)
		if got[0].Card != before[0].Card || got[0].MemoryCapBytes != before[0].MemoryCapBytes ||
			got[0].QuotaPercent != before[0].QuotaPercent || got[0].Claim != before[0].Claim {
			t.Errorf("after %s the vGPU is %+v; before it was %+v", after, got[0], before[0])
		}
		if r, err := n.claimRecords(); err != nil || !reflect.DeepEqual(r, records) {
			t.Errorf("after %s the claim records are %+v (%v); before %+v", after, r, err, records)
		}
		n.waitSeries(t, "xgpu_memory_total", ns, "kept", 6*gib)
		n.waitSeries(t, "xgpu_memory_used", ns, "kept", used)
		held()
		// The cap still counts the held memory: what is left fills
		// exactly, and one more unit is refused.
		n.checkVGPU(t, ns, "kept", 6144, 20)
		p, err := n.c.WaitPodRunning(ns, "kept")
		if err != nil {
			t.Fatal(err)
		}
		if rc := p.Status.ContainerStatuses[0].RestartCount; rc != 0 {
			t.Errorf("after %s kept's container restarted %d times", after, rc)
		}
	}
	n.restartAgent(t)
	same("the agent's restart")
	if err := n.c.RestartKubelet(); err != nil {
		t.Fatal(err)
	}
	same("the kubelet's restart")

	if err := n.c.DeletePod(ns, "kept"); err != nil {
		t.Fatal(err)
	}
	n.waitReleased(t, ns, "kept")
}

// waitReleased waits until nothing of the pod's claims is left on the
// node: no claim record, ledger directory or CDI spec, no vGPU or series,
// and both cards unused again.
func (n *node) waitReleased(t *testing.T, ns, pod string) {
	t.Helper()
	var last error
	deadline := time.Now().Add(pollTimeout)
	for time.Now().Before(deadline) {
		if last = n.released(ns, pod); last == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s/%s not released: %v\nagent log:\n%s", ns, pod, last, n.agentLog())
}

func (n *node) released(ns, pod string) error {
	if r, err := n.claimRecords(); err != nil || len(r) != 0 {
		return fmt.Errorf("claim records %v (%v)", r, err)
	}
	if ents, err := os.ReadDir(filepath.Join(n.dir, "ledger")); (err != nil && !os.IsNotExist(err)) || len(ents) != 0 {
		return fmt.Errorf("ledger directories %v (%v)", ents, err)
	}
	specs, err := filepath.Glob(filepath.Join(n.c.CDIDir(), driverName+"-*"))
	if err != nil || len(specs) != 0 {
		return fmt.Errorf("CDI specs %v (%v)", specs, err)
	}
	if v, err := n.vgpusOf(ns, pod); err != nil || len(v) != 0 {
		return fmt.Errorf("vGPUs %+v (%v)", v, err)
	}
	if v, ok, err := n.series("xgpu_memory_total", ns, pod); err != nil || ok {
		return fmt.Errorf("xgpu_memory_total %v (%v)", v, err)
	}
	return n.sliceIs(func(d []sliceDevice) error {
		for _, dev := range d {
			if dev.Mode != "unused" {
				return fmt.Errorf("card %d's mode %q", dev.Index, dev.Mode)
			}
		}
		return nil
	})
}

// sliceIs checks the published devices, once.
func (n *node) sliceIs(ok func([]sliceDevice) error) error {
	d, err := n.slice()
	if err != nil {
		return err
	}
	return ok(d)
}
