#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# benchmarks/realgpu/run.sh: the compute gate of the no-module ("file")
# mode on a real GPU. Tenants (gstest tenant: a process and a container
# each, with its own GPUSLICE_VGPU key and ledger) share one card and one
# schedule file under each policy, started together; each tenant reports
# the kernels it completed, and its share is that work over all the busy
# tenants' work. Prints a Markdown table (README.md in this directory).
#
#   run.sh [--sim] [--quick] [--seconds N] [--gpu N] [--out FILE] [--keep]
#          [--no-build]
#
#   --sim        the simulated driver (build/lib) instead of the real one:
#                the very same scenarios, calibration and arithmetic
#   --quick      two scenarios and the latency pair, 1 s each (CI)
#   --seconds N  seconds per scenario (default 5; quick: 1)
#   --gpu N      the card (nvidia-smi index; default 0)
#   --out FILE   also write the report to FILE
#   --keep       keep the run directory (tenants' output) and say where
#   --no-build   use build/ as it is (default: make c first)
#
# Exit status: 0 once every scenario ran, whether or not its targets were
# met (misses are marked FAIL in the table: it is a measurement); 1 when a
# tenant could not run or a scenario could not be measured; 2 for a bad
# command line or a machine that cannot run it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$ROOT/build
SHIM=$BUILD/lib/libgpuslice.so
GSTEST=$BUILD/bin/gstest

SIM=0
QUICK=0
SECS=
GPU=0
OUT=
KEEP=0
BUILD_IT=1

usage() {
	sed -n '/^#   run.sh/,/^#   --no-build/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
	exit "${1:-2}"
}

while [ $# -gt 0 ]; do
	case $1 in
	--sim) SIM=1 ;;
	--quick) QUICK=1 ;;
	--seconds) [ $# -ge 2 ] || usage; SECS=$2; shift ;;
	--seconds=*) SECS=${1#*=} ;;
	--gpu) [ $# -ge 2 ] || usage; GPU=$2; shift ;;
	--gpu=*) GPU=${1#*=} ;;
	--out) [ $# -ge 2 ] || usage; OUT=$2; shift ;;
	--out=*) OUT=${1#*=} ;;
	--keep) KEEP=1 ;;
	--no-build) BUILD_IT=0 ;;
	-h | --help) usage 0 ;;
	*) echo "run.sh: unknown argument $1" >&2; usage ;;
	esac
	shift
done
if [ -z "$SECS" ]; then
	if [ "$QUICK" = 1 ]; then SECS=1; else SECS=5; fi
fi
[[ $SECS =~ ^[1-9][0-9]{0,2}$ ]] || { echo "run.sh: --seconds wants 1-999, got $SECS" >&2; exit 2; }
if ! [[ $GPU =~ ^[0-9]{1,3}$ ]] || [ "$GPU" -gt 255 ]; then
	echo "run.sh: --gpu wants 0-255, got $GPU" >&2
	exit 2
fi

T0=$(date +%s%N)
log() { echo "run.sh: $*" >&2; }
die() { echo "run.sh: $*" >&2; exit 2; }

# Targets: a share within TOL points; a lone 30 % tenant at most LONE_CAP
# % of the engine; the high-priority latency within HP_RATIO of alone.
TOL=3
LONE_CAP=33
HP_RATIO=2

# The build, the driver, the run directory and the tenants' environment:
# shared with ready.sh.
# shellcheck source=benchmarks/realgpu/env.sh
. "$ROOT/benchmarks/realgpu/env.sh"

# await FILE PID LINE: waits (60 s at most) for LINE in FILE while PID lives.
await() {
	local i
	for ((i = 0; i < 1200; i++)); do
		grep -qx -- "$3" "$1" 2>/dev/null && return 0
		kill -0 "$2" 2>/dev/null || { grep -qx -- "$3" "$1" 2>/dev/null && return 0; return 1; }
		sleep 0.05
	done
	return 1
}

RATE= # iterations per microsecond (calibrated)
ERRORS=0

