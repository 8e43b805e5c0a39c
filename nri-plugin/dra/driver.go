// Package dra is the node agent's DRA driver, gpu.gpuslice.io: a kubelet
// plugin (k8s.io/dynamic-resource-allocation/kubeletplugin) beside the
// agent's NRI plugin, in the same process and over the same agent.
//
// It publishes the node's cards in a ResourceSlice (slice.go): one device
// per card, shared by many claims, with the capacities the scheduler
// counts (memory, cores, vGPUs) and the card's isolation mode, republished
// whenever a vGPU comes or goes by either door. The kubelet then asks it
// to prepare the claims of a pod bound to the node: it reads what the
// scheduler allocated (claim.go), has the agent check and record the
// vGPUs (agent.PrepareClaim) and writes the claim's CDI spec (cdi.go),
// whose device the kubelet hands to the runtime for the claim's
// containers. Unprepare undoes it all.
package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sync"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/nri-plugin/agent"
	"github.com/gpuslice/gpuslice/pkg/draapi"
	"github.com/gpuslice/gpuslice/pkg/state"
)

// Defaults of Options.
const (
	DefaultKubeletRootDir = "/var/lib/kubelet"
	DefaultCDIDir         = "/var/run/cdi"
)

// Options are the driver's settings.
type Options struct {
	Agent    *agent.Agent
	NodeName string // the node's name, and its pool's
	Client   kubernetes.Interface
	// KubeletRootDir holds plugins_registry/, where the kubelet finds the
	// driver, and plugins/gpu.gpuslice.io/, its socket.
	KubeletRootDir string
	CDIDir         string // where the claims' CDI specs go (the runtime reads it)
	Log            *slog.Logger
}

// Driver is the running DRA driver.
type Driver struct {
	opts   Options
	cdi    *cdiSpecs
	helper *kubeletplugin.Helper
	resch  *rescheduler

	republish chan struct{}
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	mu        sync.Mutex
	published []resourceapi.Device // the last devices handed to the helper
}

// Start registers the driver with the kubelet and starts publishing the
// node's cards; Stop undoes it.
func Start(ctx context.Context, o Options) (*Driver, error) {
	if o.Agent == nil || o.Client == nil || o.NodeName == "" {
		return nil, errors.New("dra: the driver needs the agent, a Kubernetes client and the node's name")
	}
	if o.KubeletRootDir == "" {
		o.KubeletRootDir = DefaultKubeletRootDir
	}
	if o.CDIDir == "" {
		o.CDIDir = DefaultCDIDir
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	registry := filepath.Join(o.KubeletRootDir, "plugins_registry")
	data := filepath.Join(o.KubeletRootDir, "plugins", draapi.DriverName)
	// The kubelet creates neither for a plugin: the plugin must.
	for _, dir := range []string{registry, data} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("dra: %w", err)
		}
	}
	specs, err := newCDISpecs(o.CDIDir)
	if err != nil {
		return nil, fmt.Errorf("dra: %w", err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(ctx, logr.FromSlogHandler(o.Log.Handler())))
	d := &Driver{opts: o, cdi: specs, republish: make(chan struct{}, 1), cancel: cancel,
		resch: &rescheduler{ctx: ctx, client: o.Client, log: o.Log}}
	d.helper, err = kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(draapi.DriverName),
		kubeletplugin.NodeName(o.NodeName),
		kubeletplugin.KubeClient(o.Client),
		kubeletplugin.RegistrarDirectoryPath(registry),
		kubeletplugin.PluginDataDirectoryPath(data),
		kubeletplugin.HealthService(false))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("dra: the kubelet plugin: %w", err)
	}
	o.Agent.OnChange(d.changed)
	d.changed()
	d.wg.Add(1)
	go d.publishLoop(ctx)
	o.Log.Info("DRA driver registered", "driver", draapi.DriverName, "node", o.NodeName,
		"registry", registry, "cdi", o.CDIDir)
	return d, nil
}

// Stop unregisters the driver (the kubelet sees its socket go) and stops
// publishing; the slice stays for the next agent.
func (d *Driver) Stop() {
	d.cancel()
	d.wg.Wait()
	d.helper.Stop()
}

// changed asks for a republish; it never blocks (the agent calls it with
// its lock held).
func (d *Driver) changed() {
	select {
	case d.republish <- struct{}{}:
	default:
	}
}

func (d *Driver) publishLoop(ctx context.Context) {
	defer d.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.republish:
			d.publish(ctx)
		}
	}
}

