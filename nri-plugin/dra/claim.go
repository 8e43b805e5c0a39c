package dra

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/gpuslice/gpuslice/nri-plugin/agent"
	"github.com/gpuslice/gpuslice/pkg/draapi"
	"github.com/gpuslice/gpuslice/pkg/placement"
	"github.com/gpuslice/gpuslice/pkg/quota"
	"github.com/gpuslice/gpuslice/pkg/state"
)

// gateHint is what a cluster without consumable capacity lacks.
const gateHint = "the allocation consumed no capacity: the cluster needs the DRAConsumableCapacity feature gate " +
	"(kube-apiserver, kube-scheduler, kube-controller-manager, kubelet; on by default from 1.36)"

// claimRequest is the allocation of claim c on this node's pool as the
// agent prepares it: the device chosen for each request and what it
// consumes, with the priority and mode of the claim's parameters. Every
// refusal names the claim and the field.
func claimRequest(c *resourceapi.ResourceClaim, pool string) (agent.ClaimRequest, error) {
	fail := func(format string, args ...any) (agent.ClaimRequest, error) {
		return agent.ClaimRequest{}, fmt.Errorf("claim %s/%s: %s", c.Namespace, c.Name, fmt.Sprintf(format, args...))
	}
	if c.Status.Allocation == nil {
		return fail("not allocated")
	}
	req := agent.ClaimRequest{Claim: state.Claim{UID: string(c.UID), Namespace: c.Namespace, Name: c.Name, Pool: pool}}
	pods := reservedPods(c)
	if len(pods) != 1 {
		// The kubelet prepares a claim for the pod it starts: its
		// reservation names it, and no other may share the vGPU.
		return fail("reserved for %d pods: a gpuslice claim serves the containers of one pod (give each pod its own claim, from a ResourceClaimTemplate)", len(pods))
	}
	req.Pod, req.PodUID = pods[0].Name, string(pods[0].UID)
	configs, err := opaqueConfigs(c.Status.Allocation.Devices.Config)
	if err != nil {
		return fail("%v", err)
	}
	priority := ""
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != draapi.DriverName {
			continue
		}
		v, err := claimVGPU(r, pool)
		if err != nil {
			return fail("request %q (device %s): %v", r.Request, r.Device, err)
		}
		cfg := configFor(configs, r.Request)
		if len(req.VGPUs) > 0 && orLow(cfg.Priority) != priority {
			return fail("its requests ask for priorities %q and %q: one priority per claim", priority, orLow(cfg.Priority))
		}
		priority = orLow(cfg.Priority)
		v.Mode = map[string]placement.Mode{draapi.ModeMemory: placement.Memory, draapi.ModeCompute: placement.Compute}[cfg.Mode]
		req.VGPUs = append(req.VGPUs, v)
	}
	if len(req.VGPUs) == 0 {
		return fail("no device of %s in its allocation", draapi.DriverName)
	}
	if priority == draapi.PriorityHigh {
		req.Priority = quota.High
	}
	return req, nil
}

