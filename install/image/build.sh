#!/usr/bin/env bash
# Builds gpuslice's container image without a registry or a container
# engine, as an OCI image layout tarred for
#   ctr -n k8s.io images import OUT.tar
#   skopeo copy oci-archive:OUT.tar:TAG docker://REGISTRY/gpuslice:TAG
# One image serves the agent DaemonSet, its shim init container and the
# admission webhook Deployment (the pod contract: install/image/README.md):
#
#   /usr/bin/gpuslice-nri      the node agent (cgo: go-nvml dlopens NVML)
#   /usr/bin/gpuslice          status, install-shim (static)
#   /usr/bin/gpuslice-webhook  the admission webhook (static)
#   /usr/share/gpuslice/libgpuslice.so   the shim, 0444, to copy to the host
#   /usr/src/gpuslice-V/       gpuslice.ko's source and dkms.conf (V its
#                              PACKAGE_VERSION)
#   /etc/gpuslice/config.yaml  the agent's defaults (install/config.yaml)
#   /usr/lib/x86_64-linux-gnu/ the glibc the agent links, and what NVML
#                              needs of it (libm, libdl, libpthread, librt)
#   /etc/passwd, /etc/group, /tmp; no shell
#
# Usage: install/image/build.sh [--label KEY=VALUE]... OUT.tar NAME [NAME...]
#   NAME: the reference each index entry names (ghcr.io/gpuslice/gpuslice:v1)
#   --label: an image label beside the built-in org.opencontainers.image.*
#   VERSION (env): the version `gpuslice version` prints
#   SOURCE_DATE_EPOCH (env): the files' mtime and the created date
#
# Reproducible: -trimpath, -buildvcs=false, no build ids, a C build
# without debug information or source paths, sorted tar entries with fixed
# owners, times and modes (internal/scripts/oci-layout.sh): the same
# sources, Go, gcc and glibc give the same digest.
set -euo pipefail

usage() {
	echo "usage: $0 [--label KEY=VALUE]... OUT.tar NAME [NAME...]" >&2
	exit 2
}

labels=()
while [ "${1:-}" = --label ]; do
	[ $# -ge 2 ] || usage
	# Labels go into JSON as they are: no quote, backslash or control
	# character.
	if ! [[ $2 =~ ^[A-Za-z0-9._/-]+=[A-Za-z0-9\ ._:/@+=,-]*$ ]]; then
		echo "$0: --label $2: want KEY=VALUE, KEY of letters, digits and ._/-, VALUE without quotes or backslashes" >&2
		exit 2
	fi
	labels+=("$2")
	shift 2
done
[ $# -ge 2 ] || usage
out=$1
shift
names=("$@")

repo=$(cd "$(dirname "$0")/../.." && pwd)
GO=${GO:-go}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
libdir=usr/lib/x86_64-linux-gnu
mkdir -p "$root"/{usr/bin,usr/share/gpuslice,usr/share/doc/gpuslice,usr/src,$libdir,usr/lib64,etc/gpuslice,tmp,proc,sys,dev,run,var/lib,var/run}
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"

# The Go commands. No build id, path or VCS stamp in them; the agent's
# cgo objects without debug information.
ldflags="-s -w -buildid="
[ -z "${VERSION:-}" ] || ldflags+=" -X main.version=$VERSION"
gobuild() {
	(cd "$repo" && "$GO" build -trimpath -buildvcs=false -tags netgo,osusergo \
		-ldflags="$ldflags" -o "$root/usr/bin/$1" "$2")
}
CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" gobuild gpuslice-nri ./nri-plugin
CGO_ENABLED=0 gobuild gpuslice ./cmd/gpuslice
CGO_ENABLED=0 gobuild gpuslice-webhook ./cmd/gpuslice-webhook

# The shim, built apart from build/lib (whose -g objects name the clone's
# path) into build/image/c, where make rebuilds only what changed; one
# build at a time (go test runs the image's and the deploy test's
# packages in parallel).
mkdir -p "$repo/build/image"
(
	flock 9
	CFLAGS="-O2 -ffile-prefix-map=$repo/=" \
		make -s -C "$repo/interposer" BUILD="$repo/build/image/c" shim
	install -m 0444 "$repo/build/image/c/lib/libgpuslice.so" "$root/usr/share/gpuslice/libgpuslice.so"
) 9>"$repo/build/image/c.lock"

# glibc: what the agent links (ldd names it) and what NVML links of it.
# Copied by name into the multiarch directory (/lib is a link to usr/lib,
# as on Debian), the loader at the x86-64 ABI's path.
mapfile -t needed < <(ldd "$root/usr/bin/gpuslice-nri" | awk '$2 == "=>" && $3 ~ /^\// {print $3}')
libc=$(printf '%s\n' "${needed[@]}" | grep '/libc\.so\.6$' || true)
if [ -z "$libc" ]; then
	echo "$0: ldd found no libc.so.6 in the agent: not a glibc build?" >&2
	exit 1
fi
for lib in "${needed[@]}" "$(dirname "$libc")"/{libm.so.6,libdl.so.2,libpthread.so.0,librt.so.1}; do
	install -m 0755 "$(readlink -f "$lib")" "$root/$libdir/$(basename "$lib")"
done
install -m 0755 "$(readlink -f /lib64/ld-linux-x86-64.so.2)" "$root/$libdir/ld-linux-x86-64.so.2"
ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$root/usr/lib64/ld-linux-x86-64.so.2"

# The module's source, as dkms add takes it (no tests, no build output).
kver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"$/\1/p' "$repo/kmod/dkms.conf")
[ -n "$kver" ] || {
	echo "$0: no PACKAGE_VERSION in kmod/dkms.conf" >&2
	exit 1
}
src=$root/usr/src/gpuslice-$kver
(cd "$repo/kmod" && find . -type f \( -name '*.[ch]' -o -name Kbuild -o -name Makefile \
	-o -name dkms.conf -o -name README.md \) -not -path './guest/*' -print0) |
	while IFS= read -r -d '' f; do
		install -D -m 0644 "$repo/kmod/$f" "$src/$f"
	done

install -m 0644 "$repo/install/config.yaml" "$root/etc/gpuslice/config.yaml"
install -m 0644 "$repo/LICENSE" "$root/usr/share/doc/gpuslice/LICENSE"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' \
	>"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
chmod 0644 "$root/etc/passwd" "$root/etc/group"

# Modes whatever the umask: directories 0755, /tmp 1777.
find "$root" -type d -exec chmod 0755 {} +
chmod 1777 "$root/tmp"

# The image config: the agent by default, with the chart's arguments.
label_json='"org.opencontainers.image.description":"gpuslice: vGPUs with hard memory caps and compute quotas (node agent, shim, webhook)","org.opencontainers.image.licenses":"Apache-2.0","org.opencontainers.image.source":"https://github.com/gpuslice/gpuslice","org.opencontainers.image.title":"gpuslice"'
if [ ${#labels[@]} -gt 0 ]; then
	while IFS= read -r kv; do
		label_json+=",\"${kv%%=*}\":\"${kv#*=}\""
	done < <(printf '%s\n' "${labels[@]}" | LC_ALL=C sort)
fi
config='{"Env":["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],"Entrypoint":["/usr/bin/gpuslice-nri"],"Cmd":["-config","/etc/gpuslice/config.yaml"],"WorkingDir":"/","Labels":{'$label_json'}}'

# shellcheck source=../../internal/scripts/oci-layout.sh
. "$repo/internal/scripts/oci-layout.sh"
oci_image "$out" "$root" "$config" install/image/build.sh gzip "${names[@]}"
