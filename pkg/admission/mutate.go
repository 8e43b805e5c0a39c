package admission

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/big"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
)

// Mutator turns the reference's resources of a pod into DRA claims.
type Mutator struct {
	// Client reads and creates ResourceClaimTemplates in the pods'
	// namespaces (and reads the claims of init containers).
	Client kubernetes.Interface
	// Cards tells the cards' memory, for nvidia.com/gpu.
	Cards CardMemory
	// WholeGPUs translates whole nvidia.com/gpu requests too (each card
	// a vGPU of all its memory, memory isolation only); without it they
	// are left to the cluster's device plugin.
	WholeGPUs bool
}

// Mutate returns the JSON patch that turns the pod's vGPU resources into
// claims, creating the claims' templates in the namespace (not on a dry
// run); nil for a pod that asks for none. A pod it refuses gets a
// *Refusal; any other error means it could not tell or could not create
// the templates, and the pod is refused too (never admitted untranslated).
func (m *Mutator) Mutate(ctx context.Context, pod *corev1.Pod, namespace string, dryRun bool) ([]PatchOp, error) {
	regular, inits, err := readAsks(pod, m.WholeGPUs)
	if err != nil {
		return nil, err
	}
	if firstVGPU(regular) == nil && firstVGPU(inits) == nil && !hasInitClaims(pod) {
		return nil, nil
	}
	for _, check := range podChecks {
		if r := check(pod, regular, inits); r != nil {
			return nil, r
		}
	}
	if hasInitClaims(pod) {
		if err := checkInitClaims(ctx, m.Client, pod, namespace); err != nil {
			return nil, err
		}
	}
	if firstVGPU(regular) == nil {
		return nil, nil
	}
	reqs, err := m.requests(ctx, pod, regular)
	if err != nil {
		return nil, err
	}
	p := &patcher{pod: pod}
	ensured := map[string]bool{}
	taken := podClaimNames(pod)
	for i, r := range reqs {
		if r == nil {
			continue
		}
		t := r.template(namespace)
		if !ensured[t.Name] {
			if err := ensureTemplate(ctx, m.Client, t, dryRun); err != nil {
				return nil, err
			}
			ensured[t.Name] = true
		}
		p.translate(i, regular[i], claimName(regular[i].name, taken), t.Name)
	}
	p.removePriorities()
	return p.ops, nil
}

// requests builds each container's vGPU request; nil for a container
// that asks for none. The pod's values were checked by podChecks.
func (m *Mutator) requests(ctx context.Context, pod *corev1.Pod, regular []*ask) ([]*vgpuRequest, error) {
	out := make([]*vgpuRequest, len(regular))
	var cardMemory int64
	for i, a := range regular {
		if !a.vgpu() {
			continue
		}
		r := &vgpuRequest{Cards: 1}
		_, r.Priority = priorityOf(pod, a.name)
		if a.mem != nil {
			r.MemoryBytes = a.mem.Value() * MemoryUnit
			if a.cores != nil {
				r.Cores = a.cores.Value()
			}
			out[i] = r
			continue
		}
		if cardMemory == 0 {
			var err error
			if cardMemory, err = m.cardMemory(ctx, pod, a); err != nil {
				return nil, err
			}
		}
		r.CardMemory = cardMemory
		if isInteger(a.gpu) {
			r.Cards, r.MemoryBytes = int(a.gpu.Value()), cardMemory
		} else if r.MemoryBytes = fractionOf(a.gpu, cardMemory); r.MemoryBytes < MemoryUnit {
			return nil, refusef("container %q: resource %s=%s: %s of a %s card is under 128 MiB; want a fraction that gives at least 128Mi",
				a.name, ResourceGPU, decimal(a.gpu), decimal(a.gpu), resource.NewQuantity(cardMemory, resource.BinarySI).String())
		}
		out[i] = r
	}
	return out, nil
}

func (m *Mutator) cardMemory(ctx context.Context, pod *corev1.Pod, a *ask) (int64, error) {
	if m.Cards == nil {
		return 0, errors.New("no source of the cards' memory is configured")
	}
	n, err := m.Cards.For(ctx, pod)
	var r *Refusal
	if errors.As(err, &r) {
		return 0, refusef("container %q: resource %s=%s: %s", a.name, ResourceGPU, decimal(a.gpu), r.Message)
	}
	return n, err
}

// fractionOf is f x memory rounded down to a multiple of 128 MiB, f taken
// exactly as written.
func fractionOf(f *resource.Quantity, memory int64) int64 {
	v, ok := new(big.Rat).SetString(f.AsDec().String())
	if !ok {
		return 0
	}
	v.Mul(v, big.NewRat(memory, MemoryUnit))
	units := new(big.Int).Quo(v.Num(), v.Denom())
	return units.Int64() * MemoryUnit
}

// podClaimNames are the names of the pod's claims.
func podClaimNames(pod *corev1.Pod) map[string]bool {
	taken := map[string]bool{}
	for _, c := range pod.Spec.ResourceClaims {
		taken[c.Name] = true
	}
	return taken
}

// claimName is the pod's name for a container's vGPU claim: vgpu-NAME
// (the claim controller names the claim POD-vgpu-NAME-xxxxx), a DNS
// label, not one the pod already has.
func claimName(container string, taken map[string]bool) string {
	base := "vgpu-" + container
	if len(base) > 63 {
		sum := sha256.Sum256([]byte(container))
		base = base[:54] + "-" + hex.EncodeToString(sum[:4])
	}
	name := base
	for n := 2; taken[name]; n++ {
		suffix := "-" + strconv.Itoa(n)
		name = base[:min(len(base), 63-len(suffix))] + suffix
	}
	taken[name] = true
	return name
}
