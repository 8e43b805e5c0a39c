#!/usr/bin/env bash
# Installs the Debian packages a build or test needs, when they are missing:
#
#   internal/scripts/apt-need.sh WHO PACKAGE...
#
# Quiet and idempotent when all are present. Otherwise installs them with
# apt-get as root (CI is root), or, not root, names them and exits 1. WHO
# prefixes the messages (the caller's name).
set -euo pipefail

who=$1
shift
missing=()
for p in "$@"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "$who: missing packages: ${missing[*]}; run as root, or install them:" >&2
	echo "  apt-get install --no-install-recommends ${missing[*]}" >&2
	exit 1
fi
echo "$who: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may have stale lists; a failed update is not fatal when
# the packages are already known.
apt-get update -qq >/dev/null 2>&1 || true
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
