package cluster_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// waitVGPUs waits until the agent reports want vGPUs of the pod, and
// returns them.
func (n *node) waitVGPUs(t *testing.T, ns, pod string, want int) []cardVGPU {
	t.Helper()
	var got []cardVGPU
	var err error
	deadline := time.Now().Add(pollTimeout)
	for {
		got, err = n.vgpusOf(ns, pod)
		if err == nil && len(got) == want {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s: the agent reports vGPUs %+v (error %v); want %d\nagent log:\n%s",
				ns, pod, got, err, want, n.agentLog())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitCardCounts waits until every card holds the number of vGPUs want
// gives for its UUID (none for a card it does not name). The status is
// the agent's latest sample, taken every metrics window, so a pod that
// just turned Running may not be in it yet.
func (n *node) waitCardCounts(t *testing.T, want map[string]int) {
	t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for {
		s, err := n.status()
		var wrong []string
		if err == nil {
			for _, c := range s.Cards {
				if got := len(c.VGPUs); got != want[c.UUID] {
					wrong = append(wrong, fmt.Sprintf("card %d (%s) holds %d vGPUs; want %d",
						c.Index, c.UUID, got, want[c.UUID]))
				}
			}
		}
		if err == nil && len(wrong) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v (status error %v)", pollTimeout, wrong, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pending creates a pod of the template and waits until the scheduler
// says it cannot place it for want of devices ("cannot allocate all
// claims").
func (n *node) pending(t *testing.T, ns, pod, template, what string) {
	t.Helper()
	if _, err := n.c.CreatePod(ns, n.gpuPod(pod, template)); err != nil {
		t.Fatal(err)
	}
	why, err := n.c.WaitPodUnschedulable(ns, pod)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(why, "cannot allocate all claims") {
		t.Errorf("%s is unschedulable because %q; want the scheduler's \"cannot allocate all claims\"", what, why)
	}
}

// checkCap checks a vGPU of the agent's status against a claim's request.
func checkCap(t *testing.T, pod string, v cardVGPU, memMiB, cores int) {
	t.Helper()
	if v.MemoryCapBytes != uint64(memMiB)*mib || v.QuotaPercent != cores || v.Claim == "" {
		t.Errorf("%s's vGPU as the agent reports it: card %d, cap %d MiB, quota %d %%, claim %q; want %d MiB, %d %%, a claim",
			pod, v.Card, v.MemoryCapBytes/mib, v.QuotaPercent, v.Claim, memMiB, cores)
	}
}

// The stock kube-scheduler places claims of 10 GiB and 30 % on two 16 GiB
// cards by the capacities the driver publishes: the first two on
// different cards (a card has 6 GiB left after one), the third stays
// Pending with the scheduler's reason until one of the two goes. Each
// container sees its cap and quota, and the shim on the simulated driver
// allocates up to the cap and no further.
func TestSchedulerPlacesClaims(t *testing.T) {
	n := theNode(t)
	ns := n.c.Namespace(t)
	template(t, n.c, ns, "ten", vgpu{memory: "10Gi", cores: 30})
	n.run(t, ns, n.gpuPod("a", "ten"))
	n.run(t, ns, n.gpuPod("b", "ten"))
	onCard := map[int]string{}
	for _, pod := range []string{"a", "b"} {
		v := n.waitVGPUs(t, ns, pod, 1)[0]
		checkCap(t, pod, v, 10240, 30)
		onCard[v.Card] = pod
		n.checkVGPU(t, ns, pod, 10240, 30)
	}
	if len(onCard) != 2 {
		t.Fatalf("a and b on cards %v; want one each", onCard)
	}

	n.pending(t, ns, "c", "ten", "c")
	if vs, _ := n.vgpusOf(ns, "c"); len(vs) != 0 {
		t.Errorf("the Pending pod c has vGPUs %+v", vs)
	}

	freed := -1
	for card, pod := range onCard {
		if pod == "a" {
			freed = card
		}
	}
	if err := n.c.DeletePod(ns, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.c.WaitPodRunning(ns, "c"); err != nil {
		t.Fatalf("c after a's deletion: %v\nagent log:\n%s", err, n.agentLog())
	}
	v := n.waitVGPUs(t, ns, "c", 1)[0]
	checkCap(t, "c", v, 10240, 30)
	if v.Card != freed {
		t.Errorf("c runs on card %d; want %d, a's", v.Card, freed)
	}
	n.checkVGPU(t, ns, "c", 10240, 30)
}

// Twenty claims of 512 MiB fill one card's max_inst (20 vGPUs) though its
// memory has room; a 21st that only that card may take (a CEL selector on
// its UUID) stays Pending with the scheduler's reason.
func TestMaxInstByScheduler(t *testing.T) {
	n := theNode(t)
	ns := n.c.Namespace(t)
	devs, err := n.slice()
	if err != nil || len(devs) != 2 {
		t.Fatalf("the node's devices: %+v, %v", devs, err)
	}
	uuid := devs[0].UUID
	only := fmt.Sprintf("device.attributes['%s'].uuid == '%s'", driverName, uuid)
	template(t, n.c, ns, "small", vgpu{memory: "512Mi", cores: 0, cel: []string{only}})
	began := time.Now()
	for i := range 20 {
		if _, err := n.c.CreatePod(ns, n.gpuPod(fmt.Sprintf("p%02d", i), "small")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		if _, err := n.c.WaitPodRunning(ns, fmt.Sprintf("p%02d", i)); err != nil {
			t.Fatalf("%v\nagent log:\n%s", err, n.agentLog())
		}
	}
	t.Logf("20 vGPU pods Running in %.1f s", time.Since(began).Seconds())
	n.waitCardCounts(t, map[string]int{uuid: 20})
	n.checkVGPU(t, ns, "p07", 512, 0)

	n.pending(t, ns, "p20", "small", "the 21st")
}
