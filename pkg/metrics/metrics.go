// Package metrics exports the node's vGPU picture (package status) to
// Prometheus. The Collector turns the latest status.Node snapshot into
// constant metrics at each scrape: sampling (NVML, the module's
// statistics, the ledger and schedule files) happens elsewhere, in the
// background, so a scrape costs only the encoding.
//
// A figure the snapshot lacks (nil: its source failed) is left out: an
// absent series, never a made-up zero.
package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuslice/gpuslice/pkg/status"
)

// The label names. No label takes unbounded values (no container id):
// a vGPU is named by its pod, container and card.
var (
	vgpuLabels = []string{"namespace", "pod", "container", "card", "uuid", "vgpu"}
	cardLabels = []string{"card", "uuid"}
)

// The series, by name (reference.md section 5 for the xgpu_* seed names).
var (
	memoryTotal = prometheus.NewDesc("xgpu_memory_total",
		"vGPU memory cap, bytes.", vgpuLabels, nil)
	memoryUsed = prometheus.NewDesc("xgpu_memory_used",
		"vGPU memory in use by the container's processes, bytes.", vgpuLabels, nil)
	coreTotal = prometheus.NewDesc("xgpu_core_percentage_total",
		"vGPU compute quota, percent of the card (0: memory isolation only).", vgpuLabels, nil)
	coreUsed = prometheus.NewDesc("xgpu_core_percentage_used",
		"vGPU compute used over the agent's sampling window: busy time / window, percent of the card.", vgpuLabels, nil)
	vgpuProcs = prometheus.NewDesc("xgpu_processes",
		"Processes holding the vGPU.", vgpuLabels, nil)
	memoryDriver = prometheus.NewDesc("xgpu_memory_driver_used",
		"Device memory the driver reports for the container's processes on the card (NVML's running processes), bytes.", vgpuLabels, nil)
	memoryUnseen = prometheus.NewDesc("xgpu_memory_unseen",
		"Driver-reported vGPU memory beyond what the container's processes charged, counted against the cap from the next allocation on, bytes.", vgpuLabels, nil)

	deviceHealth = prometheus.NewDesc("xgpu_device_health",
		"Card health: 0 healthy, 1 unhealthy (a critical XID).", cardLabels, nil)
	schedulePolicy = prometheus.NewDesc("gpu_schedule_policy",
		"Card isolation: 0 memory isolation + shared compute, 1 memory + compute isolation, 2 card not yet used for vGPUs.", cardLabels, nil)
	deviceMemTotal = prometheus.NewDesc("xgpu_device_memory_total",
		"Card memory, bytes.", cardLabels, nil)
	deviceMemUsed = prometheus.NewDesc("xgpu_device_memory_used",
		"Card memory in use by all processes (NVML), bytes.", cardLabels, nil)
	deviceUtil = prometheus.NewDesc("xgpu_device_utilization",
		"Card utilization (NVML), percent of its last sample period with a kernel running.", cardLabels, nil)
	deviceRatio = prometheus.NewDesc("xgpu_device_vgpu_memory_ratio",
		"Sum of the card's vGPU memory used / card memory, 0-1.", cardLabels, nil)
	deviceVGPUs = prometheus.NewDesc("xgpu_device_vgpus",
		"vGPUs on the card.", cardLabels, nil)

	nodeVGPUs = prometheus.NewDesc("xgpu_node_vgpus",
		"vGPUs on the node.", nil, nil)
	nodeAllocated = prometheus.NewDesc("xgpu_node_vgpu_memory_allocated",
		"vGPU memory allocated on the node (sum of the caps), bytes.", nil, nil)
	nodeSourceErrors = prometheus.NewDesc("xgpu_node_source_problems",
		"Sources that failed at the last sample (their series are absent; the agent's log says why).", nil, nil)

	nodeGuard = prometheus.NewDesc("xgpu_node_guard",
		"The eBPF guard: 1 while it keeps the GPU from processes that bypass the shim, 0 when it does not run "+
			"(state off: configured off; unavailable: it could not run, the status says why).",
		[]string{"mode", "state"}, nil)
	nodeGuardLost = prometheus.NewDesc("xgpu_node_guard_lost_total",
		"What the guard lost: events (refusals not logged, still refused), bad_magic (a gpuslice.ko without "+
			"the guard word: its processes are refused), files_full (attachments not recorded: refused).",
		[]string{"kind"}, nil)
	guardRefusals = prometheus.NewDesc("xgpu_guard_refusals_total",
		"Opens, ioctls and mmaps of the NVIDIA device nodes the guard refused to the container's processes "+
			"that are not attached to its vGPU (started without the shim).", vgpuLabels, nil)
)

// Collector is a prometheus.Collector over the snapshots snap returns
// (nil: nothing sampled yet, no series).
type Collector struct {
	snap func() *status.Node
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector of snap's snapshots. snap is called once per
// scrape and must not block; the snapshot it returns is only read.
func New(snap func() *status.Node) *Collector { return &Collector{snap: snap} }

// Describe sends every series' description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{memoryTotal, memoryUsed, coreTotal, coreUsed, vgpuProcs, memoryDriver, memoryUnseen,
		deviceHealth, schedulePolicy, deviceMemTotal, deviceMemUsed, deviceUtil, deviceRatio,
		deviceVGPUs, nodeVGPUs, nodeAllocated, nodeSourceErrors, nodeGuard, nodeGuardLost, guardRefusals} {
		ch <- d
	}
}

