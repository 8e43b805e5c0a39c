#!/usr/bin/env bash
# The main job on the simulated GPU: processes of two containers share one
# card, each container held to its own memory cap by libgpuslice.so, then
# two containers share its compute engine by their quotas.
#   interposer/demo/demo.sh [BUILD_DIR]
set -euo pipefail

build=$(cd "${1:-build}" && pwd)
work=$(mktemp -d)
pids=()

cleanup() {
	for pid in "${pids[@]}"; do
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT

# The card: one simulated 16 GiB GPU, shared through a state file.
export LD_LIBRARY_PATH=$build/lib SIMCUDA_STATE=$work/card.state
export SIMCUDA_MEM_MIB=16384 SIMCUDA_CONTEXT_MIB=256

# What the node agent puts into a container: the shim, the card, the cap,
# and the container's ledger directory, shared by all its processes.
container() {
	local name=$1 cap=$2
	echo "LD_PRELOAD=$build/lib/libgpuslice.so GPU_IDX=0" \
		"GPU_CONTAINER_MEM=$cap GPUSLICE_CONTEXT_MIB=256" \
		"GPUSLICE_LEDGER_DIR=$work/$name"
}

# Starts a worker in the background and shows its output once it holds.
run() {
	local env=$1 name=$2; shift 2
	env $env "$build/bin/gsdemo-worker" "$name" "$@" >"$work/$name.log" 2>&1 &
	pids+=($!)
	eval "pid_$name=$!"
	for _ in $(seq 600); do
		grep -q ready "$work/$name.log" && break
		kill -0 "${pids[-1]}" 2>/dev/null || break
		sleep 0.05
	done
	sed 's/^/    /' "$work/$name.log"
}

A=$(container A 2048)
B=$(container B 4096)

echo "== One simulated GPU with 16384 MiB. Container A: GPU_CONTAINER_MEM=2048, container B: GPU_CONTAINER_MEM=4096."
echo "   Each process's context costs 256 MiB of its container's cap."
echo
echo "== A's first process asks for managed memory (refused), then takes 768 MiB:"
run "$A" a1 256 768 managed
echo
echo "== A's second process allocates 256 MiB chunks until the shared cap of A stops it:"
run "$A" a2 256
echo
echo "== B, on the same card, has its own cap and is not affected by A:"
run "$B" b1 1024
echo
echo "== kill -9 of a1 (it never frees): the survivors reclaim its 1024 MiB."
kill -9 "$pid_a1"
wait "$pid_a1" 2>/dev/null || true
echo
echo "== A's third process gets what a1 held:"
run "$A" a3 256
echo
echo "== Outside any container (no shim) the whole card shows:"
run "" host 256 256
echo
echo "== Compute: containers C (GPU_CONTAINER_QUOTA_PERCENT=30) and D (70) launch 1 ms kernels"
echo "   back to back for 2 s, under policy 1 (fixed), without the kernel module: their shims"
echo "   share the card's schedule file and run only in their own time slices."
# What the agent adds for a compute quota in no-module mode.
compute() {
	local name=$1 quota=$2
	echo "$(container "$name" 1024) GPUSLICE_ENFORCE=file GPU_POLICY=1" \
		"GPU_CONTAINER_QUOTA_PERCENT=$quota GPUSLICE_VGPU=$name" \
		"GPUSLICE_SCHED_DIR=$work/sched"
}
tenant() {
	local name=$1 quota=$2
	env $(compute "$name" "$quota") "$build/bin/gstest" tenant 2 1000 2 \
		>"$work/$name.out" 2>&1 &
	pids+=($!)
}
busy() { sed -n 's/^busy_ns=//p' "$work/$1.out"; }
wall() { sed -n 's/^wall_ns=//p' "$work/$1.out"; }
tenant C 30
tenant D 70
wait "${pids[-2]}" "${pids[-1]}"
c=$(busy C) d=$(busy D)
awk -v c="$c" -v d="$d" -v cw="$(wall C)" -v dw="$(wall D)" 'BEGIN {
	printf "    C  quota 30 %%: %4.1f %% of the engine time used, %4.1f %% of its wall time\n", 100*c/(c+d), 100*c/cw
	printf "    D  quota 70 %%: %4.1f %% of the engine time used, %4.1f %% of its wall time\n", 100*d/(c+d), 100*d/dw
}'
echo
echo "== C alone: policy 1 lends nobody's units, so it still gets only its 30 % of the card:"
tenant C 30
wait "${pids[-1]}"
awk -v c="$(busy C)" -v w="$(wall C)" 'BEGIN {
	printf "    C  quota 30 %%, alone: %4.1f %% of its wall time\n", 100*c/w
}'
