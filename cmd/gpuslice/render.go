package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpuslice/gpuslice/pkg/status"
)

// policyNames are the policies 0-6 of reference.md section 3.
var policyNames = []string{"native", "fixed", "average", "preemptive",
	"weighted preemptive", "hybrid", "weighted weak"}

// policyName is policy p's name, "unknown" outside 0-6.
func policyName(p int) string {
	if p < 0 || p >= len(policyNames) {
		return "unknown"
	}
	return policyNames[p]
}

// render writes node as the human table: a line for the node, then per
// card (by index) a header line and its vGPUs (by namespace, pod,
// container, id), then the node's problems as warnings. A figure the agent
// could not read is "-". It does not change node.
func render(w io.Writer, node *status.Node) error {
	cards := slices.Clone(node.Cards)
	slices.SortStableFunc(cards, func(a, b status.Card) int { return cmp.Compare(a.Index, b.Index) })
	nv := 0
	for _, c := range cards {
		nv += len(c.VGPUs)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "node %s  enforce %s  guard %s  read %s  %s  %s\n", dash(node.Node), dash(node.Enforce),
		guardState(node.Guard), readAt(node.Time), plural(len(cards), "card"), plural(nv, "vGPU"))
	if len(cards) == 0 {
		b.WriteString("\nno cards: the agent found no GPU on this node\n")
	}
	for _, c := range cards {
		b.WriteString("\n")
		writeCard(&b, node.Enforce, c)
	}
	warnings := append(guardWarnings(node.Guard), node.Problems...)
	if len(warnings) > 0 {
		b.WriteString("\n")
	}
	for _, p := range warnings {
		fmt.Fprintf(&b, "warning: %s\n", p)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeCard writes one card's header line and its vGPUs' table.
func writeCard(b *strings.Builder, enforce string, c status.Card) {
	health := "health -"
	if c.Healthy != nil && *c.Healthy {
		health = "healthy"
	} else if c.Healthy != nil {
		health = "UNHEALTHY"
	}
	util := "-"
	if c.UtilPercent != nil {
		util = fmt.Sprintf("%.0f%%", *c.UtilPercent)
	}
	fmt.Fprintf(b, "card %d  %s  %s  policy %d (%s)  enforce %s  %s  memory %s/%s MiB  util %s  vGPUs %d/%d\n",
		c.Index, dash(c.Model), shortUUID(c.UUID), c.Policy, policyName(c.Policy), dash(enforce),
		health, mibp(c.MemoryUsedBytes), mib(c.MemoryTotalBytes), util, len(c.VGPUs), c.MaxInst)
	if len(c.VGPUs) == 0 {
		b.WriteString("  no vGPUs\n")
		return
	}
	vgpus := slices.Clone(c.VGPUs)
	slices.SortStableFunc(vgpus, func(x, y status.VGPU) int {
		return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Pod, y.Pod),
			cmp.Compare(x.Container, y.Container), cmp.Compare(x.ID, y.ID))
	})
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  CONTAINER\tCLAIM\tVGPU\tMODE\tMEMORY MiB\tQUOTA\tUSE\tPRIORITY\tPROCS\tREFUSED")
	for _, v := range vgpus {
		id := "-"
		if v.ID >= 0 {
			id = strconv.Itoa(v.ID)
		}
		use := "-"
		if v.CoreUsedPercent != nil {
			use = fmt.Sprintf("%.1f%%", *v.CoreUsedPercent)
		}
		prio := "low"
		if v.HighPriority {
			prio = "high"
		}
		procs := "-"
		if v.Processes != nil {
			procs = strconv.Itoa(*v.Processes)
		}
		refused := "-"
		if v.GuardRefusals != nil {
			refused = strconv.FormatUint(*v.GuardRefusals, 10)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s/%s\t%d%%\t%s\t%s\t%s\t%s\n", containerName(v), dash(v.Claim), id, dash(v.Mode),
			mibp(v.MemoryUsedBytes), mib(v.MemoryCapBytes), v.QuotaPercent, use, prio, procs, refused)
	}
	tw.Flush() // writes to a strings.Builder: cannot fail
}

// guardState is the guard's state for the node line: "on", and in
// capitals what leaves processes without the shim on the GPU.
func guardState(g *status.Guard) string {
	switch {
	case g == nil:
		return "-"
	case g.State == status.GuardOn:
		return "on"
	default:
		return strings.ToUpper(dash(g.State))
	}
}

// guardWarnings say why the guard is not on and what it lost.
func guardWarnings(g *status.Guard) []string {
	if g == nil {
		return nil
	}
	var w []string
	if g.State != status.GuardOn {
		w = append(w, fmt.Sprintf("the eBPF guard is %s (guard: %s): %s", dash(g.State), dash(g.Mode), dash(g.Reason)))
	}
	for _, l := range []struct {
		n    *uint64
		what string
	}{
		{g.LostEvents, "refusals not logged (the guard's ring buffer was full); they were refused all the same"},
		{g.BadMagic, "/dev/gpuslice files without the guard word (gpuslice.ko older than the guard): their processes are refused"},
		{g.FilesFull, "attachments not recorded (too many attached files on the node): their processes are refused"},
	} {
		if l.n != nil && *l.n > 0 {
			w = append(w, fmt.Sprintf("%d %s", *l.n, l.what))
		}
	}
	return w
}

// renderJSON writes node as indented JSON: status.Node's own encoding, with
// null for the figures the agent could not read.
func renderJSON(w io.Writer, node *status.Node) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(node)
}

// containerName is namespace/pod/container, or the container's short id
// when the agent knows no names.
func containerName(v status.VGPU) string {
	if v.Namespace == "" && v.Pod == "" && v.Container == "" {
		return "id:" + dash(v.ContainerID[:min(len(v.ContainerID), 12)])
	}
	return dash(v.Namespace) + "/" + dash(v.Pod) + "/" + dash(v.Container)
}

// shortUUID is "GPU-" and the first 8 hex digits of a GPU's UUID, enough to
// tell a node's cards apart.
func shortUUID(u string) string {
	const keep = len("GPU-") + 8
	if len(u) > keep && strings.HasPrefix(u, "GPU-") {
		return u[:keep]
	}
	return dash(u)
}

// mib is a byte count in MiB, whole when it is whole, else to 0.1 MiB.
func mib(n uint64) string {
	if n%(1<<20) == 0 {
		return strconv.FormatUint(n>>20, 10)
	}
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64)
}

// mibp is mib of a figure the agent may not have: "-" for nil.
func mibp(n *uint64) string {
	if n == nil {
		return "-"
	}
	return mib(*n)
}

// readAt is when the figures were read, in UTC to the second.
func readAt(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// dash is s, or "-" when s is empty.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// plural is "1 card", "2 cards".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
