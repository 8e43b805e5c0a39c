package guard

// The BPF programs, compiled by clang and wrapped by bpf2go (both pinned:
// clang-14 from Debian 12, bpf2go by go.mod's tool line) into
// guard_bpfel.go and guard_bpfel.o, which are checked in so that a
// machine with only Go builds the agent; TestGeneratedUpToDate fails when
// they differ from what the sources compile to. After editing bpf/:
//
//	go generate ./pkg/guard
//
//go:generate go tool bpf2go -cc clang-14 -cflags "-O2 -g -Wall -Werror" -target bpfel -type guard_event -type guard_cgroup -type guard_config -type guard_proc -type guard_dir guard bpf/guard.bpf.c -- -Ibpf -I../../kmod/include
