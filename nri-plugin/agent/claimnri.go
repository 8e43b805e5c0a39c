package agent

// The NRI side of a DRA claim. Its CDI device gave each of its containers
// the devices, the variables and the mounts (ClaimInjection); what only
// the NRI side can do is done here when such a container is created: the
// shim put first in the image's own LD_PRELOAD (CDI can only replace a
// variable), the pod and cgroup recorded, and in module mode the vGPUs
// created in gpuslice.ko bound to the pod's cgroup when the container
// starts.
//
// The pod's cgroup, not the container's: the kernel gives a process the
// vGPU of its cgroup's nearest ancestor that has one (ATTACH), so every
// container of the pod that uses the claim shares its one vGPU per card,
// as the scheduler counted it once, and one created later (a restart)
// finds it there. Containers of the pod without the claim see none of
// its cards (their device nodes come only with the CDI device). Hence
// the rules: a claim serves one pod; a container uses one claim; a pod
// asks by annotations or by claims, not both.

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/containerd/nri/pkg/api"

	"github.com/gpuslice/gpuslice/pkg/quota"
	"github.com/gpuslice/gpuslice/pkg/state"
)

// EnvClaim is the variable of a claim's CDI device naming its UID.
const EnvClaim = "GPUSLICE_CLAIM"

// claimEnvKey is a claim's own variable besides EnvClaim: two CDI devices
// in one container would leave one EnvClaim, but both of these.
func claimEnvKey(uid string) string {
	return EnvClaim + "_" + strings.ReplaceAll(uid, "-", "_")
}

// ClaimsOf lists the claims whose CDI devices a container got, by UID,
// from its environment.
func ClaimsOf(env []string) []string {
	var out []string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, EnvClaim+"_") && k == claimEnvKey(v) {
			out = append(out, v)
		} else if k == EnvClaim && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// asksByAnnotation says whether a pod or container carries any
// gpuslice.io/gpu-* annotation, meant for any of the pod's containers.
func asksByAnnotation(pod *api.PodSandbox, ctr *api.Container) bool {
	for _, m := range []map[string]string{pod.GetAnnotations(), ctr.GetAnnotations()} {
		for k := range m {
			if strings.HasPrefix(k, quota.KeyPrefix) {
				return true
			}
		}
	}
	return false
}

func bothWays(pod *api.PodSandbox, claim string) error {
	return fmt.Errorf("pod %s/%s asks for vGPUs both by %s* annotations and by the DRA claim %s: use one way (claims where the cluster has DRA, annotations elsewhere)",
		pod.GetNamespace(), pod.GetName(), quota.KeyPrefix, claim)
}

