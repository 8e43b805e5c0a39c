package dra

// Two claims of different isolation modes can be allocated the same
// unused card before either is prepared: the slice says "unused" until a
// prepare changes it. The second prepare fails (the kubelet shows the
// reason as an event on the pod, and retries), and its pod must never run
// there. A pod a controller owns (a Deployment's, a Job's) is evicted, so
// that its controller makes a new one, with a new claim, which the
// scheduler places against the republished slice; a bare pod keeps
// failing with the event until someone deletes it.

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuslice/gpuslice/pkg/placement"
)

// evictTimeout bounds the API calls of one eviction.
const evictTimeout = 30 * time.Second

// modeRace says whether a prepare failed because the card runs vGPUs of
// the other isolation mode: the race a new allocation avoids. Capacity
// refusals are not: the scheduler counts claims exactly, so those come
// from the annotation route's vGPUs, which a new allocation would meet
// again on the same card.
func modeRace(err error) bool {
	var pe *placement.Error
	return errors.As(err, &pe) && pe.Reason == placement.ModeMismatch
}

// rescheduler evicts the controller-owned pods of a claim. With the
// node's own credentials (the Node authorizer and NodeRestriction), it
// can get and evict only pods bound to its node.
type rescheduler struct {
	// ctx is the driver's: the evictions outlive the kubelet's call.
	ctx    context.Context
	client kubernetes.Interface
	log    *slog.Logger
	wg     sync.WaitGroup // tests wait for the evictions
}

// reschedule evicts, in the background (the kubelet's prepare call does
// not wait for the API server, and its context ends with the call), each
// pod of claim c that a controller owns.
func (r *rescheduler) reschedule(c *resourceapi.ResourceClaim, why error) {
	for _, ref := range reservedPods(c) {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			ctx, cancel := context.WithTimeout(r.ctx, evictTimeout)
			defer cancel()
			r.evict(ctx, c.Namespace, ref, why)
		}()
	}
}

func (r *rescheduler) evict(ctx context.Context, ns string, ref resourceapi.ResourceClaimConsumerReference, why error) {
	log := r.log.With("pod", ns+"/"+ref.Name, "reason", why.Error())
	pod, err := r.client.CoreV1().Pods(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		log.Error("DRA: reading the pod of a claim in an isolation-mode race", "error", err)
		return
	}
	if pod.UID != ref.UID {
		return // gone, and a new pod of that name is not this claim's
	}
	if metav1.GetControllerOf(pod) == nil {
		log.Warn("DRA: a bare pod lost an isolation-mode race for its card; it stays unprepared until deleted")
		return
	}
	uid := pod.UID
	err = r.client.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: ns},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	})
	if err != nil {
		log.Error("DRA: evicting a pod that lost an isolation-mode race", "error", err)
		return
	}
	log.Info("DRA: evicted a pod that lost an isolation-mode race for its card; its controller makes a new one")
}
