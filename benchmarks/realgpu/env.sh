# SPDX-License-Identifier: Apache-2.0
#
# benchmarks/realgpu/env.sh: sourced by run.sh and ready.sh after they
# parsed their options (ROOT, BUILD, SHIM, GSTEST, SIM, GPU, KEEP,
# BUILD_IT, log, die): builds what they run (make c), finds the driver
# (CARD, DRIVER, UUID on a real GPU), makes the run directory RUN (removed
# at exit unless KEEP; the processes in LIVE are killed), and sets
# ENVBASE, the environment every gstest starts from. Defines kv.

# ---- build (under the lock the Go tests' testenv.BuildC takes) ----------
if [ "$BUILD_IT" = 1 ]; then
	mkdir -p "$BUILD"
	log "building (make c)"
	if command -v flock >/dev/null; then
		flock "$BUILD/.make.lock" make -s -C "$ROOT" c >&2 || die "make c failed"
	else
		make -s -C "$ROOT" c >&2 || die "make c failed"
	fi
fi
if ! [ -x "$GSTEST" ] || ! [ -f "$SHIM" ]; then
	die "make c built no $GSTEST or $SHIM"
fi

# ---- the driver ----------------------------------------------------------
if [ "$SIM" = 1 ]; then
	CARD="gpuslice simulated GPU (simcuda), $(nproc) CPUs"
	DRIVER="simcuda ($BUILD/lib)"
else
	command -v nvidia-smi >/dev/null ||
		die "no nvidia-smi: this needs a machine with an NVIDIA GPU and its driver (or --sim)"
	found=
	IFS=: read -r -a dirs <<<"${LD_LIBRARY_PATH:-}"
	for d in "${dirs[@]}"; do
		[ -n "$d" ] && [ "$(cd "$d" 2>/dev/null && pwd)" != "$BUILD/lib" ] &&
			[ -e "$d/libcuda.so.1" ] && found=$d/libcuda.so.1 && break
	done
	if [ -z "$found" ]; then
		for lc in ldconfig /sbin/ldconfig /usr/sbin/ldconfig; do
			if command -v "$lc" >/dev/null; then
				found=$("$lc" -p 2>/dev/null | awk '$1 == "libcuda.so.1" { print $NF; exit }')
				break
			fi
		done
	fi
	[ -n "$found" ] || die "no libcuda.so.1 (the NVIDIA driver's library) on the loader's path"
	if [ -e /dev/gpuslice ]; then
		die "/dev/gpuslice exists (gpuslice.ko is loaded): this measures the no-module mode; run it on a node without the module"
	fi
	CARD=$(nvidia-smi --query-gpu=name,uuid,memory.total --format=csv,noheader -i "$GPU") ||
		die "nvidia-smi cannot query GPU $GPU"
	UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i "$GPU" | tr -d ' ')
	DRIVER="NVIDIA $(nvidia-smi --query-gpu=driver_version --format=csv,noheader -i "$GPU") ($found)"
	log "card $GPU: $CARD"
fi

RUN=$(mktemp -d "${TMPDIR:-/tmp}/gpuslice-realgpu.XXXXXX")
declare -A LIVE=() # the tenants started and not yet waited for, by pid
cleanup() {
	local p
	for p in "${!LIVE[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	if [ "$KEEP" = 1 ]; then
		log "run directory kept: $RUN"
	else
		rm -rf "$RUN"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The environment every tenant starts from: ours without anything of
# gpuslice, the simulator or LD_PRELOAD; on the simulator also without the
# loader's path and CUDA_*, on a real GPU with the loader's path minus the
# simulated driver's directory.
ENVBASE=()
while read -r name; do
	case $name in
	GPU_* | GPUSLICE_* | SIMCUDA_* | GSTEST_* | LD_PRELOAD | LD_LIBRARY_PATH) ENVBASE+=(-u "$name") ;;
	CUDA_*) [ "$SIM" = 1 ] && ENVBASE+=(-u "$name") ;;
	esac
done < <(compgen -e)
if [ "$SIM" = 1 ]; then
	ENVBASE+=("LD_LIBRARY_PATH=$BUILD/lib" SIMCUDA_MEM_MIB=8192 GPUSLICE_CONTEXT_MIB=4
		GPU_IDX=0 GPU_CONTAINER_MEM=1024)
else
	keep=()
	IFS=: read -r -a dirs <<<"${LD_LIBRARY_PATH:-}"
	for d in "${dirs[@]}"; do
		[ -n "$d" ] && [ "$(cd "$d" 2>/dev/null && pwd)" != "$BUILD/lib" ] && keep+=("$d")
	done
	if [ ${#keep[@]} -gt 0 ]; then
		ENVBASE+=("LD_LIBRARY_PATH=$(IFS=:; echo "${keep[*]}")")
	fi
	# The process sees the one card (by UUID: CUDA's ordinals need not
	# follow nvidia-smi's), as in a container; GPU_IDX names it.
	ENVBASE+=("CUDA_VISIBLE_DEVICES=$UUID" "GPU_IDX=$GPU" GPU_CONTAINER_MEM=4096)
fi
ENVBASE+=("LD_PRELOAD=$SHIM" GPUSLICE_ENFORCE=file GPUSLICE_LOG_LEVEL=info)

# kv FILE KEY: the last value of KEY= in FILE (empty when none).
kv() { awk -F= -v k="$2" '$1 == k { v = substr($0, length(k) + 2) } END { print v }' "$1"; }

