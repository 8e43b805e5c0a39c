package install_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/e2e"
	"github.com/gpuslice/gpuslice/internal/helm"
	"github.com/gpuslice/gpuslice/internal/kube"
	"github.com/gpuslice/gpuslice/internal/ociimage"
	"github.com/gpuslice/gpuslice/internal/testenv"
)

// pollTimeout bounds the waits for the cluster's doing (generous for a
// loaded 2-core machine; polled, never slept through).
const pollTimeout = 90 * time.Second

// The chart deployed, upgraded with workloads running, and uninstalled,
// as an operator would, on the node's real kubelet and containerd.
func TestDeploy(t *testing.T) {
	helmBin := helm.Require(t)
	c := kube.Shared(t)
	if err := testenv.BuildC(); err != nil { // gstest, the simulated driver
		t.Fatal(err)
	}
	images := importImages(t, c)
	h := newHostPaths(filepath.Join(c.Dir(), "install")) // gone with the cluster
	if _, err := e2e.MakeDeviceRoot(h.devRoot); err != nil {
		t.Fatal(err)
	}
	simDir := filepath.Join(h.dir, "sim")
	if err := os.MkdirAll(simDir, 0o777); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	r := &release{c: c, helm: helmBin, host: h, env: []string{"HELM_CONFIG_HOME=" + home + "/config",
		"HELM_CACHE_HOME=" + home + "/cache", "HELM_DATA_HOME=" + home + "/data"}}
	if err := r.writeValues(filepath.Join(home, "values.yaml")); err != nil {
		t.Fatal(err)
	}
	// Registered before the workloads' namespace, so it runs after that
	// is emptied: the agent unprepares the claims of the pods going. A
	// failed install is uninstalled too (else its DaemonSet would make
	// agents again while the cluster's teardown drains the node).
	installed := true
	t.Cleanup(func() {
		if !installed {
			return
		}
		if err := r.uninstall(); err != nil && !t.Failed() {
			t.Error(err)
		}
	})
	ns := c.Namespace(t)

	began := time.Now()
	if err := r.install(tagOld); err != nil {
		t.Fatalf("%v\n%s", err, diagnose(c))
	}
	agent := waitAgent(t, c, images[tagOld], "")
	t.Logf("helm install: the agent's pod %s Ready on image %s in %.1f s", agent.Name, tagOld, time.Since(began).Seconds())
	checkShimInstalled(t, c, agent, h.shim)
	startWorkloads(t, c, ns, simDir)
	checkCaps(t, c, ns)
	checkMetrics(t, r.metrics, ns)
	running := workloadContainers(t, c, ns)
	oldShim := inode(t, h.shim)
	tls := webhookTLS(t, c)

	began = time.Now()
	if err := r.upgrade(tagNew); err != nil {
		t.Fatalf("%v\n%s", err, diagnose(c))
	}
	agent = waitAgent(t, c, images[tagNew], agent.UID)
	t.Logf("helm upgrade: the agent's pod %s Ready on image %s in %.1f s", agent.Name, tagNew, time.Since(began).Seconds())
	checkShimInstalled(t, c, agent, h.shim)
	if after := workloadContainers(t, c, ns); fmt.Sprint(after) != fmt.Sprint(running) {
		t.Errorf("the workloads' containers across the upgrade: %v, then %v; want the same, never restarted", running, after)
	}
	checkCaps(t, c, ns)
	checkMetrics(t, r.metrics, ns)
	checkShimKept(t, c, ns, oldShim, inode(t, h.shim))
	if after := webhookTLS(t, c); after != tls {
		t.Errorf("the webhook's TLS across the upgrade: %+v, then %+v; want it kept", tls, after)
	}
	checkAdmitted(t, c, ns, simDir)

	// The workloads go while the agent runs (it unprepares their claims),
	// then the release.
	for _, w := range workloads {
		if err := c.DeletePod(ns, w.name); err != nil {
			t.Fatal(err)
		}
	}
	objects, err := r.objects()
	if err != nil {
		t.Fatal(err)
	}
	// The query finds them all while installed, so its empty answer
	// after the uninstall means they are gone.
	if present, err := existing(c, objects); err != nil || len(present) <= len(objects) {
		t.Fatalf("the release's %d objects %v: found %v (%v); want each, and helm's records", len(objects), objects, present, err)
	}
	t.Logf("the release: %d objects (%s)", len(objects), strings.Join(objects, " "))
	began = time.Now()
	if err := r.uninstall(); err != nil {
		t.Fatal(err)
	}
	installed = false
	t.Logf("helm uninstall: done in %.1f s", time.Since(began).Seconds())
	if left, err := existing(c, objects); err != nil || len(left) > 0 {
		t.Errorf("after helm uninstall, of the release's %d objects: %v left (%v); want none", len(objects), left, err)
	}
	checkUninstalled(t, c)
	checkNoSockets(t, c, h)
}

