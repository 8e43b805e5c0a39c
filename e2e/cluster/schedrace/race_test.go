// Package schedrace shows, on kube-scheduler v1.37.2's own DRA claim
// tracker, why e2e/cluster's scheduler runs with a short
// --pod-max-in-unschedulable-pods-duration.
//
// With DRAConsumableCapacity, the tracker's GatherAllocatedState adds the
// consumed capacity of every in-flight allocation to that of the claims
// the assume cache holds as allocated. PreBind stores the written claim in
// the assume cache (and the informer may deliver it sooner) before it
// removes the in-flight entry, so for that moment one claim counts twice.
// Device and share IDs are sets, so a device without capacities is not
// affected; a capacity is a sum, so a pod filtered in that moment finds a
// card full one vGPU early. The in-flight removal raises no event, and the
// other claims' updates are "unrelated claim got modified" for it, so the
// pod waits for the scheduler's periodic flush of unschedulable pods.
//
// The test asserts the double count, so that it fails once a Kubernetes
// version without it is pinned here: then the flag can go.
package schedrace

import (
	"context"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"
	"k8s.io/utils/ptr"
)

// tracker is the scheduler's claim tracker over a fake API server that
// holds claim, synced.
func tracker(t *testing.T, claim *resourceapi.ResourceClaim) fwk.ResourceClaimTracker {
	t.Helper()
	gate := map[string]bool{"DRAConsumableCapacity": true}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(gate); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f := informers.NewSharedInformerFactory(fake.NewClientset(claim), 0)
	inf := f.Resource().V1().ResourceClaims().Informer()
	claims := assumecache.NewAssumeCache(klog.Background(), inf, "ResourceClaim", "", nil)
	mgr := dynamicresources.NewDRAManager(ctx, claims, nil, f)
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("informer for %v did not sync", typ)
		}
	}
	tr := mgr.ResourceClaims()
	// The assume cache learns of the claim from its own handler, after
	// the informer's sync.
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) {
			_, err := tr.Get(claim.Namespace, claim.Name)
			return err == nil, nil
		})
	if err != nil {
		t.Fatalf("the assume cache never held %s/%s: %v", claim.Namespace, claim.Name, err)
	}
	return tr
}

// vgpus is the "vgpus" capacity the tracker counts as allocated.
func vgpus(t *testing.T, tr fwk.ResourceClaimTracker) int64 {
	t.Helper()
	s, err := tr.GatherAllocatedState()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, c := range s.AggregatedCapacity {
		if q, ok := c["vgpus"]; ok {
			n += q.Value()
		}
	}
	return n
}

// The steps are the scheduler's for one claim of one vGPU, in the order
// Reserve and PreBind (bindClaim) take them.
func TestInFlightCapacityCountedTwice(t *testing.T) {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: "p18-gpu", UID: "u18", ResourceVersion: "1"}}
	tr := tracker(t, claim)
	allocated := claim.DeepCopy()
	allocated.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: "gpu.gpuslice.io", Pool: "node", Device: "gpu-0",
			ShareID: ptr.To(types.UID("s18")),
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{
				"vgpus": resource.MustParse("1")},
		}}}}

	// Reserve: the allocation is in flight.
	if err := tr.SignalClaimPendingAllocation(claim.UID, allocated); err != nil {
		t.Fatal(err)
	}
	reserved := vgpus(t, tr)
	// The status write has returned: bindClaim stores the claim in the
	// assume cache; the in-flight entry goes when PreBind returns.
	written := allocated.DeepCopy()
	written.ResourceVersion = "2"
	if err := tr.AssumeClaimAfterAPICall(written); err != nil {
		t.Fatal(err)
	}
	during := vgpus(t, tr)
	tr.MaybeRemoveClaimPendingAllocation(claim.UID, true)
	bound := vgpus(t, tr)

	t.Logf("one claim of 1 vGPU: %d reserved, %d while PreBind ends, %d bound", reserved, during, bound)
	if reserved != 1 || bound != 1 {
		t.Fatalf("reserved %d, bound %d; want 1 each: the steps no longer model this scheduler", reserved, bound)
	}
	if during == 1 {
		t.Fatal("the claim counts once while PreBind ends: this Kubernetes no longer double-counts, " +
			"so drop --pod-max-in-unschedulable-pods-duration from internal/kube/start.go")
	}
}
