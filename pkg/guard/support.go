package guard

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// UnsupportedError says why this kernel cannot run the guard and what to
// change on the node.
type UnsupportedError struct {
	Reason string // what is missing
	Fix    string // what to change
}

func (e *UnsupportedError) Error() string {
	return "guard: " + e.Reason + "; " + e.Fix
}

// Paths of what Supported reads; the tests point them elsewhere.
type kernelFiles struct {
	btf string // the kernel's BTF
	lsm string // the active LSMs, comma-separated
}

var hostFiles = kernelFiles{btf: "/sys/kernel/btf/vmlinux", lsm: "/sys/kernel/security/lsm"}

// Supported says whether this kernel can run the guard: BTF (CO-RE and
// LSM programs need it) and the BPF LSM in the active list. It returns
// an *UnsupportedError naming the change, or another error when it could
// not tell.
func Supported() error { return hostFiles.supported() }

func (k kernelFiles) supported() error {
	if _, err := os.Stat(k.btf); errors.Is(err, os.ErrNotExist) {
		return &UnsupportedError{
			Reason: "the kernel has no BTF (" + k.btf + " is missing)",
			Fix:    "run a kernel built with CONFIG_DEBUG_INFO_BTF=y (Debian 11+, Ubuntu 20.10+, RHEL 8.2+ kernels are)",
		}
	} else if err != nil {
		return fmt.Errorf("guard: %w", err)
	}
	b, err := os.ReadFile(k.lsm)
	if errors.Is(err, os.ErrNotExist) {
		return &UnsupportedError{
			Reason: "cannot read the active LSMs (" + k.lsm + " is missing)",
			Fix:    "mount securityfs (mount -t securityfs securityfs /sys/kernel/security) or run a kernel with CONFIG_SECURITY=y",
		}
	} else if err != nil {
		return fmt.Errorf("guard: reading the active LSMs: %w", err)
	}
	active := strings.TrimSpace(string(b))
	for _, l := range strings.Split(active, ",") {
		if l == "bpf" {
			return nil
		}
	}
	return &UnsupportedError{
		Reason: fmt.Sprintf("the BPF LSM is not active (active LSMs: %s)", active),
		Fix: fmt.Sprintf("add bpf to the kernel command line's lsm= list (lsm=%s,bpf, for example in "+
			"GRUB_CMDLINE_LINUX of /etc/default/grub, then update-grub and reboot); "+
			"the kernel needs CONFIG_BPF_LSM=y", active),
	}
}