// importImages builds the image twice, the second with a label more (a
// new image: another digest), and imports both into the node's containerd.
func importImages(t *testing.T, c *kube.Cluster) map[string]*ociimage.Image {
	t.Helper()
	images := map[string]*ociimage.Image{}
	for tag, labels := range map[string][]string{tagOld: nil, tagNew: {"io.gpuslice.e2e.build=" + tagNew}} {
		tar := filepath.Join(t.TempDir(), "gpuslice-"+tag+".tar")
		err := ociimage.Build(tar, []string{imageRepo + ":" + tag}, labels...)
		if err == nil {
			images[tag], err = ociimage.Read(tar)
		}
		if err == nil {
			err = c.Containerd().ImportImage(tar)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if images[tagOld].ManifestDigest() == images[tagNew].ManifestDigest() {
		t.Fatalf("the two builds are one image (%s): the upgrade would change nothing", images[tagOld].ManifestDigest())
	}
	return images
}

// waitAgent waits until the DaemonSet's one pod is Ready, is not the pod
// old (a UID; "" for none), and runs im, and returns it.
func waitAgent(t *testing.T, c *kube.Cluster, im *ociimage.Image, old types.UID) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	var last error
	deadline := time.Now().Add(pollTimeout)
	for time.Now().Before(deadline) {
		pod, last = agentPod(c, im, old)
		if last == nil {
			return pod
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("the agent's pod: %v\n%s", last, diagnose(c))
	return nil
}

func agentPod(c *kube.Cluster, im *ociimage.Image, old types.UID) (*corev1.Pod, error) {
	cx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := c.Client().CoreV1().Pods(releaseNS).List(cx, metav1.ListOptions{
		LabelSelector: instanceLabel + ",app.kubernetes.io/component=agent"})
	if err != nil {
		return nil, err
	}
	if len(pods.Items) != 1 {
		return nil, fmt.Errorf("%d pods of the DaemonSet; want 1", len(pods.Items))
	}
	p := &pods.Items[0]
	if p.UID == old {
		return nil, fmt.Errorf("pod %s is still the one before the upgrade", p.Name)
	}
	ready := false
	for _, cond := range p.Status.Conditions {
		ready = ready || cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue
	}
	if !ready || len(p.Status.ContainerStatuses) != 1 {
		return nil, fmt.Errorf("pod %s not Ready: %s", p.Name, p.Status.Phase)
	}
	s := p.Status.ContainerStatuses[0]
	// containerd names an imported image by its config's digest.
	if !strings.Contains(s.ImageID, im.Manifest.Config.Digest) && !strings.Contains(s.ImageID, im.ManifestDigest()) {
		return nil, fmt.Errorf("pod %s runs image %s (%s); want %s", p.Name, s.Image, s.ImageID, im.ManifestDigest())
	}
	return p, nil
}

// checkShimInstalled checks that the agent's init container installed the
// shim by rename, read-only, where the configuration says.
func checkShimInstalled(t *testing.T, c *kube.Cluster, agent *corev1.Pod, shim string) {
	t.Helper()
	out, err := c.Kubectl("logs", "-n", releaseNS, agent.Name, "-c", "install-shim")
	if err != nil || !strings.Contains(out, "as "+shim+" (by rename)") {
		t.Errorf("install-shim's log: %v\n%s\nwant it to say it installed %s by rename", err, out, shim)
	}
	st, err := os.Stat(shim)
	if err != nil || st.Mode().Perm() != 0o444 {
		t.Errorf("the shim on the host: %v, mode %v; want 0444", err, st.Mode())
	}
}

// workloadContainers are the workloads' container IDs, failing the test
// if one has restarted.
func workloadContainers(t *testing.T, c *kube.Cluster, ns string) map[string]string {
	t.Helper()
	ids := map[string]string{}
	for _, w := range workloads {
		p, err := c.WaitPodRunning(ns, w.name)
		if err != nil {
			t.Fatal(err)
		}
		s := p.Status.ContainerStatuses[0]
		if s.RestartCount != 0 {
			t.Errorf("%s: restarted %d times", w.name, s.RestartCount)
		}
		ids[w.name] = s.ContainerID
	}
	return ids
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

// checkShimKept checks that the upgrade's init container put a new file
// at the shim's host path while the running containers keep the one they
// started with.
func checkShimKept(t *testing.T, c *kube.Cluster, ns string, before, after uint64) {
	t.Helper()
	if after == before {
		t.Errorf("the shim's host file is inode %d before and after the upgrade; want a new file renamed over it", before)
	}
	for _, w := range workloads {
		out, err := c.Exec(ns, w.name, "main", "stat", "-c", "%i", "/usr/local/gpuslice/libgpuslice.so")
		if err != nil || strings.TrimSpace(out) != fmt.Sprint(before) {
			t.Errorf("%s: its shim is inode %q (%v); want %d, the one it started with", w.name, strings.TrimSpace(out), err, before)
		}
	}
}

// checkUninstalled checks that nothing with the release's label is left
// (the DaemonSet's pod, which the garbage collector deletes after it,
// may take its grace period to go), and that the driver's ResourceSlices
// go: the agent stopped cleanly and the kubelet saw its driver go.
func checkUninstalled(t *testing.T, c *kube.Cluster) {
	t.Helper()
	began := time.Now()
	left, err := poll(func() (int, error) {
		l, err := labelled(c)
		return len(l), err
	})
	if err != nil || left > 0 {
		l, _ := labelled(c)
		t.Errorf("after helm uninstall: %v %v; want nothing with %s", l, err, instanceLabel)
	}
	t.Logf("helm uninstall: nothing labelled %s left after %.1f s", instanceLabel, time.Since(began).Seconds())
	slices, err := poll(func() (int, error) {
		cx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		list, err := c.Client().ResourceV1().ResourceSlices().List(cx, metav1.ListOptions{
			FieldSelector: "spec.driver=gpu.gpuslice.io"})
		if err != nil {
			return 0, err
		}
		return len(list.Items), nil
	})
	if err != nil || slices > 0 {
		t.Errorf("after helm uninstall: %d ResourceSlices of gpu.gpuslice.io (%v) after %s; want none", slices, err, pollTimeout)
	}
	t.Logf("helm uninstall: the driver's ResourceSlices gone after %.1f s", time.Since(began).Seconds())
}

// checkNoSockets checks that the agent, stopped by SIGTERM, removed its
// sockets from the host: the DRA driver's registration (which a kubelet
// would otherwise dial at each start) and service, and its status socket.
func checkNoSockets(t *testing.T, c *kube.Cluster, h hostPaths) {
	t.Helper()
	var left []string
	for _, glob := range []string{
		filepath.Join(c.PluginRegistryDir(), "gpu.gpuslice.io*"),
		filepath.Join(c.PluginsDir(), "gpu.gpuslice.io", "*.sock"),
		h.socket,
	} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, m...)
	}
	if len(left) > 0 {
		t.Errorf("after helm uninstall, the agent's sockets are still on the host: %v", left)
	}
}

// poll calls count until it returns 0 or pollTimeout has passed, and
// returns its last answer.
func poll(count func() (int, error)) (int, error) {
	deadline := time.Now().Add(pollTimeout)
	for {
		n, err := count()
		if (err == nil && n == 0) || time.Now().After(deadline) {
			return n, err
		}
		time.Sleep(time.Second)
	}
}

// tlsState is the webhook's TLS as the chart generated it.
type tlsState struct{ ca, cert, caBundle string }

// webhookTLS reads the webhook's Secret and the CA its configuration
// trusts, which must be the Secret's.
func webhookTLS(t *testing.T, c *kube.Cluster) tlsState {
	t.Helper()
	cx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sec, err := c.Client().CoreV1().Secrets(releaseNS).Get(cx, releaseName+"-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mwc, err := c.Client().AdmissionregistrationV1().MutatingWebhookConfigurations().Get(cx, releaseName+"-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := tlsState{ca: string(sec.Data["ca.crt"]), cert: string(sec.Data["tls.crt"])}
	if len(mwc.Webhooks) > 0 {
		s.caBundle = string(mwc.Webhooks[0].ClientConfig.CABundle)
	}
	if s.ca == "" || s.caBundle != s.ca {
		t.Errorf("the webhook's configuration trusts %q; want the CA of its Secret, %q", s.caBundle, s.ca)
	}
	return s
}

// checkAdmitted checks that the upgraded webhook still translates a pod
// in the reference's form into a claim.
func checkAdmitted(t *testing.T, c *kube.Cluster, ns, simDir string) {
	t.Helper()
	w := workload{name: "after", resources: workloads[1].resources}
	m, err := manifest(podTemplate, ns, w, simDir)
	if err == nil {
		err = applyAdmitted(c, m)
	}
	if err != nil {
		t.Fatalf("a reference-form pod after the upgrade: %v", err)
	}
	cx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := c.Client().CoreV1().Pods(ns).Get(cx, w.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Spec.ResourceClaims) != 1 || len(p.Spec.Containers[0].Resources.Limits) != 0 {
		t.Errorf("a reference-form pod after the upgrade, as admitted: claims %+v, limits %v; want one claim and no limits",
			p.Spec.ResourceClaims, p.Spec.Containers[0].Resources.Limits)
	}
	if err := c.DeletePod(ns, w.name); err != nil {
		t.Fatal(err)
	}
}

// diagnose is what a failure shows: the release's pods, the agent's log
// and the namespace's events.
func diagnose(c *kube.Cluster) string {
	var b strings.Builder
	for _, args := range [][]string{
		{"get", "pods", "-A", "-o", "wide"},
		{"describe", "pods", "-n", releaseNS},
		{"logs", "-n", releaseNS, "ds/" + releaseName + "-agent", "-c", "agent", "--tail", "40"},
	} {
		out, err := c.Kubectl(args...)
		fmt.Fprintf(&b, "$ kubectl %s\n%s%v\n", strings.Join(args, " "), out, err)
	}
	return b.String()
}