# group DIR POLICY SECONDS SPEC...: runs one tenant per SPEC together on a
# fresh schedule file in DIR under POLICY (empty: not gated). SPEC is
# key:quota:kernel_us:depth:priority:gap_us:mode, mode "go" (busy) or
# "hold" (idle: launches one kernel first and keeps its context until the
# busy ones are done). Each tenant's stdout goes to DIR/KEY.out, stderr to
# DIR/KEY.err. Returns 1 (and says why) when a tenant failed, was not
# gated under a policy, or reported no work.
group() {
	local dir=$1 policy=$2 secs=$3
	shift 3
	local spec key quota kus depth prio gap mode i rc bad=0
	local -a keys=() modes=() pids=() fds=() envp
	mkdir -p "$dir"
	# The idle ones first, then the busy ones.
	for pass in hold go; do
		for spec in "$@"; do
			IFS=: read -r key quota kus depth prio gap mode <<<"$spec"
			[ "$mode" = "$pass" ] || continue
			envp=("${ENVBASE[@]}" "GPUSLICE_SCHED_DIR=$dir/sched" "GPUSLICE_VGPU=$key"
				"GPUSLICE_LEDGER_DIR=$dir/ledger-$key" "GPU_CONTAINER_QUOTA_PERCENT=$quota"
				"GPU_CONTAINER_PRIORITY=$prio")
			[ -n "$policy" ] && envp+=("GPU_POLICY=$policy")
			[ "$SIM" = 1 ] && envp+=("SIMCUDA_STATE=$dir/sim.state")
			local args=(tenant "$secs" "$kus" "$depth" 1 "$mode")
			[ "$mode" = hold ] && args[1]=0
			[ "$gap" != 0 ] && args+=("gap=$gap")
			[ -n "$RATE" ] && args+=("iters_per_us=$RATE")
			mkfifo "$dir/$key.in"
			(
				# Not the other tenants' stdin: each sees its own end only.
				for f in "${fds[@]}"; do exec {f}>&-; done
				cd "$dir"
				exec timeout -k 5 $((secs + 120)) env "${envp[@]}" "$GSTEST" "${args[@]}"
			) <"$dir/$key.in" >"$dir/$key.out" 2>"$dir/$key.err" &
			local pid=$!
			LIVE[$pid]=1
			local fd
			exec {fd}>"$dir/$key.in"
			keys+=("$key") modes+=("$mode") pids+=("$pid") fds+=("$fd")
			if [ "$mode" = hold ] && ! await "$dir/$key.out" "$pid" held; then
				log "tenant $key printed no 'held'"
				bad=1
			fi
		done
	done
	for i in "${!keys[@]}"; do
		if [ "${modes[$i]}" = go ] && ! await "$dir/${keys[$i]}.out" "${pids[$i]}" ready; then
			log "tenant ${keys[$i]} printed no 'ready'"
			bad=1
		fi
	done
	# Go, all together (a failed one gets its line too: it is gone or
	# waits for it).
	for i in "${!keys[@]}"; do
		# (In a subshell: a tenant gone leaves a broken pipe, whose
		# SIGPIPE ends the subshell, not the script.)
		if [ "${modes[$i]}" = go ]; then
			(echo go >&"${fds[$i]}") 2>/dev/null || true
		fi
	done
	for pass in go hold; do
		for i in "${!keys[@]}"; do
			[ "${modes[$i]}" = "$pass" ] || continue
			if [ "$pass" = hold ]; then
				(echo go >&"${fds[$i]}") 2>/dev/null || true
			fi
			rc=0
			wait "${pids[$i]}" || rc=$?
			unset "LIVE[${pids[$i]}]"
			local f=${fds[$i]}
			exec {f}>&-
			key=${keys[$i]}
			if [ "$rc" != 0 ]; then
				log "tenant $key exited $rc"
				bad=1
			elif [ -n "$policy" ] && ! grep -q "gated by the schedule file" "$dir/$key.err"; then
				log "tenant $key was not gated by the schedule file"
				bad=1
			elif [ -z "$(kv "$dir/$key.out" work_ns)" ]; then
				log "tenant $key reported no work_ns"
				bad=1
			fi
		done
	done
	if [ "$bad" = 1 ]; then
		for key in "${keys[@]}"; do
			log "--- $dir/$key: $(tr '\n' ' ' <"$dir/$key.out")"
			sed 's/^/run.sh:     /' "$dir/$key.err" | tail -n 20 >&2
		done
		return 1
	fi
}

