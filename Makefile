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

.PHONY: all build c go demo test lint check-c bench clean

all: build

## build: the simulated driver, the shim, the C test programs and the Go code.
build: c go

c:
	$(MAKE) -s -C interposer BUILD=$(BUILD)
	$(MAKE) -s -C benchmarks BUILD=$(BUILD)

go:
	$(GO) build ./...

## demo: a container's worth of processes hitting their shared cap.
demo: c
	./interposer/demo/demo.sh $(BUILD)

## test: every test (C builds warning-free, Go lint, unit and end-to-end).
test: lint c
	$(GO) test -count=1 ./...

$(STATICCHECK):
	mkdir -p $(dir $@)
	GOBIN=$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

lint: $(STATICCHECK)
	@files=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$files" ]; then echo "gofmt needed: $$files"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	./kmod/checkpatch.sh

## bench: the shim's overhead against the bare simulated driver.
bench: c
	$(GO) test -run '^$$' -bench . -benchtime 2x ./benchmarks/...

clean:
	rm -rf $(BUILD)
