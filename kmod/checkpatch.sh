#!/usr/bin/env bash
# Runs the kernel's checkpatch.pl over the module's C sources. The script
# comes from Debian's linux-source-6.1 package, extracted once into a cache
# outside the clone (about 10 s; apt-get download needs no root).
set -euo pipefail

kmod=$(cd "$(dirname "$0")" && pwd)
cache=${GPUSLICE_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuslice/tools}/checkpatch-6.1
cp=$cache/scripts/checkpatch.pl

if [ ! -x "$cp" ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	(cd "$tmp" && apt-get download -qq linux-source-6.1 2>/dev/null) || {
		echo "kmod/checkpatch.sh: apt-get download linux-source-6.1 failed;" \
			"checkpatch.pl is needed to lint the module" >&2
		exit 1
	}
	dpkg-deb --fsys-tarfile "$tmp"/linux-source-6.1_*.deb |
		tar -x -C "$tmp" ./usr/src/linux-source-6.1.tar.xz
	mkdir -p "$cache.new"
	xz -dc "$tmp"/usr/src/linux-source-6.1.tar.xz |
		tar -x -C "$cache.new" --strip-components=1 \
			linux-source-6.1/scripts/checkpatch.pl \
			linux-source-6.1/scripts/spelling.txt \
			linux-source-6.1/scripts/const_structs.checkpatch
	rm -rf "$cache" && mv "$cache.new" "$cache"
fi

cd "$kmod"
# The module's own sources are held to --strict.
perl "$cp" --quiet --no-tree --strict --show-types -f \
	gs_*.c gs_kmod.h core/gs_sched.c core/gs_drain.c core/gs_sched.h \
	core/gs_sched_int.h include/uapi/gpuslice.h \
	include/uapi/gpuslice_guard.h
# The two headers that exist to bridge kernels and user space: version
# tests and user-space typedefs are their purpose.
perl "$cp" --quiet --no-tree --show-types \
	--ignore LINUX_VERSION_CODE,CONSTANT_COMPARISON,PREFER_KERNEL_TYPES \
	-f gs_kcompat.h core/gs_compat.h
# The guest's stand-in NVIDIA driver, as the module.
perl "$cp" --quiet --no-tree --strict --show-types -f guest/nvstub/nvstub.c
# The guard's BPF programs (pkg/guard/bpf): kernel style; volatile const is
# how a BPF program takes a constant from its loader, and kernel.h's
# typedefs stand in for the kernel's own.
perl "$cp" --quiet --no-tree --show-types --ignore VOLATILE,NEW_TYPEDEFS \
	-f ../pkg/guard/bpf/guard.bpf.c ../pkg/guard/bpf/guard.h ../pkg/guard/bpf/kernel.h
