package guard

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What a node with NVIDIA's driver, UVM, caps and gpuslice.ko loaded says.
const nodeDevices = `Character devices:
  1 mem
  4 /dev/vc/0
 10 misc
195 nvidia-frontend
226 drm
234 nvidia-caps-imex-channels
235 nvidia-caps
236 nvidia-nvlink
237 nvidia-uvm
254 gpiochip

Block devices:
  8 sd
195 nvidiablock
259 blkext
`

func TestParseProcDevices(t *testing.T) {
	majors, err := parseProcDevices(nodeDevices)
	require.NoError(t, err)
	// nvidia* character majors only: not drm, not the block device.
	assert.Equal(t, []uint32{195, 234, 235, 236, 237}, majors)

	// No driver loaded yet: 195 is guarded all the same, so that the
	// nodes are refused from the moment the driver registers.
	majors, err = parseProcDevices("Character devices:\n  1 mem\n\nBlock devices:\n  8 sd\n")
	require.NoError(t, err)
	assert.Equal(t, []uint32{NvidiaMajor}, majors)

	for _, bad := range []string{"", "Block devices:\n  8 sd\n", "Character devices:\nx mem\n", "Character devices:\n1\n"} {
		_, err := parseProcDevices(bad)
		assert.Error(t, err, "%q", bad)
	}
}

func TestParseDevNumber(t *testing.T) {
	d, err := parseDevNumber("10:123\n")
	require.NoError(t, err)
	assert.Equal(t, uint32(10<<20|123), d)
	assert.Equal(t, KernelDev(10, 123), d)
	for _, bad := range []string{"", "10", "10:", ":1", "a:b", "4096:0", "1:1048576"} {
		_, err := parseDevNumber(bad)
		assert.Error(t, err, "%q", bad)
	}
}

func TestReadDevices(t *testing.T) {
	dir := t.TempDir()
	proc := filepath.Join(dir, "devices")
	misc := filepath.Join(dir, "dev")
	require.NoError(t, os.WriteFile(proc, []byte(nodeDevices), 0o644))

	// gpuslice.ko not loaded: no number, no error (nobody is attached).
	d, err := ReadDevices(proc, misc)
	require.NoError(t, err)
	assert.Equal(t, Devices{Majors: []uint32{195, 234, 235, 236, 237}}, d)

	require.NoError(t, os.WriteFile(misc, []byte("10:121\n"), 0o644))
	d, err = ReadDevices(proc, misc)
	require.NoError(t, err)
	assert.Equal(t, KernelDev(10, 121), d.Gpuslice)

	require.NoError(t, os.WriteFile(misc, []byte("garbage"), 0o644))
	_, err = ReadDevices(proc, misc)
	assert.ErrorContains(t, err, misc)
	_, err = ReadDevices(filepath.Join(dir, "none"), misc)
	assert.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
}

func TestSupported(t *testing.T) {
	dir := t.TempDir()
	k := kernelFiles{btf: filepath.Join(dir, "vmlinux"), lsm: filepath.Join(dir, "lsm")}
	var ue *UnsupportedError

	err := k.supported()
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, ue.Reason, "no BTF")
	assert.Contains(t, ue.Fix, "CONFIG_DEBUG_INFO_BTF=y")

	require.NoError(t, os.WriteFile(k.btf, nil, 0o644))
	err = k.supported()
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, ue.Fix, "mount -t securityfs")

	// Debian's default list without bpf (a kernel booted with lsm=...).
	require.NoError(t, os.WriteFile(k.lsm, []byte("lockdown,capability,landlock,yama,apparmor"), 0o644))
	err = k.supported()
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, "guard: the BPF LSM is not active (active LSMs: lockdown,capability,landlock,yama,apparmor); "+
		"add bpf to the kernel command line's lsm= list (lsm=lockdown,capability,landlock,yama,apparmor,bpf, "+
		"for example in GRUB_CMDLINE_LINUX of /etc/default/grub, then update-grub and reboot); "+
		"the kernel needs CONFIG_BPF_LSM=y", err.Error())

	// "bpf" must be a whole entry, not a part of one.
	require.NoError(t, os.WriteFile(k.lsm, []byte("capability,notbpf"), 0o644))
	require.ErrorAs(t, k.supported(), &ue)

	require.NoError(t, os.WriteFile(k.lsm, []byte("lockdown,capability,landlock,yama,apparmor,bpf"), 0o644))
	assert.NoError(t, k.supported())
}

func TestDecodeRefusal(t *testing.T) {
	e := guardGuardEvent{Cgroup: 42, OwnCgroup: 43, Pid: 101, Tgid: 100,
		Dev: KernelDev(195, 255), Hook: uint32(guardGuardHookGUARD_HOOK_IOCTL)}
	for i, c := range "cudaapp" {
		e.Comm[i] = int8(c)
	}
	raw, err := binary.Append(nil, binary.NativeEndian, &e)
	require.NoError(t, err)
	r, err := decodeRefusal(raw)
	require.NoError(t, err)
	assert.Equal(t, Refusal{Cgroup: 42, OwnCgroup: 43, PID: 100, TID: 101, Comm: "cudaapp",
		Major: 195, Minor: 255, Op: "ioctl"}, r)
	assert.Equal(t, "refused ioctl of device 195:255 to pid 100 (cudaapp, thread 101) of vGPU cgroup 42: "+
		"it is not attached to its vGPU (no libgpuslice.so)", r.String())

	_, err = decodeRefusal(raw[:10])
	assert.Error(t, err)
}
