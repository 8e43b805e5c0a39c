# gpuslice: everything builds and tests from here on a machine with only
# Go, gcc and make. Tools the checks need are installed by this Makefile at
# pinned versions into a cache outside the clone.

SHELL := /bin/bash
BUILD := $(CURDIR)/build
GO ?= go
TOOLS ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gpuslice/tools
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(TOOLS)/staticcheck-$(STATICCHECK_VERSION)/staticcheck

export CGO_ENABLED := 1
# go-nvml's cgo code includes nvml.h, whose deprecated declarations warn on
# every fresh build; they are NVIDIA's, not ours.
export CGO_CFLAGS := -O2 -g -Wno-deprecated-declarations

.PHONY: all build c go demo test lint check-c bench bench-kube clean kmod guest guest-deps kube-deps install uninstall install-deps helm-deps manifests image

all: build

## build: the simulated driver, the shim, the C test programs and the Go code.
build: c go

c:
	$(MAKE) -s -C interposer BUILD=$(BUILD)
	$(MAKE) -s -C benchmarks BUILD=$(BUILD)

go:
	$(GO) build ./...
	$(GO) build -o $(BUILD)/bin/gpuslice-nri ./nri-plugin
	$(GO) build -o $(BUILD)/bin/gpuslice ./cmd/gpuslice
	$(GO) build -o $(BUILD)/bin/gpuslice-webhook ./cmd/gpuslice-webhook

## kmod: gpuslice.ko, built out of tree into build/kmod/kmod-src/ against
## the newest installed Debian kernel headers (kmod/guest/deps.sh installs
## them; GSGUEST_KVER=<version> picks another).
kmod:
	kmod/guest/run.sh --module-only $(BUILD)/kmod

## guest: boots gpuslice.ko and kmod/guest/tests in a qemu guest and prints
## the markers of build/guest/serial.log (make guest GUEST_TESTS="a b" runs
## only those programs). make test runs the same through kmod/guest's Go test.
guest:
	@rc=0; kmod/guest/run.sh $(BUILD)/guest $(GUEST_TESTS) || rc=$$?; \
	log=$(BUILD)/guest/serial.log; \
	[ -f $$log ] || exit 1; \
	grep -aoE 'GS(GUEST|TEST|BENCH) .*' $$log | tr -d '\r'; \
	if grep -aqE 'GSTEST .* FAIL|GSGUEST (INSMOD|RMMOD|RELOAD .*) FAIL|GSGUEST TEST .* rc=[1-9]|BUG:|Oops|WARNING:|Kernel panic|Call Trace:' $$log; then \
		echo "guest: FAILED (log: $$log)"; exit 1; fi; \
	[ $$rc -eq 0 ] || { echo "guest: FAILED (log: $$log)"; exit 1; }; \
	echo "guest: ok (log: $$log)"

# The guest test's packages (kernel image and headers, qemu, busybox):
# installed as root, else named; the guest test itself would say the same,
# later. GPUSLICE_SKIP_GUEST=1 skips that test and this.
guest-deps:
	@[ "$(GPUSLICE_SKIP_GUEST)" = 1 ] || kmod/guest/deps.sh

# The end-to-end tools (containerd, runc, crictl; etcd and Kubernetes
# v1.37.2, the CNI plugins), built into /var/cache/gpuslice-e2e before go
# test runs, so that a cold build (about 3 + 10 minutes on 2 cores) is not
# spent inside a test binary's timeout; warm, they cost milliseconds.
# GPUSLICE_SKIP_KUBE=1 (or GPUSLICE_SKIP_E2E=1) skips the Kubernetes tests
# and this.
kube-deps:
	@[ "$(GPUSLICE_SKIP_KUBE)" = 1 ] || [ "$(GPUSLICE_SKIP_E2E)" = 1 ] || \
		{ nri-plugin/e2e/tools.sh >/dev/null && nri-plugin/e2e/kube-tools.sh >/dev/null; }

# The node install's tests (install/node): systemd-analyze (Debian's
# systemd) for the unit, dkms for the module's DKMS build (skipped with
# GPUSLICE_SKIP_GUEST=1, as the guest test), installed before go test runs
# so that no apt-get runs inside a test beside another package's.
# clang-14, llvm-14 (llvm-strip) and libbpf-dev for pkg/guard's check that
# its checked-in BPF objects are what bpf/ compiles to (GPUSLICE_SKIP_BPF=1
# skips that check and these).
install-deps:
	@internal/scripts/apt-need.sh install-deps systemd $(if $(filter 1,$(GPUSLICE_SKIP_GUEST)),,dkms) \
		$(if $(filter 1,$(GPUSLICE_SKIP_BPF)),,clang-14 llvm-14 libbpf-dev)

# Helm v3.22.0, which the chart's tests (install/helm) run, built into
# ~/.cache/gpuslice/tools before go test runs (install/helm/tools.sh: a
# cold build is 1.5-5 minutes on 2 cores, warm it costs milliseconds).
# GPUSLICE_SKIP_HELM=1 skips the chart's tests and this.
helm-deps:
	@[ "$(GPUSLICE_SKIP_HELM)" = 1 ] || install/helm/tools.sh >/dev/null

