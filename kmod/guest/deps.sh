#!/usr/bin/env bash
# Installs what building gpuslice.ko and booting it in a qemu guest needs:
# Debian's kernel image and headers, qemu (TCG), busybox-static, cpio, kmod.
# Idempotent and quiet when everything is present; needs root (CI is root).
set -euo pipefail

pkgs=(qemu-system-x86 linux-image-amd64 linux-headers-amd64 busybox-static cpio kmod)
exec "$(dirname "$0")/../../internal/scripts/apt-need.sh" kmod/guest/deps.sh "${pkgs[@]}"
