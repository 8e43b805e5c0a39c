#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# benchmarks/realgpu/ready.sh: is the shim ready for what real applications
# do on this GPU and driver? A quick check to run before run.sh (about a
# minute; no CUDA toolkit: gstest loads its kernels from PTX text):
#
#   - hooks: every entry point the shim wraps comes back as its wrapper
#     from cuGetProcAddress, cuGetProcAddress_v2 and dlsym alike;
#   - the cap exact on every allocation path (gstest cap <path>: filled to
#     the byte, one more unit refused, all given back), graph memory
#     (gstest graphmem), managed memory refused;
#   - graph capture on a gated card: 20 graphs captured in global,
#     thread-local and relaxed mode while another thread launches, all
#     succeed, and their replays are gated (fewer than ungated);
#   - a host function waiting for a later launch does not deadlock;
#   - every launch path gated (the legacy calls, a context-less CUkernel,
#     graphs): launches in a second against the same path ungated;
#   - CUDA_VISIBLE_DEVICES: the device maps to its card by UUID;
#   - the context's measured footprint (NVML, without the shim), against
#     GPUSLICE_CONTEXT_MIB's estimate.
#
#   ready.sh [--sim] [--gpu N] [--out FILE] [--keep] [--no-build]
#
#   --sim        the simulated driver (build/lib) instead of the real one
#   --gpu N      the card (nvidia-smi index; default 0)
#   --out FILE   also write the report to FILE
#   --keep       keep the run directory (every check's output)
#   --no-build   use build/ as it is (default: make c first)
#
# Prints a Markdown table; exit status 0 when every check passed, 1 when
# one failed, 2 for a bad command line or a machine that cannot run it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$ROOT/build
SHIM=$BUILD/lib/libgpuslice.so
GSTEST=$BUILD/bin/gstest

SIM=0
GPU=0
OUT=
KEEP=0
BUILD_IT=1

usage() {
	sed -n '/^#   ready.sh/,/^#   --no-build/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
	exit "${1:-2}"
}

while [ $# -gt 0 ]; do
	case $1 in
	--sim) SIM=1 ;;
	--gpu) [ $# -ge 2 ] || usage; GPU=$2; shift ;;
	--gpu=*) GPU=${1#*=} ;;
	--out) [ $# -ge 2 ] || usage; OUT=$2; shift ;;
	--out=*) OUT=${1#*=} ;;
	--keep) KEEP=1 ;;
	--no-build) BUILD_IT=0 ;;
	-h | --help) usage 0 ;;
	*) echo "ready.sh: unknown argument $1" >&2; usage ;;
	esac
	shift
done
if ! [[ $GPU =~ ^[0-9]{1,3}$ ]] || [ "$GPU" -gt 255 ]; then
	echo "ready.sh: --gpu wants 0-255, got $GPU" >&2
	exit 2
fi

T0=$(date +%s%N)
log() { echo "ready.sh: $*" >&2; }
die() { echo "ready.sh: $*" >&2; exit 2; }

# shellcheck source=benchmarks/realgpu/env.sh
. "$ROOT/benchmarks/realgpu/env.sh"

N=0
ROWS=
FAILS=0
DIR=
RC=0

# gs NAME [VAR=value...] -- ARGS...: gstest ARGS in a fresh directory
# DIR (its own ledger, schedule file and, on the simulator, machine), the
# variables over ENVBASE; stdout in DIR/out, stderr in DIR/err, exit in RC.
gs() {
	local name=$1
	shift
	local -a vars=()
	while [ "$1" != -- ]; do
		vars+=("$1")
		shift
	done
	shift
	N=$((N + 1))
	DIR=$RUN/c$N-$name
	mkdir -p "$DIR"
	local -a envp=("${ENVBASE[@]}" "GPUSLICE_LEDGER_DIR=$DIR/ledger"
		"GPUSLICE_SCHED_DIR=$DIR/sched" "GPUSLICE_VGPU=ready")
	[ "$SIM" = 1 ] && envp+=("SIMCUDA_STATE=$DIR/sim.state")
	RC=0
	(cd "$DIR" && exec timeout -k 5 120 env "${envp[@]}" "${vars[@]}" "$GSTEST" "$@") \
		>"$DIR/out" 2>"$DIR/err" || RC=$?
}

# row CHECK RESULT DETAIL
row() {
	ROWS+="| $1 | $2 | $3 |"$'\n'
	if [ "$2" = FAIL ]; then
		FAILS=$((FAILS + 1))
		log "FAIL $1: $3 (output: $DIR)"
	fi
}

# The first failed check gstest reported, or its exit status.
why() {
	local f
	f=$(grep -m1 '^FAIL' "$DIR/err" 2>/dev/null | cut -c1-160 || true)
	echo "${f:-exit $RC}"
}

passfail() { # CHECK DETAIL: ok when RC is 0
	if [ "$RC" = 0 ]; then row "$1" ok "$2"; else row "$1" FAIL "$(why)"; fi
}

GATED=(GPU_POLICY=1 GPU_CONTAINER_QUOTA_PERCENT=50)

check_hooks() {
	local modes=(exported)
	[ "$SIM" = 1 ] && modes+=(private)
	for m in "${modes[@]}"; do
		gs hooks SIMCUDA_PROCADDR="$m" -- procall
		passfail "hooks ($m entry points)" "$(kv "$DIR/out" rows) wrapped rows: $(kv "$DIR/out" checked) the same through cuGetProcAddress, _v2 and dlsym, $(kv "$DIR/out" unknown) unknown to this driver"
		[ "$SIM" = 1 ] || break
	done
}