## manifests: renders the plain manifests of install/kubernetes from the
## Helm chart install/helm/gpuslice (a test fails when they are stale).
manifests: helm-deps
	$(GO) test -count=1 -run '^TestPlainManifests$$' ./install/helm -update

## image: the container image of the agent, the shim, the status command,
## the webhook and the module's source, as an OCI layout tar
## (install/image/README.md): build/image/gpuslice.tar, named $(IMAGE),
## by default the chart's image at its appVersion (which `gpuslice
## version` prints), so that helm install's defaults find it once
## imported. Reproducible; import with
## ctr -n k8s.io images import, push with skopeo.
APP_VERSION := $(shell sed -n 's/^appVersion: "\(.*\)"$$/\1/p' install/helm/gpuslice/Chart.yaml)
IMAGE ?= ghcr.io/gpuslice/gpuslice:$(APP_VERSION)
image:
	VERSION=$(APP_VERSION) install/image/build.sh $(BUILD)/image/gpuslice.tar $(IMAGE)
	@echo "image: $(BUILD)/image/gpuslice.tar ($(IMAGE))"

## demo: a container's worth of processes hitting their shared cap.
demo: c
	./interposer/demo/demo.sh $(BUILD)

## test: every test (C builds warning-free, Go lint, unit and end-to-end,
## gpuslice.ko in a qemu guest: kmod/guest, a real single-node Kubernetes:
## internal/kube, e2e/cluster). The timeout is go test's per package: the packages that
## run a Kubernetes cluster take turns (one cluster a machine), so one may
## wait for another's whole run.
##
## The shim's package (interposer) goes first and alone: its gate tests
## measure tenants' shares of wall time, which need the CPU to launch on
## time, and go test runs packages two at a time on a 2-core machine.
## Beside the qemu guest (its emulator at nice -10) and a Kubernetes
## cluster, tenants due 25/25/50 % got 16/16/38, starved; alone they hold
## to a point or two. Then every other package, in parallel.
TIMED_PKG := github.com/gpuslice/gpuslice/interposer
test: lint c guest-deps kube-deps install-deps helm-deps
	$(GO) test -count=1 -timeout 30m $(TIMED_PKG)
	$(GO) test -count=1 -timeout 30m $$($(GO) list ./... | grep -vx '$(TIMED_PKG)')

$(STATICCHECK):
	mkdir -p $(dir $@)
	GOBIN=$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

lint: $(STATICCHECK)
	@files=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$files" ]; then echo "gofmt needed: $$files"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	./kmod/checkpatch.sh

## bench: the shim's overhead against the bare simulated driver, and the
## compute gate's shares per policy (benchmarks/README.md).
bench: c
	$(GO) test -run '^$$' -bench . -benchtime 2x ./benchmarks/...

## bench-kube: pods to Running with and without a vGPU claim on a real
## single-node Kubernetes (as root), and a claim's prepare and unprepare.
bench-kube: c kube-deps
	$(GO) test -run '^$$' -bench PodToRunning -benchtime 3x ./e2e/cluster/
	$(GO) test -run '^$$' -bench PrepareUnprepare -benchtime 200x ./nri-plugin/dra/

## install: sudo make install puts gpuslice on this node (install/README.md):
## the agent and its systemd unit, gpuslice, the shim, gpuslice.ko through
## DKMS, /etc/gpuslice/config.yaml (never over an edited one), NRI turned
## on in containerd by a drop-in. DESTDIR=/scratch writes the same files
## there and leaves the running system alone; PREFIX (/usr/local) is where
## the binaries go. Running it again changes only what changed (upgrades).
## CONTAINERD_CONFIG (/etc/containerd/config.toml) and CONTAINERD_VERSION
## (1 or 2; default: what containerd --version says) where they differ;
## NO_MODULE=1 installs without gpuslice.ko (enforcement: file).
PREFIX ?= /usr/local
DESTDIR ?=
INSTALLER := $(BUILD)/bin/gpuslice-install
install: build
	$(GO) build -o $(INSTALLER) ./cmd/gpuslice-install
	$(INSTALLER) install -destdir "$(DESTDIR)" -prefix "$(PREFIX)" -source $(CURDIR) -build $(BUILD) \
		$(if $(CONTAINERD_CONFIG),-containerd-config "$(CONTAINERD_CONFIG)") \
		$(if $(CONTAINERD_VERSION),-containerd-version $(CONTAINERD_VERSION)) \
		$(if $(filter 1,$(NO_MODULE)),-no-module)

## uninstall: removes what make install installed (refused while vGPUs are
## in use unless FORCE=1); an edited config stays.
uninstall:
	$(GO) build -o $(INSTALLER) ./cmd/gpuslice-install
	$(INSTALLER) uninstall -destdir "$(DESTDIR)" $(if $(filter 1,$(FORCE)),-force)

clean:
	rm -rf $(BUILD)
