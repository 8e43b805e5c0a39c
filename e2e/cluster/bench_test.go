package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/kube"
)

// BenchmarkPodToRunning is the time from the creation of k pods at once to
// all of them Running, for pods with a vGPU claim (512 MiB, memory only:
// the claim controller, the scheduler's allocation, the driver's prepare
// and CDI spec, the NRI adjustment) and the same pods without one, in
// alternation in one run; it reports both and their ratio, and asserts
// nothing. Run it as root with
//
//	go test -run '^$' -bench PodToRunning -benchtime 3x ./e2e/cluster/
func BenchmarkPodToRunning(b *testing.B) {
	n := theNode(b)
	for _, k := range []int{1, 10, 20} {
		b.Run(fmt.Sprintf("pods=%d", k), func(b *testing.B) {
			ns := n.c.Namespace(b)
			template(b, n.c, ns, "small", vgpu{memory: "512Mi"})
			var plain, claimed time.Duration
			for i := 0; i < b.N; i++ {
				plain += n.batch(b, ns, fmt.Sprintf("plain-%d", i), k, "")
				claimed += n.batch(b, ns, fmt.Sprintf("vgpu-%d", i), k, "small")
			}
			b.ReportMetric(float64(plain.Milliseconds())/float64(b.N), "plain-ms/batch")
			b.ReportMetric(float64(claimed.Milliseconds())/float64(b.N), "vgpu-ms/batch")
			b.ReportMetric(float64(claimed)/float64(plain), "vgpu/plain")
		})
	}
}

// batch creates k pods at once (with the template's claim, or none) and
// returns the time until all run; it then deletes them and waits until
// they are gone (their claims unprepared), which ns/op includes.
func (n *node) batch(b *testing.B, ns, prefix string, k int, template string) time.Duration {
	b.Helper()
	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, k)
	for j := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pod := kube.BusyboxPod(fmt.Sprintf("%s-%02d", prefix, j))
			if template != "" {
				pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}}
				pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
			}
			if _, err := n.c.CreatePod(ns, pod); err != nil {
				errs <- err
				return
			}
			_, err := n.c.WaitPod(ns, pod.Name, kube.PodTimeout, func(p *corev1.Pod) (bool, error) {
				return p.Status.Phase == corev1.PodRunning, nil
			})
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	took := time.Since(began)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	cx, cancel := context.WithTimeout(context.Background(), 2*pollTimeout)
	defer cancel()
	pods := n.c.Client().CoreV1().Pods(ns)
	if err := pods.DeleteCollection(cx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}, metav1.ListOptions{}); err != nil {
		b.Fatal(err)
	}
	for {
		list, err := pods.List(cx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if len(list.Items) == 0 {
			return took
		}
		time.Sleep(100 * time.Millisecond)
	}
}
