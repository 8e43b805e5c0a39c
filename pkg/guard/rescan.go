package guard

import (
	"errors"
	"fmt"
	"io"

	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
)

// Rescan records the attachments made before the guard loaded: it walks
// every open file of every process on the node (a BPF task_file
// iterator) and records, for the process, what the hooks would have
// recorded had the guard been loaded all along: an open /dev/gpuslice
// of gpuslice.ko's (it proves the attachment once its ATTACH completed,
// as one the hooks saw), and, in file mode, a regular file held open
// directly inside a registered ledger directory whose container's cgroup
// is the process's cgroup or an ancestor of it. Without it a guard
// loaded after its processes attached (the agent restarted, or was
// upgraded) would refuse them the GPU at their next use of a node.
//
// The order matters: call it after AddLedgerDir of the containers'
// ledger directories (a file of a directory not yet registered proves
// nothing to it) and before AddCgroup of their cgroups (a process of a
// cgroup added first is guarded, and refused, until Rescan records its
// files). A process that attaches or opens its ledger after Load is
// recorded by the hooks, Rescan or not. Calling it again records only
// what is not recorded yet; a file recorded already is left as it is.
// A mapping of a ledger file whose descriptor was closed is not an open
// file, and is not seen (the shim keeps its descriptors open).
func (g *Guard) Rescan() error {
	p := g.progs.Programs[guardProgGuardRescan]
	if p == nil {
		return errors.New("guard: the rescan's program is not loaded")
	}
	it, err := link.AttachIter(link.IterOptions{Program: p})
	if err != nil {
		return fmt.Errorf("guard: attaching the rescan's task_file iterator: %w", err)
	}
	defer it.Close()
	r, err := it.Open()
	if err != nil {
		return fmt.Errorf("guard: starting the rescan: %w", err)
	}
	defer r.Close()
	// The program prints nothing: reading to the end runs it on every
	// task's every file.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return fmt.Errorf("guard: rescanning the open files: %w", err)
	}
	return nil
}

// missingIter says, as an *UnsupportedError, that kernel (the running
// kernel's BTF) has no BPF iterator target (task_file: the kernel's
// bpf_iter_task_file, 5.8 on), and why the guard needs it.
func missingIter(kernel *btf.Spec, target string) error {
	var fn *btf.Func
	err := kernel.TypeByName("bpf_iter_"+target, &fn)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, btf.ErrNotFound):
		return &UnsupportedError{
			Reason: fmt.Sprintf("the kernel has no BPF iterator %s (no bpf_iter_%s in its BTF), which the guard "+
				"needs to learn the attachments made before it loaded", target, target),
			Fix: "run a kernel of 5.11 or later built with CONFIG_BPF_LSM=y and CONFIG_BPF_SYSCALL=y",
		}
	default:
		return fmt.Errorf("guard: looking up the BPF iterator %s in the kernel's BTF: %w", target, err)
	}
}