# ---- calibration: iterations per microsecond, one tenant alone ----------
# Each pass runs kernels of a known iteration count back to back (two in
# flight, so the engine never waits for the host) for a second and times
# them: the second pass's kernels are 10 ms by the first pass's estimate.
# On the simulator an iteration is a ns (about 1000 per us, less the
# simulator's own cost per kernel), so --sim exercises the same path.
calib_pass() { # DIR KERNEL_US: sets PER_US (us per kernel)
	local out=$1/c.out
	group "$1" "" 1 "c:0:$2:2:0:0:go" || return 1
	PER_US=$(awk -v w="$(kv "$out" wall_ns)" -v n="$(kv "$out" kernels_done)" \
		'BEGIN { if (n > 0) printf "%.3f", w / n / 1000 }')
	[ -n "$PER_US" ]
}
RATE=1
calib_pass "$RUN/calib1" 100000 || die "calibration failed"
RATE=$(awk -v p="$PER_US" 'BEGIN { printf "%.6g", 100000 / p }')
log "calibration pass 1: 100000 iterations took $PER_US us: $RATE iterations/us"
calib_pass "$RUN/calib2" 10000 || die "calibration failed"
RATE=$(awk -v r="$RATE" -v p="$PER_US" 'BEGIN { printf "%.6g", r * 10000 / p }')
log "calibration pass 2: a 10 ms kernel took $PER_US us: $RATE iterations/us"
CALIB="$RATE iterations/us (a 10 ms kernel at the first estimate took $PER_US us)"
if [ "$QUICK" = 0 ]; then
	calib_pass "$RUN/calib3" 10000 || die "calibration failed"
	CALIB="$CALIB; check: a 10 ms kernel now takes $PER_US us"
	log "calibration check: a 10 ms kernel takes $PER_US us"
fi

# ---- scenarios -------------------------------------------------------------
TABLE=
WORST=
N=0

# row-making awk: one line per tenant "key quota kus target work wall mode".
# shellcheck disable=SC2016 # awk's own $ fields
ROWS_AWK='
function kern(us) { return (us >= 1000 && us % 1000 == 0) ? sprintf("%d ms", us / 1000) : sprintf("%d us", us) }
{ key[NR] = $1; q[NR] = $2; kus[NR] = $3; tgt[NR] = $4; work[NR] = $5; wall[NR] = $6; idle[NR] = ($7 == "hold")
  if (!idle[NR]) total += $5 }
END {
	worst = 0; fails = 0
	for (i = 1; i <= NR; i++) {
		if (idle[i]) {
			printf "| %s | %s | %s | %s | %s | idle | idle | | | ok |\n", pol, label, key[i], q[i], kern(kus[i])
			continue
		}
		ofwall = wall[i] > 0 ? 100 * work[i] / wall[i] : 0
		got = (kind == "wall") ? ofwall : (total > 0 ? 100 * work[i] / total : 0)
		err = got - tgt[i]
		if (kind == "wall")
			ok = got <= cap
		else
			ok = err <= tol && err >= -tol
		if (kind == "wall")
			mark = ok ? sprintf("ok (<= %d)", cap) : sprintf("FAIL (> %d)", cap)
		else
			mark = ok ? "ok" : sprintf("FAIL (> %d points)", tol)
		fails += !ok
		if (err > worst) worst = err
		if (-err > worst) worst = -err
		printf "| %s | %s | %s | %s | %s | %.1f | %.1f | %+.1f | %.1f | %s |\n", pol, label, key[i], q[i], kern(kus[i]), tgt[i], got, err, ofwall, mark
	}
	wmark = fails ? "FAIL" : "ok"
	printf "| %s | %s | worst | | | | | %.1f | | %s |\n", pol, label, worst, wmark
	printf "WORST - policy %s, %s: %.1f points, %s\n", pol, label, worst, wmark
}'

