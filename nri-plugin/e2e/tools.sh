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
# script only prints the directory. internal/scripts/tools-cache.sh does
# the caching: one build at a time, renamed into place whole.
set -euo pipefail

CONTAINERD_VERSION=v2.4.2
RUNC_VERSION=v1.5.3
CRICTL_VERSION=v1.37.0
# Bump REV when the recipe below changes (flags, tags), so caches rebuild.
REV=1
KEY="containerd-${CONTAINERD_VERSION}_runc-${RUNC_VERSION}_crictl-${CRICTL_VERSION}_r${REV}"

CACHE=${GPUSLICE_E2E_CACHE:-/var/cache/gpuslice-e2e}
BINS=(bin/containerd bin/ctr bin/containerd-shim-runc-v2 bin/runc bin/crictl)
# shellcheck source=../../internal/scripts/tools-cache.sh
. "$(dirname "$0")/../../internal/scripts/tools-cache.sh"
cache_open

# runc's seccomp support links libseccomp through pkg-config.
"$(dirname "$0")/../../internal/scripts/apt-need.sh" tools.sh libseccomp-dev pkg-config

mkdir "$tmp/bin"
# go install ignores any go.mod around it for pkg@version, but run it from
# an empty directory anyway, with the proxy and no VCS stamping (there is no
# repository to stamp from).
cd "$tmp"
export GOBIN=$tmp/bin GOFLAGS=-buildvcs=false
export GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}

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

cache_commit