check_caps() {
	local p
	for p in alloc pitch async async_ptsz pool pool_ptsz pool_default pool_current vmm array array3d mipmap context; do
		gs "cap-$p" -- cap "$p"
		passfail "cap exact: $p" "filled to the cap, one more unit refused, all back"
	done
	gs graphmem -- graphmem
	passfail "cap exact: graph memory" "charged at first launch and upload, refused past the cap, back at trim"
	gs managed -- managed
	passfail "managed memory refused" "cuMemAllocManaged from several threads"
}

check_capture() {
	local ok failed gated ungated
	gs capture "${GATED[@]}" -- capture 20 global,thread_local,relaxed 2 1000 1
	ok=$(kv "$DIR/out" captures_ok) failed=$(kv "$DIR/out" captures_failed)
	gated=$(kv "$DIR/out" replays)
	if [ "$RC" != 0 ] || [ "$ok" != 20 ] || [ "$failed" != 0 ]; then
		row "graph capture on a gated card" FAIL "captures ok ${ok:-?}, failed ${failed:-?}: $(why)"
		return
	fi
	row "graph capture on a gated card" ok "20 of 20 (global, thread-local, relaxed) while another thread launched"
	gs capture-ungated -- capture 20 global,thread_local,relaxed 2 1000 1
	ungated=$(kv "$DIR/out" replays)
	ratio "graph replays gated" "$gated" "$ungated" "replays in 2 s"
}

# ratio CHECK GATED UNGATED WHAT: gated at most 70 % of ungated (quota 50).
ratio() {
	if [ -z "$2" ] || [ -z "$3" ] || [ "$3" = 0 ]; then
		row "$1" FAIL "no count (gated ${2:-?}, ungated ${3:-?})"
		return
	fi
	local r
	r=$(awk -v g="$2" -v u="$3" 'BEGIN { printf "%.2f", g / u }')
	if awk -v r="$r" 'BEGIN { exit !(r <= 0.70) }'; then
		row "$1" ok "$4: $2 gated at 50 %, $3 ungated ($r)"
	else
		row "$1" FAIL "$4: $2 gated at 50 %, $3 ungated ($r, want <= 0.70)"
	fi
}

check_hostwait() {
	gs hostwait "${GATED[@]}" -- hostwait 3 1000
	if [ "$RC" = 0 ] && [ "$(kv "$DIR/out" deadlocks)" = 0 ]; then
		row "host function waits for a later launch" ok "no deadlock; the launch took at most $(awk -v n="$(kv "$DIR/out" b_launch_max_ns)" 'BEGIN { printf "%.0f", n / 1e6 }') ms"
	else
		row "host function waits for a later launch" FAIL "$(why)"
	fi
}

check_paths() {
	local via gated
	for via in kernel launch grid gridasync ctxless graph; do
		gs "paths-$via" "${GATED[@]}" -- paths "$via" 1 1000 2
		gated=$(kv "$DIR/out" launches)
		if [ "$RC" != 0 ]; then
			row "launch path gated: $via" FAIL "$(why)"
			continue
		fi
		gs "paths-$via-ungated" -- paths "$via" 1 1000 2
		ratio "launch path gated: $via" "$gated" "$(kv "$DIR/out" launches)" "launches in 1 s"
	done
}

check_visible() {
	local want got
	if [ "$SIM" = 1 ]; then
		# Two cards, reordered by index: device 0 is card 1.
		gs visible SIMCUDA_DEVICES=2 GPU_IDX=0,1 GPU_CONTAINER_MEM=1024,2048 CUDA_VISIBLE_DEVICES=1,0 -- devices
		want=$((2048 << 20))
	else
		gs visible "GPUSLICE_CARD_UUIDS=$UUID" -- devices
		want=$((4096 << 20))
	fi
	got=$(kv "$DIR/out" cuda.0.total)
	if [ "$RC" = 0 ] && [ "$got" = "$want" ]; then
		row "CUDA_VISIBLE_DEVICES: device to card by UUID" ok "device 0 shows its card's cap, $((want >> 20)) MiB"
	else
		row "CUDA_VISIBLE_DEVICES: device to card by UUID" FAIL "device 0 shows ${got:-?} bytes, want $want: $(why)"
	fi
}

check_footprint() {
	local ctx mod
	gs footprint LD_PRELOAD= -- ctxfoot
	ctx=$(kv "$DIR/out" context_bytes) mod=$(kv "$DIR/out" module_bytes)
	if [ "$RC" != 0 ] || [ -z "$ctx" ]; then
		row "context footprint (NVML, no shim)" FAIL "$(why)"
		return
	fi
	row "context footprint (NVML, no shim)" measured "$((ctx >> 20)) MiB for the primary context, $((mod >> 20)) MiB more for a module and a launch; the shim charges GPUSLICE_CONTEXT_MIB (256 MiB by default) per context"
}

check_hooks
check_caps
check_capture
check_hostwait
check_paths
check_visible
check_footprint

T1=$(date +%s%N)
ELAPSED=$(awk -v a="$T0" -v b="$T1" 'BEGIN { printf "%.0f", (b - a) / 1e9 }')
REPORT=$(
	echo "## gpuslice readiness: $CARD"
	echo
	echo "Driver: $DRIVER. $(date -u +%Y-%m-%d), ready.sh. The shim in no-module mode (GPUSLICE_ENFORCE=file); gated checks under policy 1 at 50 %."
	echo
	echo "| check | result | detail |"
	echo "|---|---|---|"
	printf '%s' "$ROWS"
	echo
	echo "Failed: $FAILS. Elapsed: $ELAPSED s."
)
echo "$REPORT"
if [ -n "$OUT" ]; then
	echo "$REPORT" >"$OUT"
	log "report written to $OUT"
fi
[ "$FAILS" = 0 ]