# shares POLICY LABEL KIND TENANT...: TENANT key:quota:kernel_us:target or
# key:quota:kernel_us:idle. KIND share: a tenant's work over all the busy
# tenants'; wall: over its own wall time (a lone tenant's % of the engine).
shares() {
	local policy=$1 label=$2 kind=$3
	shift 3
	local t key quota kus tgt dir specs=() lines=""
	N=$((N + 1))
	dir=$RUN/s$N
	for t in "$@"; do
		IFS=: read -r key quota kus tgt <<<"$t"
		if [ "$tgt" = idle ]; then
			specs+=("$key:$quota:$kus:2:0:0:hold")
		else
			specs+=("$key:$quota:$kus:2:0:0:go")
		fi
	done
	log "policy $policy, $label ($SECS s)"
	if ! group "$dir" "$policy" "$SECS" "${specs[@]}"; then
		ERRORS=$((ERRORS + 1))
		TABLE+="| $policy | $label | | | | | | | | ERROR (the tenants did not run: see stderr) |"$'\n'
		WORST+="- policy $policy, $label: ERROR"$'\n'
		return 0
	fi
	for t in "$@"; do
		IFS=: read -r key quota kus tgt <<<"$t"
		local mode=go
		[ "$tgt" = idle ] && { mode=hold; tgt=0; }
		lines+="$key $quota $kus $tgt $(kv "$dir/$key.out" work_ns) $(kv "$dir/$key.out" wall_ns) $mode"$'\n'
	done
	local out
	out=$(printf '%s' "$lines" | awk -v pol="$policy" -v label="$label" -v kind="$kind" \
		-v tol="$TOL" -v cap="$LONE_CAP" "$ROWS_AWK")
	TABLE+=$(grep -v '^WORST ' <<<"$out")$'\n'
	WORST+=$(sed -n 's/^WORST //p' <<<"$out")$'\n'
}

HP_TABLE=
# hp: a high-priority tenant (quota 10, 200 us kernels one at a time,
# 2 ms apart) under policy 4, alone and next to a busy low-priority one
# (quota 50, 1 ms kernels, two in flight): its per-kernel latency.
hp() {
	local alone shared
	N=$((N + 1))
	alone=$RUN/s$N
	log "policy 4, high-priority latency, alone ($SECS s)"
	if group "$alone" 4 "$SECS" "hp:10:200:1:1:2000:go"; then
		N=$((N + 1))
		shared=$RUN/s$N
		log "policy 4, high-priority latency, next to a busy tenant ($SECS s)"
		if group "$shared" 4 "$SECS" "hp:10:200:1:1:2000:go" "lp:50:1000:2:0:0:go"; then
			local a50 a99 s50 s99
			a50=$(kv "$alone/hp.out" lat_p50_ns) a99=$(kv "$alone/hp.out" lat_p99_ns)
			s50=$(kv "$shared/hp.out" lat_p50_ns) s99=$(kv "$shared/hp.out" lat_p99_ns)
			if [ -n "$a50" ] && [ -n "$s50" ] && [ "$a50" != 0 ] && [ "$a99" != 0 ]; then
				HP_TABLE=$(awk -v a50="$a50" -v a99="$a99" -v s50="$s50" -v s99="$s99" \
					-v an="$(kv "$alone/hp.out" lat_n)" -v sn="$(kv "$shared/hp.out" lat_n)" \
					-v lim="$HP_RATIO" 'BEGIN {
					r50 = s50 / a50; r99 = s99 / a99
					printf "| policy | scenario | tenant | quota | kernel | alone p50 us | alone p99 us | shared p50 us | shared p99 us | p50 ratio | p99 ratio |\n"
					printf "|---|---|---|---|---|---|---|---|---|---|---|\n"
					printf "| 4 | high priority, 2 ms apart, next to quota 50 (1 ms kernels) | hp | 10 | 200 us | %.0f | %.0f | %.0f | %.0f | %.2f %s | %.2f %s |\n",
						a50 / 1e3, a99 / 1e3, s50 / 1e3, s99 / 1e3,
						r50, (r50 <= lim) ? "ok" : "FAIL", r99, (r99 <= lim) ? "ok" : "FAIL"
					printf "\nHP latency ratio (shared over alone, target <= %d): p50 %.2f %s, p99 %.2f %s (%d and %d kernels timed)\n",
						lim, r50, (r50 <= lim) ? "ok" : "FAIL", r99, (r99 <= lim) ? "ok" : "FAIL", an, sn }')
				return 0
			fi
		fi
	fi
	ERRORS=$((ERRORS + 1))
	HP_TABLE="HP latency ratio: ERROR (the tenants did not run: see stderr)"
}

