package testenv

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// StubNode is a device node of the guest's stand-in NVIDIA driver: its
// path and the /proc/devices name and minor of its number.
type StubNode struct {
	Path, Driver string
	Minor        uint32
}

// StubNodes are the nodes NvidiaStub makes: the control node, a card, the
// UVM node and a capability node, one of each major the guard guards.
var StubNodes = []StubNode{
	{"/dev/nvidiactl", "nvidia", 255},
	{"/dev/nvidia0", "nvidia", 0},
	{"/dev/nvidia-uvm", "nvidia-uvm", 0},
	{"/dev/nvidia-caps/nvidia-cap1", "nvidia-caps", 1},
}

// NvidiaStub loads kmod/guest's stand-in NVIDIA driver (/nvstub.ko in the
// qemu guest: majors 195, nvidia-uvm and nvidia-caps, whose open, ioctl
// and mmap answer 0), makes StubNodes and mounts securityfs (the guard
// reads the active LSMs there); all undone at the test's end. Guest only.
func NvidiaStub(t *testing.T) {
	t.Helper()
	InGuest(t)
	if _, err := os.Stat("/sys/kernel/security/lsm"); err != nil {
		if err := unix.Mount("securityfs", "/sys/kernel/security", "securityfs", 0, ""); err != nil {
			t.Fatalf("mounting securityfs: %v", err)
		}
	}
	if out, err := exec.Command("insmod", "/nvstub.ko").CombinedOutput(); err != nil {
		t.Fatalf("insmod /nvstub.ko: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("rmmod", "nvstub").Run() })
	devices, err := os.ReadFile("/proc/devices")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll("/dev/nvidia-caps", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range StubNodes {
		major := majorNamed(t, string(devices), n.Driver)
		_ = os.Remove(n.Path)
		if err := unix.Mknod(n.Path, unix.S_IFCHR|0o666, int(unix.Mkdev(major, n.Minor))); err != nil {
			t.Fatalf("mknod %s: %v", n.Path, err)
		}
		t.Cleanup(func() { os.Remove(n.Path) })
	}
}

// majorNamed is the major /proc/devices gives the character driver name.
func majorNamed(t *testing.T, procDevices, name string) uint32 {
	t.Helper()
	for _, line := range strings.Split(procDevices, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[1] == name {
			n, err := strconv.ParseUint(f[0], 10, 32)
			if err != nil {
				t.Fatal(err)
			}
			return uint32(n)
		}
	}
	t.Fatalf("no %s in /proc/devices:\n%s", name, procDevices)
	return 0
}
