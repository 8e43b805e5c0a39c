#!/usr/bin/env bash
# Builds gpuslice.ko and the guest test programs, packs them into a busybox
# initramfs and boots it in a qemu guest (TCG) running Debian's kernel.
#
#   kmod/guest/run.sh [--module-only|--no-boot] OUTDIR [TEST...]
#
#   --module-only  build OUTDIR/kmod-src/gpuslice.ko and stop
#   --no-boot      build the module, the tests and OUTDIR/initramfs.gz; no qemu
#   TEST...        run only these test programs (default: all, in ORDER)
#
# Environment: GSGUEST_KVER (kernel version, default: the newest installed
# /boot/vmlinuz-*-amd64 with headers), GSGUEST_TIMEOUT (seconds for the
# whole boot, default 300), GSGUEST_TEST_TIMEOUT (seconds per test program
# inside the guest, default 120), GSGUEST_TESTS (the directory of the test
# sources, default kmod/guest/tests), GSGUEST_APPEND (more of the guest
# kernel's command line, e.g. an lsm= list).
#
# Outputs under OUTDIR: kmod-src/ (the out-of-tree module build),
# nvstub-src/ (guest/nvstub, a stand-in NVIDIA driver, /nvstub.ko in the
# guest: the guard's test loads it), tests/
# (static programs), ORDER (the programs the guest runs, in order),
# initramfs.gz, serial.log (the guest's console: judge the run by the
# GSGUEST/GSTEST markers in it, never by qemu's exit status, which is 0
# even when the guest panics). The source tree is never written to.
set -euo pipefail