third=33.3333
if [ "$QUICK" = 1 ]; then
	shares 4 "weighted 5/5/10" share a:5:1000:25 b:5:1000:25 c:10:1000:50
	shares 6 "weighted weak 5/5/10, c idle" share a:5:1000:50 b:5:1000:50 c:10:1000:idle
else
	shares 1 "fixed 30/70" share a:30:1000:30 b:70:1000:70
	shares 1 "lone 30 % tenant (% of the engine)" wall a:30:1000:30
	shares 2 "average, two tenants" share a:50:1000:50 b:50:1000:50
	shares 3 "preemptive, three tenants" share a:10:1000:$third b:20:1000:$third c:30:1000:$third
	shares 4 "weighted 5/5/10" share a:5:1000:25 b:5:1000:25 c:10:1000:50
	shares 5 "hybrid 30 + two quota-0" share a:30:1000:30 b:0:1000:35 c:0:1000:35
	shares 6 "weighted weak 5/5/10, c idle" share a:5:1000:50 b:5:1000:50 c:10:1000:idle
	shares 4 "weighted 5/5/10, 50 us kernels" share a:5:50:25 b:5:50:25 c:10:50:50
	shares 4 "weighted 5/5/10, 20 ms kernels" share a:5:20000:25 b:5:20000:25 c:10:20000:50
	shares 4 "weighted 5/5/10, 50 us / 1 ms / 20 ms kernels" share a:5:50:25 b:5:1000:25 c:10:20000:50
fi
hp

T1=$(date +%s%N)
ELAPSED=$(awk -v a="$T0" -v b="$T1" 'BEGIN { printf "%.0f", (b - a) / 1e9 }')
mode=full
[ "$QUICK" = 1 ] && mode=quick
REPORT=$(
	echo "## gpuslice no-module compute gate: $CARD"
	echo
	echo "Driver: $DRIVER. $(date -u +%Y-%m-%d), run.sh ($mode, $SECS s a scenario), calibration: $CALIB."
	echo "Tenants: a process and a container each (own GPUSLICE_VGPU and ledger), one schedule file a scenario (GPUSLICE_ENFORCE=file, 5 ms slices, 20 units); kernels of one thread, two in flight; share = the tenant's completed work over all busy tenants' (target +-$TOL points)."
	echo
	echo "| policy | scenario | tenant | quota | kernel | target % | measured % | error (points) | % of wall | check |"
	echo "|---|---|---|---|---|---|---|---|---|---|"
	printf '%s' "$TABLE"
	echo
	echo "Worst error per scenario:"
	echo
	printf '%s' "$WORST"
	echo
	echo "$HP_TABLE"
	echo
	echo "Elapsed: $ELAPSED s."
)
echo "$REPORT"
if [ -n "$OUT" ]; then
	echo "$REPORT" >"$OUT"
	log "report written to $OUT"
fi
log "elapsed $ELAPSED s"
if [ "$ERRORS" != 0 ]; then
	log "$ERRORS scenario(s) could not be measured"
	exit 1
fi
