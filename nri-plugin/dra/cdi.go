package dra

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuslice/gpuslice/nri-plugin/agent"
	"github.com/gpuslice/gpuslice/pkg/draapi"
)

// cdiVersion is the CDI version of the specs (host paths of device nodes
// need 0.5.0; the library refuses to write a spec its version cannot
// express).
const cdiVersion = "0.6.0"

// cdiSpecs writes and removes the claims' CDI specs, one file a claim in
// dir: the runtime reads them when the kubelet names the claim's device
// (gpu.gpuslice.io/vgpu=<claim UID>) for a container.
type cdiSpecs struct {
	cache *cdi.Cache
}

func newCDISpecs(dir string) (*cdiSpecs, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("CDI directory: %w", err)
	}
	// One directory, read once: the cache only writes and removes here.
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("CDI directory %s: %w", dir, err)
	}
	return &cdiSpecs{cache: cache}, nil
}

// cdiDeviceID names the CDI device of claim uid.
func cdiDeviceID(uid string) string { return draapi.CDIKind + "=" + uid }

// specName is the file of claim uid's spec.
func specName(uid string) string {
	vendor, class, _ := strings.Cut(draapi.CDIKind, "/")
	return cdi.GenerateTransientSpecName(vendor, class, uid) + ".json"
}

// spec is claim uid's CDI spec: one device, named by the UID, carrying
// the injection.
func spec(uid string, in agent.Injection) *cdispec.Spec {
	edits := cdispec.ContainerEdits{}
	for k, v := range in.Env {
		edits.Env = append(edits.Env, k+"="+v)
	}
	slices.Sort(edits.Env)
	for _, d := range in.Devices {
		mode := os.FileMode(0o666)
		uidgid := uint32(0)
		edits.DeviceNodes = append(edits.DeviceNodes, &cdispec.DeviceNode{Path: d.Path, HostPath: d.HostPath,
			Type: "c", Major: d.Major, Minor: d.Minor, FileMode: &mode, Permissions: "rw", UID: &uidgid, GID: &uidgid})
	}
	for _, m := range in.Mounts {
		edits.Mounts = append(edits.Mounts, &cdispec.Mount{HostPath: m.Source, ContainerPath: m.Destination,
			Options: m.Options, Type: "bind"})
	}
	return &cdispec.Spec{Version: cdiVersion, Kind: draapi.CDIKind,
		Devices: []cdispec.Device{{Name: uid, ContainerEdits: edits}}}
}

// write writes (or replaces) claim uid's spec; the library validates it.
func (c *cdiSpecs) write(uid string, in agent.Injection) error {
	if err := c.cache.WriteSpec(spec(uid, in), specName(uid)); err != nil {
		return fmt.Errorf("the CDI spec of claim %s: %w", uid, err)
	}
	return nil
}

// remove removes claim uid's spec; a spec not there is no error.
func (c *cdiSpecs) remove(uid string) error {
	if err := c.cache.RemoveSpec(specName(uid)); err != nil {
		return fmt.Errorf("the CDI spec of claim %s: %w", uid, err)
	}
	return nil
}
