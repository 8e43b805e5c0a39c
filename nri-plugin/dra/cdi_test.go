package dra

import (
	"os"
	"path/filepath"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpuslice/gpuslice/nri-plugin/agent"
)

func testInjection() agent.Injection {
	return agent.Injection{
		Env: map[string]string{"GPU_IDX": "1", "GPU_CONTAINER_MEM": "10240", "GPUSLICE_CLAIM": "u1"},
		Devices: []agent.DeviceNode{{Path: "/dev/nvidia1", HostPath: "/dev/null", Major: 1, Minor: 3},
			{Path: "/dev/nvidiactl", HostPath: "/dev/null", Major: 1, Minor: 3}},
		Mounts: []agent.Mount{{Source: "/usr/lib/gpuslice/libgpuslice.so", Destination: "/usr/local/gpuslice/libgpuslice.so",
			Options: []string{"bind", "ro", "nosuid", "nodev"}},
			{Source: "/var/lib/gpuslice/ld.so.preload", Destination: "/etc/ld.so.preload",
				Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}}},
	}
}

// The spec the library reads back, validated, and what it does to a
// container's OCI spec: the claim's variables added, the image's
// LD_PRELOAD left as it was (the NRI side puts the shim first in it), the
// device nodes and the mounts.
func TestCDISpec(t *testing.T) {
	dir := t.TempDir()
	specs, err := newCDISpecs(dir)
	require.NoError(t, err)
	require.NoError(t, specs.write("u1", testInjection()))
	path := filepath.Join(dir, "gpu.gpuslice.io-vgpu_u1.json")

	s, err := cdi.ReadSpec(path, 0)
	require.NoError(t, err, "a valid spec")
	assert.Equal(t, "0.6.0", s.Version)
	assert.Equal(t, "gpu.gpuslice.io/vgpu", s.Kind)
	dev := s.GetDevice("u1")
	require.NotNil(t, dev)
	assert.Equal(t, "gpu.gpuslice.io/vgpu=u1", dev.GetQualifiedName())
	assert.Equal(t, cdiDeviceID("u1"), dev.GetQualifiedName())

	ctr := &oci.Spec{Process: &oci.Process{Env: []string{"PATH=/bin", "LD_PRELOAD=/lib/libimage.so"}}, Linux: &oci.Linux{}}
	require.NoError(t, dev.ApplyEdits(ctr))
	assert.Equal(t, []string{"PATH=/bin", "LD_PRELOAD=/lib/libimage.so",
		"GPUSLICE_CLAIM=u1", "GPU_CONTAINER_MEM=10240", "GPU_IDX=1"}, ctr.Process.Env)
	require.Len(t, ctr.Linux.Devices, 2)
	assert.Equal(t, "/dev/nvidia1", ctr.Linux.Devices[0].Path)
	assert.Equal(t, int64(1), ctr.Linux.Devices[0].Major)
	var mounts []string
	for _, m := range ctr.Mounts {
		mounts = append(mounts, m.Destination)
	}
	assert.ElementsMatch(t, []string{"/usr/local/gpuslice/libgpuslice.so", "/etc/ld.so.preload"}, mounts)
	require.NotEmpty(t, ctr.Linux.Resources.Devices, "the device cgroup lets the container open its nodes")

	// Written again (a prepare after a restart): replaced, still one file.
	require.NoError(t, specs.write("u1", testInjection()))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1)

	require.NoError(t, specs.remove("u1"))
	assert.NoFileExists(t, path)
	require.NoError(t, specs.remove("u1"), "removing it twice is no error")
}
