package admission

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Refusal is a pod the webhook refuses; Message is what its author reads
// (the API server prefixes it with the webhook's name).
type Refusal struct{ Message string }

func (r *Refusal) Error() string { return r.Message }

func refusef(format string, a ...any) *Refusal {
	return &Refusal{Message: fmt.Sprintf(format, a...)}
}

// ask is what one container asks of the reference's resources, as
// written.
type ask struct {
	name       string
	init       bool
	mem, cores *resource.Quantity // nil: not asked
	// gpu is nvidia.com/gpu when it is the webhook's to translate (a
	// fraction, or whole cards with WholeGPUs); gpuAny is it whatever its
	// value.
	gpu, gpuAny *resource.Quantity
}

// vgpu reports whether the container asks for a vGPU the webhook
// translates.
func (a *ask) vgpu() bool { return a.mem != nil || a.cores != nil || a.gpu != nil }

// firstResource names the first of the container's vGPU resources, in the
// order the policies' messages name them.
func (a *ask) firstResource() string {
	switch {
	case a.mem != nil:
		return ResourceMemory
	case a.cores != nil:
		return ResourceCores
	}
	return ResourceGPU
}

// kind is how the messages name the container.
func (a *ask) kind() string {
	if a.init {
		return "init container"
	}
	return "container"
}

// readAsks reads what the pod's containers and init containers ask for.
func readAsks(pod *corev1.Pod, wholeGPUs bool) (regular, inits []*ask, err error) {
	for _, c := range pod.Spec.Containers {
		a, err := readAsk(c, false, wholeGPUs)
		if err != nil {
			return nil, nil, err
		}
		regular = append(regular, a)
	}
	for _, c := range pod.Spec.InitContainers {
		a, err := readAsk(c, true, wholeGPUs)
		if err != nil {
			return nil, nil, err
		}
		inits = append(inits, a)
	}
	return regular, inits, nil
}

// readAsk reads one container's resources. The webhook runs before the
// API server validates the pod, so requests and limits may still differ
// here: they must agree, and the limit is the value (for extended
// resources the API server copies limits into missing requests and
// insists they be equal).
func readAsk(c corev1.Container, init, wholeGPUs bool) (*ask, error) {
	a := &ask{name: c.Name, init: init}
	var err error
	if a.mem, err = quantityOf(a, c.Resources, ResourceMemory); err != nil {
		return nil, err
	}
	if a.cores, err = quantityOf(a, c.Resources, ResourceCores); err != nil {
		return nil, err
	}
	if a.gpuAny, err = quantityOf(a, c.Resources, ResourceGPU); err != nil {
		return nil, err
	}
	if g := a.gpuAny; g != nil && g.Sign() > 0 && (wholeGPUs || !isInteger(g)) {
		a.gpu = g
	}
	return a, nil
}

// quantityOf is one resource of a container: its limit, or its request
// when it has no limit; nil when it has neither.
func quantityOf(a *ask, res corev1.ResourceRequirements, name string) (*resource.Quantity, error) {
	l, inLimits := res.Limits[corev1.ResourceName(name)]
	r, inRequests := res.Requests[corev1.ResourceName(name)]
	switch {
	case inLimits && inRequests && l.Cmp(r) != 0:
		return nil, refusef("%s %q: resource %s: requests (%s) and limits (%s) differ; want one value, in limits",
			a.kind(), a.name, name, r.String(), l.String())
	case inLimits:
		return &l, nil
	case inRequests:
		return &r, nil
	}
	return nil, nil
}

func isInteger(q *resource.Quantity) bool {
	_, ok := q.AsInt64()
	return ok
}

// inRange reports whether q is a whole number lo-hi and a multiple of
// step.
func inRange(q *resource.Quantity, lo, hi, step int64) bool {
	v, ok := q.AsInt64()
	return ok && v >= lo && v <= hi && v%step == 0
}

// podChecks are the refusals of what the pod's resources say. The first
// five are the validations of the pod policy
// (install/kubernetes/admission/policies.yaml), in its order and with its
// messages, so that a pod wrong in several ways reads the same refusal
// whether the webhook ran or not. The policy does not make the others:
// with the webhook down it refuses those pods as untranslated (or the API
// server's validation refuses their fractions of nvidia.com/gpu).
var podChecks = []func(pod *corev1.Pod, regular, inits []*ask) *Refusal{
	checkInit,
	checkCoresWithoutMemory,
	checkCores,
	checkMemory,
	checkBothWays,
	checkOneWay,
	checkGPU,
	checkPriority,
}

// checkInit: init containers may not ask for vGPUs (reference).
func checkInit(_ *corev1.Pod, _, inits []*ask) *Refusal {
	for _, a := range inits {
		if a.vgpu() {
			return refusef("init container %q: resource %s: init containers may not request vGPU resources "+
				"(the reference product does not support them); request the vGPU in a regular container",
				a.name, a.firstResource())
		}
	}
	return nil
}

func checkCoresWithoutMemory(_ *corev1.Pod, regular, _ []*ask) *Refusal {
	for _, a := range regular {
		if a.cores != nil && a.mem == nil {
			return refusef("container %q: resource %s=%s without %s: compute is given only with memory; "+
				"add %s (1-16384, units of 128 MiB)", a.name, ResourceCores, a.cores.String(), ResourceMemory, ResourceMemory)
		}
	}
	return nil
}

