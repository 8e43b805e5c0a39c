// Package admission is gpuslice's mutating admission webhook: it lets a
// pod written for the reference product run unchanged on gpuslice's DRA
// driver. A container's
//
//	volcano.sh/gpu-mem.128Mi: N        (1-16384, units of 128 MiB)
//	volcano.sh/gpu-core.percentage: P  (0-100, steps of 5, only with gpu-mem)
//	nvidia.com/gpu: f                  (0 < f < 1: f x the card's memory,
//	                                    rounded down to 128 MiB, memory only)
//
// becomes a DRA claim on the gpu.gpuslice.io driver (pkg/draapi holds the
// names it shares with the driver): one
// ResourceClaimTemplate per distinct request in the pod's namespace,
// created on demand under a name derived from the request, referenced from
// the pod (spec.resourceClaims and the container's resources.claims) so that
// the claim controller owns each claim's life; the extended resources are
// removed. Whole nvidia.com/gpu requests are left to the cluster's device
// plugin unless Mutator.WholeGPUs is set.
//
// The webhook refuses what it cannot translate with a message naming the
// container, the resource and the allowed values. The refusals that CEL can
// express are also made, with the same messages, by the
// ValidatingAdmissionPolicies in install/kubernetes/admission, which the API
// server evaluates after every mutation: when the webhook is down (its
// failurePolicy is Ignore, so it never blocks unrelated pods), a pod still
// carrying these resources is refused by a policy, never admitted without
// its isolation.
package admission

// The reference product's resource names.
const (
	ResourceMemory = "volcano.sh/gpu-mem.128Mi"
	ResourceCores  = "volcano.sh/gpu-core.percentage"
	ResourceGPU    = "nvidia.com/gpu"
)

// Limits of the reference's resources.
const (
	MemoryUnit     = 128 << 20 // bytes in one volcano.sh/gpu-mem.128Mi
	MaxMemoryUnits = 16384     // volcano.sh/gpu-mem.128Mi at most (2 TiB)
	CoresStep      = 5         // volcano.sh/gpu-core.percentage is a multiple of this
	MaxCores       = 100       // percent
	MaxWholeCards  = 16        // nvidia.com/gpu translated as whole cards, at most
)

// Annotations the webhook reads.
const (
	// AnnotationPriority (pod-wide, or AnnotationPriority +
	// "/container.NAME" for one container) carries high or low into the
	// claim's parameters. The webhook removes it from pods it translates:
	// the request then lives in the claim only.
	AnnotationPriority = "gpuslice.io/gpu-priority"
	// AnnotationPrefix starts every gpuslice annotation of the node
	// agent's annotation route; a pod asks for vGPUs by those or by
	// resources, not both.
	AnnotationPrefix = "gpuslice.io/gpu-"
	containerSuffix  = "/container."
)

// Labels the webhook puts on the templates it creates (and, through
// them, on the claims made from them).
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "gpuslice-webhook"
)
