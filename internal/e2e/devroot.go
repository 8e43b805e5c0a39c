package e2e

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DeviceNodes are the device nodes a node agent under test hands out (its
// -device-root), each made as a copy of a distinct host node, so that a
// container's node shows which host node it came from: two cards and the
// control nodes.
var DeviceNodes = []struct{ Path, Like string }{
	{"/dev/nvidia0", "/dev/null"},
	{"/dev/nvidia1", "/dev/zero"},
	{"/dev/nvidiactl", "/dev/full"},
	{"/dev/nvidia-uvm", "/dev/random"},
	{"/dev/nvidia-uvm-tools", "/dev/urandom"},
}

// MakeDeviceRoot makes a scratch device root of DeviceNodes: real
// character nodes (mknod) under root, and returns each path's
// "major:minor" (hex) of its host node.
func MakeDeviceRoot(root string) (map[string]string, error) {
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		return nil, err
	}
	devs := map[string]string{}
	for _, d := range DeviceNodes {
		var st unix.Stat_t
		if err := unix.Stat(d.Like, &st); err != nil {
			return nil, err
		}
		if err := unix.Mknod(filepath.Join(root, d.Path), unix.S_IFCHR|0o666, int(st.Rdev)); err != nil {
			return nil, fmt.Errorf("mknod %s: %v", d.Path, err)
		}
		devs[d.Path] = fmt.Sprintf("%x:%x", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	return devs, nil
}