// createClaimContainer records a claim container and returns its
// adjustment; annotated says the container or its pod asks by
// annotations too.
func (a *Agent) createClaimContainer(pod *api.PodSandbox, ctr *api.Container, uids []string, annotated bool) (*api.ContainerAdjustment, error) {
	if len(uids) > 1 {
		return nil, fmt.Errorf("the container uses %d gpuslice claims (%s): one claim per container; ask for several cards in one claim",
			len(uids), strings.Join(uids, ", "))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	al, ok := a.opts.Store.Get(state.ClaimKey(uids[0]))
	if !ok {
		return nil, fmt.Errorf("%s=%q names no claim prepared on this node (the DRA driver prepares a claim before its containers are created)", EnvClaim, uids[0])
	}
	name := al.Claim.Namespace + "/" + al.Claim.Name
	if annotated || a.podAnnotated(pod.GetUid()) != "" {
		return nil, bothWays(pod, name)
	}
	if err := a.claimPod(&al, pod, ctr); err != nil {
		return nil, fmt.Errorf("claim %s: %w", name, err)
	}
	if err := a.oneVGPUPerCard(al); err != nil {
		return nil, fmt.Errorf("claim %s: %w", name, err)
	}
	adj := &api.ContainerAdjustment{}
	adj.AddEnv("LD_PRELOAD", preload(a.opts.Layout.ShimContainer, ctr.GetEnv()))
	a.opts.Log.Info("container of a DRA claim", "pod", pod.GetNamespace()+"/"+pod.GetName(),
		"container", ctr.GetName(), "id", ctr.GetId(), "claim", name, "cards", cardList(al))
	return adj, nil
}

// claimPod records the claim's pod, cgroup and containers, refusing a
// second pod; a.mu held.
func (a *Agent) claimPod(al *state.Allocation, pod *api.PodSandbox, ctr *api.Container) error {
	if al.PodUID != "" && pod.GetUid() != "" && al.PodUID != pod.GetUid() {
		return fmt.Errorf("serves pod %s/%s already: a gpuslice claim serves the containers of one pod (give each pod its own claim, from a ResourceClaimTemplate)",
			al.Namespace, al.Pod)
	}
	cg := ""
	if p := cgroupPath(ctr.GetLinux().GetCgroupsPath()); p != "" {
		cg = filepath.Dir(p)
	}
	if al.CgroupPath != "" && cg != "" && cg != al.CgroupPath {
		return fmt.Errorf("its vGPU is bound to cgroup %s, the container is in %s", al.CgroupPath, cg)
	}
	was := *al // the fields compared below are strings
	al.PodUID, al.Pod, al.Namespace = pod.GetUid(), pod.GetName(), pod.GetNamespace()
	if cg != "" {
		al.CgroupPath = cg
	}
	names := strings.Split(al.Name, ",")
	if !slices.Contains(names, ctr.GetName()) {
		al.Name = strings.Trim(al.Name+","+ctr.GetName(), ",")
	}
	if al.PodUID == was.PodUID && al.Pod == was.Pod && al.Namespace == was.Namespace &&
		al.CgroupPath == was.CgroupPath && al.Name == was.Name {
		return nil
	}
	return a.opts.Store.Put(*al)
}

// oneVGPUPerCard refuses (module mode) a claim on a card where another
// claim of its pod is: both would be bound to the pod's cgroup, and the
// module gives a cgroup one vGPU per card. a.mu held.
func (a *Agent) oneVGPUPerCard(al state.Allocation) error {
	if al.Enforce != EnforceModule {
		return nil
	}
	for _, other := range a.opts.Store.All() {
		if other.Claim == nil || other.Container == al.Container || other.PodUID != al.PodUID {
			continue
		}
		for _, v := range al.VGPUs {
			for _, w := range other.VGPUs {
				if v.Card == w.Card {
					return fmt.Errorf("pod %s/%s has claim %s/%s on card %d too: with gpuslice.ko a pod gets one vGPU per card; ask for both in one claim",
						al.Namespace, al.Pod, other.Claim.Namespace, other.Claim.Name, v.Card)
				}
			}
		}
	}
	return nil
}

// podAnnotated is the container id of an allocation of the annotation
// route in pod uid, or ""; a.mu held.
func (a *Agent) podAnnotated(uid string) string {
	if uid == "" {
		return ""
	}
	for _, al := range a.opts.Store.All() {
		if al.Claim == nil && al.PodUID == uid {
			return al.Container
		}
	}
	return ""
}

// podClaim is the name of a claim serving pod uid, or ""; a.mu held.
func (a *Agent) podClaim(uid string) string {
	if uid == "" {
		return ""
	}
	for _, al := range a.opts.Store.All() {
		if al.Claim != nil && al.PodUID == uid {
			return al.Claim.Namespace + "/" + al.Claim.Name
		}
	}
	return ""
}

// startClaimContainer binds (module mode) the claim's vGPUs to its pod's
// cgroup, unless a container of the pod did already. A failure fails the
// start: nothing runs unisolated.
func (a *Agent) startClaimContainer(uid string) error {
	if a.opts.Enforce != EnforceModule {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	al, ok := a.opts.Store.Get(state.ClaimKey(uid))
	if !ok {
		return fmt.Errorf("%s=%q names no claim prepared on this node", EnvClaim, uid)
	}
	return a.bindClaim(&al)
}

// bindClaim creates the claim's unbound vGPUs bound to its pod's cgroup;
// a.mu held.
func (a *Agent) bindClaim(al *state.Allocation) error {
	if !unbound(*al) {
		return nil
	}
	if al.CgroupPath == "" {
		return fmt.Errorf("claim %s/%s: no cgroup recorded for its pod (module mode binds the vGPU to it)", al.Claim.Namespace, al.Claim.Name)
	}
	return a.bindDir(al, filepath.Join(a.opts.Layout.CgroupRoot, al.CgroupPath))
}

// unbound says whether an allocation has a vGPU not created in the module.
func unbound(al state.Allocation) bool {
	return slices.ContainsFunc(al.VGPUs, func(v state.VGPU) bool { return v.KmodID < 0 })
}

// bindClaimsStarted binds (module mode) the claims of containers that
// started while the agent was away, after forgetting the module ids of
// vGPUs the module no longer has (a reboot empties it; the record, on
// disk, stays): those are created again. a.mu held.
func (a *Agent) bindClaimsStarted(ctrs []*api.Container) {
	for _, al := range a.opts.Store.All() {
		if al.Claim != nil && al.Enforce == EnforceModule {
			a.forgetLostVGPUs(al)
		}
	}
	for _, c := range ctrs {
		uids := ClaimsOf(c.GetEnv())
		if len(uids) != 1 || c.GetState() != api.ContainerState_CONTAINER_RUNNING {
			continue
		}
		al, ok := a.opts.Store.Get(state.ClaimKey(uids[0]))
		if !ok || al.Enforce != EnforceModule {
			continue
		}
		if err := a.bindClaim(&al); err != nil {
			a.opts.Log.Error("binding the claim of a container started while the agent was away",
				"id", c.GetId(), "claim", uids[0], "error", err)
		}
	}
}

// forgetLostVGPUs marks unbound the vGPUs of a claim the module does not
// have; a.mu held.
func (a *Agent) forgetLostVGPUs(al state.Allocation) {
	lost := false
	for i, v := range al.VGPUs {
		if v.KmodID < 0 {
			continue
		}
		s, err := a.opts.Kmod.Stats(uint32(v.Card), uint32(v.KmodID))
		if (err != nil && !errors.Is(err, syscall.ENOENT)) || (err == nil && s.Spec.CgroupID == al.CgroupID) {
			continue // there, or unknown: creating another would fail
		}
		al.VGPUs[i].KmodID, lost = -1, true
	}
	if !lost {
		return
	}
	a.opts.Log.Warn("the module has lost vGPUs of a claim; they are created again when its containers start",
		"claim", al.Claim.Namespace+"/"+al.Claim.Name)
	if err := a.opts.Store.Put(al); err != nil {
		a.opts.Log.Error("recording a claim's lost vGPUs", "claim", al.Claim.UID, "error", err)
	}
}
