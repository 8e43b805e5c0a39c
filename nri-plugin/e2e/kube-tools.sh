#!/usr/bin/env bash
# Builds the single-node Kubernetes the Kubernetes end-to-end tests run
# (internal/kube), at pinned versions, into a cache outside the clone, and
# prints the directory of the binaries on stdout (progress goes to stderr):
#
#   etcd v3.6.16        bin/etcd
#   Kubernetes v1.37.2  bin/kube-apiserver, kube-controller-manager,
#                       kube-scheduler, kubelet, kubectl
#   CNI plugins v1.9.1  cni/bridge, cni/host-local, cni/loopback
#                       (the directory beside bin/)
#
# Usage: nri-plugin/e2e/kube-tools.sh   (GPUSLICE_E2E_CACHE moves the cache,
#                                        default /var/cache/gpuslice-e2e,
#                                        shared with tools.sh)
#
# The sandbox (pause) image is not built here: the busybox image of
# image.sh has a static /pause as its default command and is containerd's
# pinned sandbox image already.
#
# Everything comes from the Go module proxy, CGO_ENABLED=0 -trimpath. etcd
# and Kubernetes cannot be built with `go install pkg@version`: their
# go.mod files carry replace directives (to ./staging and ../api), which go
# install refuses. Each is built from a throwaway module instead: etcd's
# requires go.etcd.io/etcd/server/v3; Kubernetes' requires k8s.io/kubernetes
# and replaces every staging module its go.mod points at ./staging with the
# same module at the matching v0.x.y (v1.37.2 -> v0.37.2). The binaries get
# the version stamps the Kubernetes release build gives them
# (hack/lib/version.sh): feature gates and version-skew checks read them.
# The CNI plugins install with plain go install.
#
# Cold build on 2 cores: about 10-15 minutes (Kubernetes dominates), some
# 3 GB of memory and 4 GB of Go build cache; when the binaries are there
# the script only prints the directory. internal/scripts/tools-cache.sh
# does the caching, as for tools.sh: one build at a time, renamed into
# place whole.
set -euo pipefail

ETCD_VERSION=v3.6.16
KUBE_VERSION=v1.37.2
CNI_VERSION=v1.9.1
# Bump REV when the recipe below changes (flags, stamps), so caches rebuild.
REV=1
KEY="kube-${KUBE_VERSION}_etcd-${ETCD_VERSION}_cni-${CNI_VERSION}_r${REV}"

CACHE=${GPUSLICE_E2E_CACHE:-/var/cache/gpuslice-e2e}
BINS=(bin/etcd bin/kube-apiserver bin/kube-controller-manager bin/kube-scheduler
	bin/kubelet bin/kubectl cni/bridge cni/host-local cni/loopback)
# shellcheck source=../../internal/scripts/tools-cache.sh
. "$(dirname "$0")/../../internal/scripts/tools-cache.sh"
cache_open

mkdir "$tmp/bin" "$tmp/cni" "$tmp/mod-etcd" "$tmp/mod-kube"
export GOFLAGS=-buildvcs=false CGO_ENABLED=0
export GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}
echo "kube-tools.sh: building etcd $ETCD_VERSION, Kubernetes $KUBE_VERSION, CNI plugins $CNI_VERSION into $DIR (10-15 minutes, once)" >&2

# etcd: its server module's root package is the etcd binary.
(
	cd "$tmp/mod-etcd"
	go mod init gpuslice.invalid/etcd-build >/dev/null 2>&1
	go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
	go build -trimpath -ldflags "-s -w" -o "$tmp/bin/etcd" go.etcd.io/etcd/server/v3
)
echo "kube-tools.sh: etcd built at $((SECONDS - start)) s" >&2

# Kubernetes: the staging replaces, read from k8s.io/kubernetes's own go.mod.
(
	cd "$tmp/mod-kube"
	go mod init gpuslice.invalid/kube-build >/dev/null 2>&1
	kmod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" |
		sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
	[ -f "$kmod" ] || {
		echo "kube-tools.sh: no go.mod for k8s.io/kubernetes@$KUBE_VERSION" >&2
		exit 1
	}
	staging=v0.${KUBE_VERSION#v1.}
	edits=(-require "k8s.io/kubernetes@$KUBE_VERSION")
	for m in $(sed -n 's|^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/.*|\1|p' "$kmod"); do
		edits+=(-replace "$m=$m@$staging")
	done
	[ ${#edits[@]} -gt 20 ] || {
		echo "kube-tools.sh: found only $(((${#edits[@]} - 2) / 2)) staging replaces in $kmod" >&2
		exit 1
	}
	go mod edit "${edits[@]}"
	ver=${KUBE_VERSION#v}
	major=${ver%%.*}
	minor=${ver#*.}
	minor=${minor%%.*}
	ldflags="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
		ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
	done
	cmds=()
	for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
		cmds+=("k8s.io/kubernetes/cmd/$c")
	done
	# -mod=mod: let the build complete go.sum from the proxy.
	go build -mod=mod -trimpath -ldflags "$ldflags" -o "$tmp/bin/" "${cmds[@]}"
)
echo "kube-tools.sh: Kubernetes built at $((SECONDS - start)) s" >&2

GOBIN=$tmp/cni go install -trimpath -ldflags "-s -w" \
	"github.com/containernetworking/plugins/plugins/main/bridge@$CNI_VERSION" \
	"github.com/containernetworking/plugins/plugins/ipam/host-local@$CNI_VERSION" \
	"github.com/containernetworking/plugins/plugins/main/loopback@$CNI_VERSION"

rm -rf "$tmp/mod-etcd" "$tmp/mod-kube"
cache_commit