mode=boot
case "${1:-}" in
--module-only) mode=module; shift ;;
--no-boot) mode=noboot; shift ;;
esac
if [ $# -lt 1 ]; then
	echo "usage: $0 [--module-only|--no-boot] OUTDIR [TEST...]" >&2
	exit 2
fi
out=$1
shift
only=("$@")

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
kmod=$(dirname "$here")
timeout_s=${GSGUEST_TIMEOUT:-300}
test_timeout_s=${GSGUEST_TEST_TIMEOUT:-120}

die() {
	echo "kmod/guest/run.sh: $*" >&2
	exit 1
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# --- (a) the kernel: newest Debian amd64 image that has matching headers.
kver=${GSGUEST_KVER:-}
if [ -z "$kver" ]; then
	# sort -V orders version numbers naturally; the last match wins.
	while read -r img; do
		v=${img#/boot/vmlinuz-}
		[ -e "$img" ] && [ -d "/usr/src/linux-headers-$v" ] && kver=$v
	done < <(printf '%s\n' /boot/vmlinuz-*-amd64 | sort -V)
fi
if [ -n "$kver" ] && [ -e "/boot/vmlinuz-$kver" ] && [ ! -r "/boot/vmlinuz-$kver" ]; then
	die "/boot/vmlinuz-$kver is not readable by $(id -un); run as root"
fi
if [ -z "$kver" ] || [ ! -r "/boot/vmlinuz-$kver" ] || [ ! -d "/usr/src/linux-headers-$kver" ]; then
	die "no Debian kernel image with matching headers (/boot/vmlinuz-<ver>-amd64 and" \
		"/usr/src/linux-headers-<ver>${kver:+, tried $kver}); install them with kmod/guest/deps.sh (as root)"
fi
kdir=/usr/src/linux-headers-$kver
vmlinuz=/boot/vmlinuz-$kver

mkdir -p "$out"
out=$(cd "$out" && pwd)
# No stale verdict from an earlier run.
rm -f "$out/serial.log" "$out/boot.seconds" "$out/qemu.err"

# --- (b) the module, built out of tree from a copy of kmod/ (minus guest/
# and anything a developer built in place), so the clone stays clean.
t0=$(now)
src=$out/kmod-src
rm -rf "$src"
mkdir -p "$src"
tar -C "$kmod" -cf - \
	--exclude=./guest --exclude='*.o' --exclude='*.ko' --exclude='*.mod' \
	--exclude='*.mod.c' --exclude='.*.cmd' --exclude=Module.symvers \
	--exclude=modules.order --exclude='*_test.go' --exclude=.tmp_versions . |
	tar -C "$src" -xf -
[ -f "$src/Kbuild" ] || [ -f "$src/Makefile" ] || die "kmod/ has no Kbuild or Makefile"
# A make above us (make test, make guest) exports its flags and jobserver;
# the kernel build gets neither.
if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
	make -s -C "$kdir" M="$src" -j"$(nproc)" modules >"$out/kmod-build.log" 2>&1; then
	cat "$out/kmod-build.log" >&2
	die "building gpuslice.ko against $kdir failed (log: $out/kmod-build.log)"
fi
ko=$src/gpuslice.ko
[ -f "$ko" ] || die "the kernel build made no gpuslice.ko (log: $out/kmod-build.log)"
echo "kmod/guest/run.sh: built $ko for $kver ($(since "$t0") s)" >&2
# The stand-in NVIDIA driver (guest/nvstub) the guard's test loads itself.
stub=$out/nvstub-src
rm -rf "$stub"
cp -r "$here/nvstub" "$stub"
if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
	make -s -C "$kdir" M="$stub" modules >"$out/nvstub-build.log" 2>&1; then
	cat "$out/nvstub-build.log" >&2
	die "building nvstub.ko against $kdir failed (log: $out/nvstub-build.log)"
fi
[ "$mode" = module ] && exit 0

# --- (c) the test programs: every tests/*.c is one static program.
t0=$(now)
tests=${GSGUEST_TESTS:-$here/tests}
tests=$(cd "$tests" && pwd) || die "no test directory $tests"
rm -rf "$out/tests"
mkdir -p "$out/tests"
progs=()
for c in "$tests"/*.c; do
	[ -e "$c" ] || continue
	progs+=("$(basename "$c" .c)")
done
[ ${#progs[@]} -gt 0 ] || die "no test programs in $tests/*.c"
pids=()
for p in "${progs[@]}"; do
	gcc -static -O2 -Wall -Wextra -Werror \
		-I"$kmod/include/uapi" -I"$kmod/include" -I"$tests" \
		-o "$out/tests/$p" "$tests/$p.c" -lpthread 2>"$out/tests/$p.log" &
	pids+=($!)
done
failed=()
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || failed+=("${progs[$i]}")
done
if [ ${#failed[@]} -gt 0 ]; then
	for p in "${failed[@]}"; do cat "$out/tests/$p.log" >&2; done
	die "test programs failed to compile: ${failed[*]}"
fi
rm -f "$out/tests/"*.log
# Go tests that need the module (tests/GO: "name package -test.run-regex"
# a line): built static (CGO_ENABLED=0) as name.gotest, run by a wrapper
# named name that turns go test's verdicts into GSTEST markers (a test
# skipped in the guest counts as failed: it is here to run).
if [ -f "$tests/GO" ]; then
	root_dir=$(dirname "$kmod")
	while read -r name pkg run; do
		case "$name" in '' | '#'*) continue ;; esac
		(cd "$root_dir" && CGO_ENABLED=0 go test -c -o "$out/tests/$name.gotest" "$pkg") ||
			die "building the Go test $pkg for the guest failed"
		cat >"$out/tests/$name" <<WRAP
#!/bin/sh
GPUSLICE_GUEST=1 /tests/$name.gotest -test.v -test.count=1 -test.timeout=100s -test.run '$run' >/tmp/$name.out 2>&1
rc=\$?
awk -v p=$name '{ print }
	/^ *--- PASS: / { print "GSTEST " p " PASS " \$3 }
	/^ *--- (FAIL|SKIP): / { print "GSTEST " p " FAIL " \$3 ": " \$2 " (see above)"; bad = 1 }
	END { exit bad }' /tmp/$name.out || rc=1
exit \$rc
WRAP
		chmod 0755 "$out/tests/$name"
		progs+=("$name")
	done <"$tests/GO"
fi
echo "kmod/guest/run.sh: built ${#progs[@]} test programs ($(since "$t0") s)" >&2

# The run order: tests/ORDER (names, one a line; blank lines and # comments
# ignored), then any program it does not name, alphabetically, so that no
# program is skipped silently. With TEST arguments, just those.
has() {
	local x=$1
	shift
	local y
	for y in "$@"; do [ "$x" = "$y" ] && return 0; done
	return 1
}
order=()
if [ ${#only[@]} -gt 0 ]; then
	for p in "${only[@]}"; do
		has "$p" "${progs[@]}" || die "no test program $p (no $tests/$p.c)"
		order+=("$p")
	done
else
	if [ -f "$tests/ORDER" ]; then
		while read -r p _; do
			case "$p" in '' | '#'*) continue ;; esac
			has "$p" "${progs[@]}" || die "tests/ORDER names $p, but there is no $tests/$p.c"
			has "$p" "${order[@]}" || order+=("$p")
		done <"$tests/ORDER"
	fi
	for p in "${progs[@]}"; do # the glob above is sorted
		if ! has "$p" "${order[@]}"; then
			[ -f "$tests/ORDER" ] && echo "kmod/guest/run.sh: note: $p is not in tests/ORDER; it runs last" >&2
			order+=("$p")
		fi
	done
fi
printf '%s\n' "${order[@]}" >"$out/ORDER"

# --- (d) the initramfs: busybox applets, /init, the module, the programs.
t0=$(now)
busybox=$(command -v busybox || true)
[ -n "$busybox" ] || die "busybox not found; install busybox-static with kmod/guest/deps.sh"
file -L "$busybox" 2>/dev/null | grep -q 'statically linked' ||
	ldd "$busybox" 2>&1 | grep -q 'not a dynamic executable' ||
	die "$busybox is not statically linked; install busybox-static"
root=$out/initramfs
rm -rf "$root"
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,tests}
cp "$busybox" "$root/bin/busybox"
# One symlink per applet; not the busybox applet itself (bin/busybox is the
# binary: a link there would point at itself).
# (Parameter expansions rather than basename/dirname: a fork less each.)
while read -r a; do
	[ "${a##*/}" = busybox ] && continue
	[ -d "$root/${a%/*}" ] || mkdir -p "$root/${a%/*}"
	ln -s /bin/busybox "$root/$a"
done < <("$busybox" --list-full)
install -m 0755 "$here/init" "$root/init"
install -m 0644 "$ko" "$root/gpuslice.ko"
install -m 0644 "$stub/nvstub.ko" "$root/nvstub.ko"
for p in "${order[@]}"; do
	install -m 0755 "$out/tests/$p" "$root/tests/$p"
	[ ! -f "$out/tests/$p.gotest" ] || install -m 0755 "$out/tests/$p.gotest" "$root/tests/$p.gotest"
done
cp "$out/ORDER" "$root/tests/ORDER"
# The shim, the simulated driver and gstest (built by make c) with the C
# library they load, for the tests that run CUDA programs in the guest
# (tests/shim.c): /shim/lib and /shim/bin.
shimbuild=${GSGUEST_SHIM_BUILD:-$(dirname "$kmod")/build}
for f in lib/libgpuslice.so lib/libcuda.so.1 lib/libnvidia-ml.so.1 bin/gstest; do
	[ -f "$shimbuild/$f" ] || die "no $shimbuild/$f: build the shim first (make c)"
	mkdir -p "$root/shim/${f%/*}"
	cp -L "$shimbuild/$f" "$root/shim/$f"
done
# Every library ldd resolves (and the loader), at the same path.
ldd "$shimbuild/bin/gstest" "$shimbuild/lib/"*.so* 2>/dev/null |
	grep -oE '/[^ ]+\.so[^ ]*' | grep -v "^$shimbuild" | sort -u |
	while read -r so; do cp -L --parents "$so" "$root"; done
# Owned by root inside the guest whoever builds it; /dev/console comes from
# the kernel's built-in initramfs.
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) |
	gzip -1 >"$out/initramfs.gz"
echo "kmod/guest/run.sh: packed $out/initramfs.gz ($(since "$t0") s)" >&2
[ "$mode" = noboot ] && exit 0

# --- (e) the boot. TCG only (KVM hangs on the CI machines); one TCG thread
# (multi-threaded TCG with 2 vCPUs hangs now and then), and one vCPU
# (GSGUEST_SMP, default 1): one thread emulating two vCPUs runs each in
# turn, so an interrupt handler on one waits while the other runs, and the
# kernel reports "hrtimer: interrupt took" ms that no code of the guest
# took (1 full run in 3 on a loaded host), which the harness must be free
# to treat as an error. The kernel panics on
# any oops or soft lockup; panic=-1 with -no-reboot makes qemu exit at once.
# panic_print=32 replays the whole kernel log on panic (the oops itself
# included, which the console may have filtered); hung_task_panic turns a
# task stuck in D state for 60 s into a panic too. quiet keeps the boot
# short; /init then lowers the console level so that only emergencies
# interleave with the markers (everything else is in the dmesg it prints).
append="console=ttyS0 panic=-1 oops=panic softlockup_panic=1 panic_print=32"
append+=" hung_task_panic=1 sysctl.kernel.hung_task_timeout_secs=60 rdinit=/init quiet"
append+=" gsguest.test_timeout=$test_timeout_s"
[ -z "${GSGUEST_APPEND:-}" ] || append+=" $GSGUEST_APPEND"
log=$out/serial.log
echo "kmod/guest/run.sh: booting $vmlinuz in qemu (TCG, up to $timeout_s s); console: $log" >&2
t0=$(now)
rc=0
# The emulated CPU is one host thread: a host that preempts it stops the
# guest inside whatever it runs, an interrupt included, and the kernel
# then reports the interrupt as long ("hrtimer: interrupt took", 5.9 ms
# in a loaded run), which the harness counts as the guest's. As root
# (CI), qemu runs at a higher priority than the tests beside it.
prio=()
[ "$(id -u)" = 0 ] && prio=(nice -n -10)
timeout -k 10 "$timeout_s" "${prio[@]}" qemu-system-x86_64 \
	-accel tcg,thread=single -cpu max -smp "${GSGUEST_SMP:-1}" -m 1024 \
	-kernel "$vmlinuz" -initrd "$out/initramfs.gz" -append "$append" \
	-nographic -no-reboot -nodefaults -serial stdio -monitor none \
	</dev/null >"$log" 2>"$out/qemu.err" || rc=$?
secs=$(since "$t0")
echo "$secs" >"$out/boot.seconds"
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
	echo "kmod/guest/run.sh: qemu ran past $timeout_s s and was killed" >&2
elif [ "$rc" -ne 0 ]; then
	echo "kmod/guest/run.sh: qemu exited $rc: $(cat "$out/qemu.err")" >&2
fi
echo "kmod/guest/run.sh: guest ran $secs s; serial log: $log" >&2
# The verdict is the markers' (kmod/guest/guest_test.go); a run without
# GSGUEST DONE certainly failed.
grep -aq "GSGUEST DONE" "$log" || exit 1
exit 0