// publish hands the helper the cards as they are now, if they changed.
func (d *Driver) publish(ctx context.Context) {
	devs := devices(d.opts.Agent.Cards(), d.opts.Agent.CardModes())
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.published != nil && reflect.DeepEqual(devs, d.published) {
		return
	}
	res := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.opts.NodeName: {Slices: []resourceslice.Slice{{Devices: devs}}}}}
	if err := d.helper.PublishResources(ctx, res); err != nil {
		d.opts.Log.Error("DRA: publishing the node's cards", "error", err)
		return
	}
	d.published = devs
}

// PrepareResourceClaims prepares each claim; one that cannot be prepared
// gets its reason, which the kubelet shows as an event on the pod, and is
// asked for again later.
func (d *Driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		out[c.UID] = d.prepare(c)
	}
	return out, nil
}

func (d *Driver) prepare(c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	al, err := d.record(c)
	if err != nil {
		d.opts.Log.Warn("DRA: claim not prepared", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "error", err)
		if modeRace(err) {
			// The slice still said unused when the scheduler chose the
			// card: now it does not, and a new pod would go elsewhere.
			d.changed()
			d.resch.reschedule(c, err)
		}
		return kubeletplugin.PrepareResult{Err: err}
	}
	in, err := d.opts.Agent.ClaimInjection(al)
	if err == nil {
		err = d.cdi.write(al.Claim.UID, in)
	}
	if err != nil {
		d.opts.Log.Error("DRA: claim not prepared", "claim", c.Namespace+"/"+c.Name, "error", err)
		return kubeletplugin.PrepareResult{Err: err}
	}
	ids := append([]string{cdiDeviceID(al.Claim.UID)}, in.CDIDevices...)
	return kubeletplugin.PrepareResult{Devices: resultDevices(al, ids)}
}

// record is the claim's record: the one there (prepared before, by this
// agent or the one before it), or a new one.
func (d *Driver) record(c *resourceapi.ResourceClaim) (state.Allocation, error) {
	if al, ok := d.opts.Agent.Claim(string(c.UID)); ok {
		return al, nil
	}
	req, err := claimRequest(c, d.opts.NodeName)
	if err != nil {
		return state.Allocation{}, err
	}
	al, err := d.opts.Agent.PrepareClaim(req)
	if err == nil {
		d.opts.Log.Info("DRA: claim prepared", "claim", c.Namespace+"/"+c.Name, "uid", c.UID,
			"pod", al.Namespace+"/"+al.Pod)
	}
	return al, err
}

// resultDevices are the kubelet's devices of a prepared claim: each of
// its vGPUs, with the claim's CDI devices (the runtime injects each once).
func resultDevices(al state.Allocation, ids []string) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(al.VGPUs))
	for _, v := range al.VGPUs {
		dev := kubeletplugin.Device{Requests: []string{v.Request}, PoolName: al.Claim.Pool,
			DeviceName: deviceName(v.Card), CDIDeviceIDs: ids}
		if v.ShareID != "" {
			share := types.UID(v.ShareID)
			dev.ShareID = &share
		}
		out = append(out, dev)
	}
	return out
}

// UnprepareResourceClaims releases each claim and removes its CDI spec;
// a claim not prepared is no error.
func (d *Driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		d.opts.Agent.UnprepareClaim(string(c.UID))
		out[c.UID] = d.cdi.remove(string(c.UID))
		d.opts.Log.Info("DRA: claim unprepared", "claim", c.Namespace+"/"+c.Name, "uid", c.UID)
	}
	return out, nil
}

// HandleError logs the helper's background errors. None stops the agent:
// its NRI side serves the annotation route whatever the DRA side does, and
// a claim the driver cannot prepare runs nowhere.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	if ctx.Err() != nil {
		return // stopping: what was cut short is no problem
	}
	var dropped *resourceslice.DroppedFieldsError
	if errors.As(err, &dropped) {
		d.opts.Log.Error("DRA: the API server dropped fields of the ResourceSlice: claims cannot share the cards; "+
			"enable the feature gates it names on the control plane and the kubelet",
			"gates", dropped.DisabledFeatures(), "error", err)
		return
	}
	d.opts.Log.Error("DRA: "+msg, "error", err, "recoverable", errors.Is(err, kubeletplugin.ErrRecoverable))
}

// WatchHealthStatus: the cards' health is in the agent's metrics, not
// reported to the kubelet (the health service is off).
func (d *Driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
