#!/usr/bin/env bash
# Builds the container runtime the node agent's end-to-end tests run
# against, at pinned versions, into a cache outside the clone, and prints
# the directory of the binaries on stdout (progress goes to stderr):
#
#   containerd v2.4.2  containerd, ctr, containerd-shim-runc-v2
#                      (CGO_ENABLED=0, -tags no_btrfs; embeds NRI v0.12.x)
#   runc v1.5.3        CGO_ENABLED=1 -tags seccomp (needs libseccomp-dev and
#                      pkg-config: installed with apt-get when run as root)
#   crictl v1.37.0     sigs.k8s.io/cri-tools/cmd/crictl
#
# Usage: nri-plugin/e2e/tools.sh      (GPUSLICE_E2E_CACHE moves the cache,
#                                      default /var/cache/gpuslice-e2e)
#
# Everything comes from the Go module proxy through plain
# `go install pkg@version`: at these versions none of the three main
# modules (containerd/v2, runc, cri-tools) has a replace directive, so the
# throwaway-module detour that etcd and Kubernetes need is not necessary.
# Should a future version add one, go install stops with "The go.mod file
# for the module providing named packages contains one or more replace
# directives"; build it then from a temporary module that requires the
# module (`go mod init tmp && go get pkg@version && go build -o DIR pkg`).
#
# Cold build on 2 cores: about 3 minutes; when the binaries are there the
# script only prints the directory. The build goes into a temporary
# directory beside the final one and is renamed into place, under an
# exclusive flock, so concurrent callers (go test runs packages in
# parallel) wait for one build instead of racing, and an interrupted build
# leaves nothing that looks complete.
set -euo pipefail

CONTAINERD_VERSION=v2.4.2
RUNC_VERSION=v1.5.3
CRICTL_VERSION=v1.37.0
# Bump REV when the recipe below changes (flags, tags), so caches rebuild.
REV=1
KEY="containerd-${CONTAINERD_VERSION}_runc-${RUNC_VERSION}_crictl-${CRICTL_VERSION}_r${REV}"

CACHE=${GPUSLICE_E2E_CACHE:-/var/cache/gpuslice-e2e}
DIR=$CACHE/$KEY
BINS=(containerd ctr containerd-shim-runc-v2 runc crictl)

# complete DIR: true when every binary is in DIR/bin.
complete() {
	local b
	for b in "${BINS[@]}"; do
		[ -x "$1/bin/$b" ] || return 1
	done
}

# The fast path: a finished build (renamed into place whole) is there.
if complete "$DIR"; then
	echo "$DIR/bin"
	exit 0
fi

mkdir -p "$CACHE" || {
	echo "tools.sh: cannot create $CACHE; run as root or set GPUSLICE_E2E_CACHE" >&2
	exit 1
}
# One build at a time; whoever waited finds the work done.
exec 9>"$CACHE/$KEY.lock"
flock 9
if complete "$DIR"; then
	echo "$DIR/bin"
	exit 0
fi

# runc's seccomp support links libseccomp through pkg-config.
"$(dirname "$0")/../../internal/scripts/apt-need.sh" tools.sh libseccomp-dev pkg-config

tmp=$(mktemp -d "$CACHE/.build-$KEY.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
chmod 0755 "$tmp" # mktemp's 0700 would hide the tools from other users
mkdir "$tmp/bin"
# go install ignores any go.mod around it for pkg@version, but run it from
# an empty directory anyway, with the proxy and no VCS stamping (there is no
# repository to stamp from).
cd "$tmp"
export GOBIN=$tmp/bin GOFLAGS=-buildvcs=false
export GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}

start=$SECONDS
echo "tools.sh: building containerd $CONTAINERD_VERSION, runc $RUNC_VERSION, crictl $CRICTL_VERSION into $DIR (a few minutes, once)" >&2

# containerd: static, without the btrfs snapshotter (no btrfs headers).
CGO_ENABLED=0 go install -trimpath -tags no_btrfs \
	-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
	"github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
	"github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION" \
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"

# runc: cgo for libseccomp (and runc's nsenter C code).
CGO_ENABLED=1 go install -trimpath -tags seccomp \
	-ldflags "-s -w -X main.version=${RUNC_VERSION#v}" \
	"github.com/opencontainers/runc@$RUNC_VERSION"

# crictl.
CGO_ENABLED=0 go install -trimpath \
	-ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
	"sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"

complete "$tmp" || {
	echo "tools.sh: the build did not produce all of ${BINS[*]}" >&2
	exit 1
}
# Into place in one rename; a leftover DIR (incomplete, from a version of
# this script that did not rename) goes first.
rm -rf "$DIR"
mv "$tmp" "$DIR"
trap - EXIT
echo "tools.sh: built in $((SECONDS - start)) s" >&2
echo "$DIR/bin"
