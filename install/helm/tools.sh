#!/usr/bin/env bash
# Builds the pinned Helm the chart's tests run (helm lint, helm template)
# into a cache outside the clone, and prints the directory of the binary
# on stdout (progress goes to stderr):
#
#   Helm v3.22.0  bin/helm
#
# Usage: install/helm/tools.sh   (GPUSLICE_TOOLS moves the cache, default
#                                 ${XDG_CACHE_HOME:-~/.cache}/gpuslice/tools,
#                                 beside staticcheck's: no root needed)
#
# Helm's go.mod has no replace directives, so plain `go install` builds
# it from the Go module proxy (CGO_ENABLED=0 -trimpath). The stamps are
# those Helm's own Makefile gives a release: its version (`helm version`,
# .Capabilities.HelmVersion) and the Kubernetes version `helm template`
# and `helm lint` assume without a cluster, 1.N for the client-go v0.N of
# Helm's go.mod (unstamped it is 1.20, which the chart's kubeVersion
# refuses). Cold build on 2 cores: about 1.5-5 minutes and
# 1 GB of Go build cache, once per machine; warm, the script only prints
# the directory. internal/scripts/tools-cache.sh does the caching: one
# build at a time, renamed into place whole.
set -euo pipefail

HELM_VERSION=v3.22.0
# Bump REV when the recipe below changes (flags, stamps), so caches rebuild.
REV=1
KEY="helm-${HELM_VERSION}_r${REV}"

CACHE=${GPUSLICE_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuslice/tools}
CACHE_VAR=GPUSLICE_TOOLS
BINS=(bin/helm)
# shellcheck source=../../internal/scripts/tools-cache.sh
. "$(dirname "$0")/../../internal/scripts/tools-cache.sh"
cache_open

echo "tools.sh: building Helm $HELM_VERSION into $DIR (1.5-5 minutes, once)" >&2
export GOFLAGS=-buildvcs=false CGO_ENABLED=0
export GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}
gomod=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" |
	sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
kminor=$(sed -n 's/^[[:space:]]*k8s\.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod")
[ -n "$kminor" ] || {
	echo "tools.sh: no k8s.io/client-go in $gomod" >&2
	exit 1
}
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
	ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$kminor"
done
GOBIN=$tmp/bin go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
cache_commit
