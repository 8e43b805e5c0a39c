// Package guard keeps the NVIDIA device nodes from the processes of vGPU
// containers that are not attached to their vGPU (through gpuslice.ko, or
// in file mode by their ledger file), so that a process that bypasses the
// shim (no LD_PRELOAD, a static binary, a cleared environment, its own
// open of /dev/nvidia0) gets no GPU at all rather than an uncapped one.
//
// The guard is a set of BPF LSM programs (bpf/guard.bpf.c, compiled by
// clang and embedded by bpf2go: see gen.go) that the node agent loads with
// [Load]. They refuse with EPERM every open, ioctl and mmap of a character
// device of a guarded major (195, the NVIDIA major, and every major
// /proc/devices names nvidia*: nvidia-uvm, nvidia-caps, ...) to a process
// whose cgroup, or an ancestor of it, was added with [Guard.AddCgroup],
// unless that process holds an open /dev/gpuslice whose ATTACH succeeded
// or, on a node without gpuslice.ko (the file mode), an open file it
// opened directly inside its own container's ledger directory
// ([Guard.AddLedgerDir]). Other processes, and the host, are never
// refused. Each refusal is counted per cgroup ([Guard.Refusals]) and
// recorded for the agent's log ([Guard.NextRefusal]).
//
// The programs stay attached while the Guard is open: the guard is on
// exactly while the agent runs, and a restarted agent adds its vGPU
// cgroups again from its state, after [Guard.Rescan] has recorded the
// attachments its running processes made before the guard loaded.
//
// The kernel must have BTF and the BPF LSM active ([Supported] says what
// to change when it does not). README.md explains the choice of hooks,
// how the attachment is proved, and what the guard does not stop.
package guard