// Collect sends the series of the latest snapshot.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	n := c.snap()
	if n == nil {
		return
	}
	vgpus, allocated := 0, uint64(0)
	for i := range n.Cards {
		card := &n.Cards[i]
		idx := strconv.Itoa(card.Index)
		gauge(ch, deviceMemTotal, float64(card.MemoryTotalBytes), idx, card.UUID)
		gauge(ch, schedulePolicy, float64(Isolation(card)), idx, card.UUID)
		gauge(ch, deviceVGPUs, float64(len(card.VGPUs)), idx, card.UUID)
		if card.Healthy != nil {
			gauge(ch, deviceHealth, b2f(!*card.Healthy), idx, card.UUID)
		}
		if card.MemoryUsedBytes != nil {
			gauge(ch, deviceMemUsed, float64(*card.MemoryUsedBytes), idx, card.UUID)
		}
		if card.UtilPercent != nil {
			gauge(ch, deviceUtil, *card.UtilPercent, idx, card.UUID)
		}
		if r, ok := MemoryRatio(card); ok {
			gauge(ch, deviceRatio, r, idx, card.UUID)
		}
		for j := range card.VGPUs {
			v := &card.VGPUs[j]
			vgpus++
			allocated += v.MemoryCapBytes
			if j > 0 && sameLabels(&card.VGPUs[j-1], v) {
				// Two containers of one name on one card (a restart
				// whose old container is not released yet): one series.
				continue
			}
			c.vgpu(ch, v, idx, card.UUID)
		}
	}
	gauge(ch, nodeVGPUs, float64(vgpus))
	gauge(ch, nodeAllocated, float64(allocated))
	gauge(ch, nodeSourceErrors, float64(len(n.Problems)))
	if g := n.Guard; g != nil {
		gauge(ch, nodeGuard, b2f(g.State == status.GuardOn), g.Mode, g.State)
		for kind, v := range map[string]*uint64{"events": g.LostEvents, "bad_magic": g.BadMagic,
			"files_full": g.FilesFull} {
			if v != nil {
				counter(ch, nodeGuardLost, float64(*v), kind)
			}
		}
	}
}

func (c *Collector) vgpu(ch chan<- prometheus.Metric, v *status.VGPU, card, uuid string) {
	id := strconv.Itoa(v.ID)
	gauge(ch, memoryTotal, float64(v.MemoryCapBytes), v.Namespace, v.Pod, v.Container, card, uuid, id)
	gauge(ch, coreTotal, float64(v.QuotaPercent), v.Namespace, v.Pod, v.Container, card, uuid, id)
	if v.MemoryUsedBytes != nil {
		gauge(ch, memoryUsed, float64(*v.MemoryUsedBytes), v.Namespace, v.Pod, v.Container, card, uuid, id)
	}
	if v.CoreUsedPercent != nil {
		gauge(ch, coreUsed, *v.CoreUsedPercent, v.Namespace, v.Pod, v.Container, card, uuid, id)
	}
	if v.Processes != nil {
		gauge(ch, vgpuProcs, float64(*v.Processes), v.Namespace, v.Pod, v.Container, card, uuid, id)
	}
	if v.MemoryDriverBytes != nil {
		gauge(ch, memoryDriver, float64(*v.MemoryDriverBytes), v.Namespace, v.Pod, v.Container, card, uuid, id)
	}
	if v.MemoryUnseenBytes != nil {
		gauge(ch, memoryUnseen, float64(*v.MemoryUnseenBytes), v.Namespace, v.Pod, v.Container, card, uuid, id)
	}
	if v.GuardRefusals != nil {
		counter(ch, guardRefusals, float64(*v.GuardRefusals), v.Namespace, v.Pod, v.Container, card, uuid, id)
	}
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

func sameLabels(a, b *status.VGPU) bool {
	return a.Namespace == b.Namespace && a.Pod == b.Pod && a.Container == b.Container && a.ID == b.ID
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// The values of gpu_schedule_policy (reference.md section 5).
const (
	IsolationMemory  = 0 // memory isolation, compute shared
	IsolationCompute = 1 // memory and compute isolation
	IsolationUnused  = 2 // no vGPU on the card yet
)

// Isolation is the card's gpu_schedule_policy value, from its vGPUs' mode
// (a card runs vGPUs of one mode only).
func Isolation(c *status.Card) int {
	if len(c.VGPUs) == 0 {
		return IsolationUnused
	}
	if c.VGPUs[0].Mode == "compute" {
		return IsolationCompute
	}
	return IsolationMemory
}

// MemoryRatio is the sum of the card's vGPU memory used over its memory;
// false when a vGPU's figure is missing (a partial sum would understate).
func MemoryRatio(c *status.Card) (float64, bool) {
	if c.MemoryTotalBytes == 0 {
		return 0, false
	}
	var sum uint64
	for i := range c.VGPUs {
		u := c.VGPUs[i].MemoryUsedBytes
		if u == nil {
			return 0, false
		}
		sum += *u
	}
	return float64(sum) / float64(c.MemoryTotalBytes), true
}
