package kube_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/kube"
)

// pluginDriver is the driver name of the no-op kubelet plugin below.
const pluginDriver = "plugin.kube.gpuslice.io"

// noopPlugin is a DRA kubelet plugin that prepares claims by recording
// them (no CDI devices: the container runs as it is) and unprepares them
// by forgetting them.
type noopPlugin struct {
	t          *testing.T
	mu         sync.Mutex
	prepared   map[types.UID]map[resourcev1.QualifiedName]apiresource.Quantity // consumed capacity
	unprepared map[types.UID]bool
}

func (p *noopPlugin) PrepareResourceClaims(_ context.Context, claims []*resourcev1.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		var res kubeletplugin.PrepareResult
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != pluginDriver {
				continue
			}
			res.Devices = append(res.Devices, kubeletplugin.Device{Requests: []string{r.Request},
				PoolName: r.Pool, DeviceName: r.Device, ShareID: r.ShareID})
			p.prepared[claim.UID] = r.ConsumedCapacity
		}
		out[claim.UID] = res
	}
	return out, nil
}

func (p *noopPlugin) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[types.UID]error{}
	for _, c := range claims {
		p.unprepared[c.UID] = true
		out[c.UID] = nil
	}
	return out, nil
}

func (p *noopPlugin) HandleError(_ context.Context, err error, msg string) {
	p.t.Logf("noop DRA plugin: %s: %v", msg, err)
}

func (p *noopPlugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func (p *noopPlugin) state(uid types.UID) (consumed map[resourcev1.QualifiedName]apiresource.Quantity, unprepared bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.prepared[uid], p.unprepared[uid]
}

// startNoopPlugin registers the plugin with the node's kubelet through the
// cluster's plugin registry directory, publishes one shareable device, and
// stops when the test ends.
func startNoopPlugin(t *testing.T, c *kube.Cluster) *noopPlugin {
	t.Helper()
	p := &noopPlugin{t: t, prepared: map[types.UID]map[resourcev1.QualifiedName]apiresource.Quantity{},
		unprepared: map[types.UID]bool{}}
	dataDir := filepath.Join(c.PluginsDir(), pluginDriver)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		t.Fatal(err)
	}
	helper, err := kubeletplugin.Start(context.Background(), p,
		kubeletplugin.DriverName(pluginDriver), kubeletplugin.NodeName(c.NodeName()),
		kubeletplugin.KubeClient(c.Client()), kubeletplugin.HealthService(false),
		kubeletplugin.RegistrarDirectoryPath(c.PluginRegistryDir()),
		kubeletplugin.PluginDataDirectoryPath(dataDir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		helper.Stop()
		_ = c.Client().ResourceV1().ResourceSlices().DeleteCollection(context.Background(), metav1.DeleteOptions{},
			metav1.ListOptions{FieldSelector: "spec.driver=" + pluginDriver})
		_ = os.RemoveAll(dataDir)
	})
	err = waitUntil(time.Minute, func() error {
		if s := helper.RegistrationStatus(); s == nil || !s.PluginRegistered {
			return fmt.Errorf("the kubelet has not registered the plugin: %+v", s)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, c.Logs("kubelet", 30))
	}
	device := probeSlice(c.NodeName(), probeCapacity(wholeMiB(ptr.To(apiresource.MustParse("1Mi"))))).Spec.Devices
	err = helper.PublishResources(t.Context(), resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		c.NodeName(): {Slices: []resourceslice.Slice{{Devices: device}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitUntil polls f for up to timeout and returns its last error.
func waitUntil(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestDRAKubeletPlugin runs a claim's pod through a kubelet plugin
// registered under the cluster's PluginRegistryDir: the kubelet has the
// plugin prepare the claim (with the consumed capacity the scheduler
// allocated) and the pod runs; across a kubelet restart the pod keeps
// running and the new kubelet unprepares the claim when the pod goes.
func TestDRAKubeletPlugin(t *testing.T) {
	c := kube.Shared(t)
	cx := t.Context()
	res := c.Client().ResourceV1()
	makeDeviceClass(t, c, pluginDriver)
	plugin := startNoopPlugin(t, c)

	ns := c.Namespace(t)
	tmpl := vgpuTemplate("vgpu-4g", "4Gi", "30")
	tmpl.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName = pluginDriver
	tmpl.Spec.Spec.Devices.Requests[0].Exactly.Selectors = nil
	if _, err := res.ResourceClaimTemplates(ns).Create(cx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreatePod(ns, podWithTemplate("claimant", "vgpu-4g")); err != nil {
		t.Fatal(err)
	}
	pod, err := c.WaitPodRunning(ns, "claimant")
	if err != nil {
		t.Fatal(err)
	}
	claim, err := res.ResourceClaims(ns).Get(cx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	consumed, _ := plugin.state(claim.UID)
	if m := consumed["memory"]; m.Cmp(apiresource.MustParse("4Gi")) != 0 {
		t.Errorf("the plugin prepared claim %s with consumed capacity %v, want memory 4Gi", claim.Name, consumed)
	}

	if err := c.RestartKubelet(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitPodRunning(ns, "claimant"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeletePod(ns, "claimant"); err != nil {
		t.Fatal(err)
	}
	err = waitUntil(time.Minute, func() error {
		if _, done := plugin.state(claim.UID); !done {
			return errors.New("the kubelet has not unprepared the claim")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, c.Logs("kubelet", 30))
	}
}