func checkCores(_ *corev1.Pod, regular, _ []*ask) *Refusal {
	for _, a := range regular {
		if a.cores != nil && !inRange(a.cores, 0, MaxCores, CoresStep) {
			return refusef("container %q: resource %s=%s: want 0-100 in steps of 5", a.name, ResourceCores, a.cores.String())
		}
	}
	return nil
}

func checkMemory(_ *corev1.Pod, regular, _ []*ask) *Refusal {
	for _, a := range regular {
		if a.mem != nil && !inRange(a.mem, 1, MaxMemoryUnits, 1) {
			return refusef("container %q: resource %s=%s: want 1-16384 (units of 128 MiB: 128Mi to 2Ti)",
				a.name, ResourceMemory, a.mem.String())
		}
	}
	return nil
}

// checkBothWays: a pod asks for vGPUs by the node agent's annotations or
// by resources, not both; gpuslice.io/gpu-priority alone goes with
// resources (into the claims' parameters).
func checkBothWays(pod *corev1.Pod, regular, _ []*ask) *Refusal {
	a := firstVGPU(regular)
	if a == nil {
		return nil
	}
	key := ""
	for k := range pod.Annotations {
		if isAgentAnnotation(k) && (key == "" || k < key) {
			key = k
		}
	}
	if key == "" {
		return nil
	}
	return refusef("container %q: resource %s with annotation %s: a pod asks for vGPUs by gpuslice.io/gpu-* "+
		"annotations or by resources, not both (only gpuslice.io/gpu-priority goes with resources)",
		a.name, a.firstResource(), key)
}

// isAgentAnnotation reports whether an annotation asks the node agent for
// a vGPU (any gpuslice.io/gpu-* but the priority).
func isAgentAnnotation(k string) bool {
	return strings.HasPrefix(k, AnnotationPrefix) && !isPriorityAnnotation(k)
}

func isPriorityAnnotation(k string) bool {
	return k == AnnotationPriority || strings.HasPrefix(k, AnnotationPriority+containerSuffix)
}

func firstVGPU(asks []*ask) *ask {
	for _, a := range asks {
		if a.vgpu() {
			return a
		}
	}
	return nil
}

// checkOneWay: one container asks for one vGPU, by gpu-mem or by
// nvidia.com/gpu (a container given a whole card by a device plugin and
// a vGPU besides would hold the card unisolated).
func checkOneWay(_ *corev1.Pod, regular, _ []*ask) *Refusal {
	for _, a := range regular {
		if a.mem != nil && a.gpuAny != nil && a.gpuAny.Sign() > 0 {
			return refusef("container %q: resources %s and %s=%s: ask for a vGPU by one of them, not both",
				a.name, ResourceMemory, ResourceGPU, decimal(a.gpuAny))
		}
	}
	return nil
}

func checkGPU(_ *corev1.Pod, regular, _ []*ask) *Refusal {
	for _, a := range regular {
		g := a.gpu
		switch {
		case g == nil:
		case !isInteger(g) && g.Cmp(resource.MustParse("1")) > 0:
			return refusef("container %q: resource %s=%s: want a whole number of cards or a fraction between 0 and 1",
				a.name, ResourceGPU, decimal(g))
		case isInteger(g) && g.Value() > MaxWholeCards:
			return refusef("container %q: resource %s=%s: want at most %d whole cards", a.name, ResourceGPU, decimal(g), MaxWholeCards)
		}
	}
	return nil
}

// checkPriority: gpuslice.io/gpu-priority is high or low, and high only
// for a vGPU with compute (as on the annotation route).
func checkPriority(pod *corev1.Pod, regular, _ []*ask) *Refusal {
	if firstVGPU(regular) == nil {
		return nil
	}
	keys := slices.Sorted(maps.Keys(pod.Annotations))
	for _, k := range keys {
		if v := pod.Annotations[k]; isPriorityAnnotation(k) && v != "high" && v != "low" {
			return refusef("annotation %s=%q: want high or low", k, v)
		}
	}
	for _, a := range regular {
		if k, v := priorityOf(pod, a.name); a.vgpu() && v == "high" && (a.cores == nil || a.cores.Sign() == 0) {
			return refusef("container %q: annotation %s=%q: high priority is for vGPUs with compute; set %s above 0",
				a.name, k, v, ResourceCores)
		}
	}
	return nil
}

// priorityOf is the container's priority annotation and value: its own
// (gpuslice.io/gpu-priority/container.NAME), else the pod's; "" if none.
func priorityOf(pod *corev1.Pod, container string) (key, value string) {
	for _, k := range []string{AnnotationPriority + containerSuffix + container, AnnotationPriority} {
		if v, ok := pod.Annotations[k]; ok {
			return k, v
		}
	}
	return "", ""
}

// decimal writes a quantity as a plain decimal number, as short as it
// goes: 0.5 (not 500m, nor 0.500 as it reads once sent as 500m).
func decimal(q *resource.Quantity) string {
	s := q.AsDec().String()
	if strings.Contains(s, ".") {
		s = strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
	}
	return s
}
