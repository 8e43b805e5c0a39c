#!/usr/bin/env bash
# Installs what building gpuslice.ko and booting it in a qemu guest needs:
# Debian's kernel image and headers, qemu (TCG), busybox-static, cpio, kmod.
# Idempotent and quiet when everything is present; needs root (CI is root).
set -euo pipefail

pkgs=(qemu-system-x86 linux-image-amd64 linux-headers-amd64 busybox-static cpio kmod)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "kmod/guest/deps.sh: missing packages: ${missing[*]}; run as root:" >&2
	echo "  apt-get install --no-install-recommends ${missing[*]}" >&2
	exit 1
fi
echo "kmod/guest/deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may have stale lists; a failed update is not fatal when
# the packages are already known.
apt-get update -qq >/dev/null 2>&1 || true
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
