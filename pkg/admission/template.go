package admission

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	resourcev1 "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuslice/gpuslice/pkg/draapi"
)

// vgpuRequest is what one container's claim asks of the driver.
type vgpuRequest struct {
	MemoryBytes int64 // per card, a multiple of 128 MiB
	Cores       int64 // percent; 0: memory isolation only
	// Cards is the number of cards, one request each, all alike: whole
	// nvidia.com/gpu cards; 1 otherwise.
	Cards int
	// CardMemory, when the size was computed from a card's memory (a
	// fraction, whole cards), confines the claim to cards of that memory,
	// so that the fraction holds on whatever card the scheduler picks.
	CardMemory int64
	Priority   string // high or low; "": the driver's default (low)
}

// mode is the isolation mode the request asks of its card.
func (r vgpuRequest) mode() string {
	if r.Cores > 0 {
		return draapi.ModeCompute
	}
	return draapi.ModeMemory
}

// requestNames names the claim's requests: "vgpu", or vgpu-0, vgpu-1, ...
// for several cards.
func (r vgpuRequest) requestNames() []string {
	if r.Cards <= 1 {
		return []string{"vgpu"}
	}
	names := make([]string, r.Cards)
	for i := range names {
		names[i] = "vgpu-" + strconv.Itoa(i)
	}
	return names
}

// claimSpec is the claim the request becomes, in the form of the
// contract with the driver: one device of the driver's class per card,
// the memory and cores consumed on it, a selector that keeps it off cards
// of the other isolation mode, and the mode (and priority) in the opaque
// parameters.
func (r vgpuRequest) claimSpec() resourcev1.ResourceClaimSpec {
	selectors := []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
		Expression: draapi.ModeSelector(r.mode()),
	}}}
	if r.CardMemory > 0 {
		selectors = append(selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{
			Expression: fmt.Sprintf("device.attributes['%s'].%s == %d", draapi.DriverName, draapi.AttrMemory, r.CardMemory),
		}})
	}
	names := r.requestNames()
	var spec resourcev1.ResourceClaimSpec
	for _, name := range names {
		spec.Devices.Requests = append(spec.Devices.Requests, resourcev1.DeviceRequest{
			Name: name,
			Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: draapi.DeviceClassName,
				AllocationMode:  resourcev1.DeviceAllocationModeExactCount,
				Count:           1,
				Capacity: &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{
					draapi.CapacityMemory: *resource.NewQuantity(r.MemoryBytes, resource.BinarySI),
					draapi.CapacityCores:  *resource.NewQuantity(r.Cores, resource.DecimalSI),
				}},
				Selectors: selectors,
			},
		})
	}
	params, _ := json.Marshal(draapi.VGPUConfig{APIVersion: draapi.APIVersion, Kind: draapi.KindVGPU, Priority: r.Priority, Mode: r.mode()})
	spec.Devices.Config = []resourcev1.DeviceClaimConfiguration{{
		Requests: names,
		DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
			Driver: draapi.DriverName, Parameters: runtime.RawExtension{Raw: params},
		}},
	}}
	return spec
}

// template is the ResourceClaimTemplate of the request in a namespace.
// Its name is derived from its spec: every pod of the namespace asking
// for the same vGPU shares it, and two webhooks admitting such pods at
// once create the same object.
func (r vgpuRequest) template(namespace string) *resourcev1.ResourceClaimTemplate {
	spec := r.claimSpec()
	labels := map[string]string{LabelManagedBy: ManagedBy}
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: r.templateName(spec), Namespace: namespace, Labels: labels},
		Spec: resourcev1.ResourceClaimTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec:       spec,
		},
	}
}

// templateName reads as the request (gpuslice-4096mi-c30,
// gpuslice-8192mi-mem, gpuslice-2x16384mi-mem-high) and ends with a hash
// of the claim's spec, which tells apart requests alike but for the card
// they are confined to, and specs of other versions of the webhook.
func (r vgpuRequest) templateName(spec resourcev1.ResourceClaimSpec) string {
	name := "gpuslice-"
	if r.Cards > 1 {
		name += strconv.Itoa(r.Cards) + "x"
	}
	name += strconv.FormatInt(r.MemoryBytes>>20, 10) + "mi-"
	if r.Cores > 0 {
		name += "c" + strconv.FormatInt(r.Cores, 10)
	} else {
		name += "mem"
	}
	if r.Priority != "" {
		name += "-" + r.Priority
	}
	b, _ := json.Marshal(spec)
	sum := sha256.Sum256(b)
	return name + "-" + hex.EncodeToString(sum[:5])
}

// ensureTemplate makes sure the namespace holds the template: it reads
// it, creates it when missing (not on a dry run, the webhook's only side
// effect), and takes a concurrent creation of the same template as its
// own. A template of that name with another spec is refused, not used:
// whoever may create templates in the namespace could otherwise hand the
// namespace's pods claims of their own making.
func ensureTemplate(ctx context.Context, client kubernetes.Interface, want *resourcev1.ResourceClaimTemplate, dryRun bool) error {
	api := client.ResourceV1().ResourceClaimTemplates(want.Namespace)
	got, err := api.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && !dryRun {
		got, err = api.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			got, err = api.Get(ctx, want.Name, metav1.GetOptions{})
		}
	}
	switch {
	case apierrors.IsNotFound(err) && dryRun:
		return nil
	case err != nil:
		return fmt.Errorf("ResourceClaimTemplate %s/%s: %w", want.Namespace, want.Name, err)
	case !sameClaimSpec(got.Spec.Spec, want.Spec.Spec):
		return refusef("ResourceClaimTemplate %q in namespace %q exists with a spec other than the one gpuslice "+
			"writes for this request, and is not used; delete it and the webhook creates it again", want.Name, want.Namespace)
	}
	return nil
}

// sameClaimSpec compares two claim specs, the opaque parameters as JSON
// values rather than as bytes (the API server keeps them as sent, but
// another writer may have sent them otherwise spaced).
func sameClaimSpec(a, b resourcev1.ResourceClaimSpec) bool {
	a, b = *a.DeepCopy(), *b.DeepCopy()
	for _, s := range []*resourcev1.ResourceClaimSpec{&a, &b} {
		for i := range s.Devices.Config {
			if o := s.Devices.Config[i].Opaque; o != nil {
				var v any
				if json.Unmarshal(o.Parameters.Raw, &v) == nil {
					o.Parameters.Raw, _ = json.Marshal(v)
				}
			}
		}
	}
	return apiequality.Semantic.DeepEqual(a, b)
}
