#!/usr/bin/env bash
# The main job on the simulated GPU: processes of two containers share one
# card, each container held to its own memory cap by libgpuslice.so.
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