// claimVGPU is what one allocated device of a claim consumes.
func claimVGPU(r resourceapi.DeviceRequestAllocationResult, pool string) (agent.ClaimVGPU, error) {
	v := agent.ClaimVGPU{Request: r.Request}
	if r.Pool != pool {
		return v, fmt.Errorf("allocated from pool %q, this node's is %q", r.Pool, pool)
	}
	idx, err := strconv.Atoi(strings.TrimPrefix(r.Device, draapi.DevicePrefix))
	if err != nil || !strings.HasPrefix(r.Device, draapi.DevicePrefix) || idx < 0 {
		return v, fmt.Errorf("not a device of this driver (want %s<index>)", draapi.DevicePrefix)
	}
	v.Card = idx
	if r.AdminAccess != nil && *r.AdminAccess {
		return v, errors.New("adminAccess: a gpuslice vGPU is always isolated; ask for a vGPU without adminAccess")
	}
	if r.ShareID == nil || len(r.ConsumedCapacity) == 0 {
		return v, errors.New(gateHint)
	}
	v.ShareID = string(*r.ShareID)
	mem, ok := consumed(r.ConsumedCapacity, draapi.CapacityMemory)
	if !ok {
		return v, errors.New(gateHint)
	}
	if mem.Value() < quota.MinMemory || mem.Value()%quota.MinMemory != 0 || uint64(mem.Value()) > quota.MaxMemory {
		return v, fmt.Errorf("consumedCapacity.memory=%q: want whole MiB, 1Mi-16Ti", mem.String())
	}
	v.MemoryBytes = uint64(mem.Value())
	if cores, ok := consumed(r.ConsumedCapacity, draapi.CapacityCores); ok {
		n := cores.Value()
		if cores.MilliValue() != n*1000 || n < 0 || n > quota.MaxCores || n%quota.CoresStep != 0 {
			return v, fmt.Errorf("consumedCapacity.cores=%q: want a percent 0-100 in steps of 5", cores.String())
		}
		v.Cores = uint32(n)
	}
	if n, ok := consumed(r.ConsumedCapacity, draapi.CapacityVGPUs); ok && n.Value() != 1 {
		return v, fmt.Errorf("consumedCapacity.vgpus=%q: every claim takes exactly 1", n.String())
	}
	return v, nil
}

// consumed finds a capacity by its name, with or without the driver's
// domain.
func consumed(m map[resourceapi.QualifiedName]resource.Quantity, name string) (resource.Quantity, bool) {
	if q, ok := m[resourceapi.QualifiedName(name)]; ok {
		return q, true
	}
	q, ok := m[resourceapi.QualifiedName(draapi.DriverName+"/"+name)]
	return q, ok
}

// reservedPods are the pods a claim is reserved for.
func reservedPods(c *resourceapi.ResourceClaim) []resourceapi.ResourceClaimConsumerReference {
	var out []resourceapi.ResourceClaimConsumerReference
	for _, r := range c.Status.ReservedFor {
		if r.APIGroup == "" && r.Resource == "pods" {
			out = append(out, r)
		}
	}
	return out
}

// opaqueConfig is one decoded configuration of the driver and the
// requests it applies to ("": all).
type opaqueConfig struct {
	requests []string
	config   draapi.VGPUConfig
}

// opaqueConfigs decodes the driver's configurations of an allocation,
// the device class's first so that the claim's override them. A bad one
// is an error naming it as the user wrote it: spec.devices.config[k] of
// the claim, or config[k] of its device class.
func opaqueConfigs(all []resourceapi.DeviceAllocationConfiguration) ([]opaqueConfig, error) {
	var class, claim []opaqueConfig
	nClass, nClaim := 0, 0
	for _, c := range all {
		where := fmt.Sprintf("spec.devices.config[%d].opaque", nClaim)
		if c.Source == resourceapi.AllocationConfigSourceClass {
			where = fmt.Sprintf("the device class's config[%d].opaque", nClass)
			nClass++
		} else {
			nClaim++
		}
		if c.Opaque == nil || c.Opaque.Driver != draapi.DriverName {
			continue
		}
		cfg, err := draapi.DecodeConfig(c.Opaque.Parameters.Raw)
		if err != nil {
			return nil, fmt.Errorf("%s.%v", where, err)
		}
		oc := opaqueConfig{requests: c.Requests, config: cfg}
		if c.Source == resourceapi.AllocationConfigSourceClass {
			class = append(class, oc)
		} else {
			claim = append(claim, oc)
		}
	}
	return append(class, claim...), nil
}

// configFor merges the configurations that apply to request, in order:
// a later field given overrides an earlier one.
func configFor(configs []opaqueConfig, request string) draapi.VGPUConfig {
	var out draapi.VGPUConfig
	base := resourceclaim.BaseRequestRef(request)
	for _, c := range configs {
		if len(c.requests) > 0 && !slices.Contains(c.requests, request) && !slices.Contains(c.requests, base) {
			continue
		}
		if c.config.Priority != "" {
			out.Priority = c.config.Priority
		}
		if c.config.Mode != "" {
			out.Mode = c.config.Mode
		}
	}
	return out
}

func orLow(p string) string {
	if p == "" {
		return draapi.PriorityLow
	}
	return p
}
