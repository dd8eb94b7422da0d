# fke — see README.md. `make help` lists the targets.
SHELL := /usr/bin/env bash
GO ?= go
OUTPUT ?= $(CURDIR)/_output
BIN := $(OUTPUT)/bin
CONTROLLER_GEN := $(OUTPUT)/tools/controller-gen
export FKE_BIN_DIR ?= $(BIN)
# go-nvml's cgo bindings declare functions NVIDIA marked deprecated; the
# compiler's warnings about them say nothing about fke and fill the screen.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
# kustomize (fke deploy) links Go's plugin package unless told not to; fke
# loads no kustomize plugins, so leave it out. (Plain `go build ./cmd/...`
# works too: only fke-gpu-agent links the NVML bindings, and it has no
# kustomize.)
BUILD_TAGS := kustomize_disable_go_plugin_support
export GOFLAGS := $(strip $(GOFLAGS) -tags=$(BUILD_TAGS))

.PHONY: help all build binaries demo-binaries release docs lint generate chart-crds generate-tenant-crds manifests test test-unit test-integration test-e2e demo bench vet clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

all: build binaries ## build fke and the upstream binaries

build: ## build fke, fke-manager, fke-gpu-agent, fke-gpu-metrics, fke-vpa, fke-pause and fke-demo-server into _output/bin
	@mkdir -p $(BIN)
	@echo "building fke's binaries into $(BIN) (minutes on an empty Go cache, seconds after)"
	@start=$$(date +%s); $(GO) build -o $(BIN)/ ./cmd/... && echo "fke's binaries built in $$(( $$(date +%s) - start ))s"

binaries: ## build kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl, kube-proxy, etcd, etcdutl, kwok, registry, coredns, metrics-server, kueue (for its e2e test) and fke-kube-plane (one-process tenant control planes) into _output/bin, and the v1.36 components into _output/bin/v1.36.3 (skips current ones)
	@hack/k8s/build.sh $(BIN)

# What the demo runs: not the older minor's components (clusters on it, and
# upgrades from it) nor Kueue (its end-to-end test only); `make test` and
# `make binaries` build those.
DEMO_BINARIES := etcd etcdutl kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kube-proxy kwok registry coredns metrics-server fke-kube-plane

demo-binaries: ## build only the upstream binaries the demo runs
	@hack/k8s/build.sh $(BIN) $(DEMO_BINARIES)

docs: ## write the generated docs: the CLI reference (docs/reference/cli.md)
	@mkdir -p docs/reference
	$(GO) run ./hack/clidocs > docs/reference/cli.md

VERSION ?=
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64

release: ## make release VERSION=vX.Y.Z: per platform a tarball of every binary with its SBOM, the OCI images, the Helm chart and SHA256SUMS in _output/release/VERSION (no Docker)
	@hack/release.sh "$(VERSION)" $(OUTPUT)/release/$(VERSION) $(RELEASE_PLATFORMS)

$(CONTROLLER_GEN): hack/tools/go.mod hack/tools/go.sum
	@mkdir -p $(dir $@)
	cd hack/tools && $(GO) build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

generate: $(CONTROLLER_GEN) ## regenerate deepcopy code and CRD manifests
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	@$(MAKE) --no-print-directory chart-crds

# config/crd/bases is the one source of the CRDs; the chart holds a copy
# (Helm installs a chart's crds/ directory), which charts' tests compare.
chart-crds: ## copy the generated CRDs (config/crd/bases) and the default instance types into the Helm chart
	rm -f charts/fke/crds/*.yaml
	cp config/crd/bases/*.yaml charts/fke/crds/
	go run ./hack/chartcatalog > charts/fke/templates/instancetypes.yaml

# Tenant-side CRDs are generated from upstream Go types, pinned here.
AUTOSCALER_APIS := k8s.io/autoscaler/cluster-autoscaler/apis@v0.0.0-20240830133931-adfbe7e45277
# The VPA's version is the one go.mod requires (fke-vpa is built from it).
VPA_MODULE = k8s.io/autoscaler/vertical-pod-autoscaler@$(shell $(GO) list -m -f '{{.Version}}' k8s.io/autoscaler/vertical-pod-autoscaler)

generate-tenant-crds: $(CONTROLLER_GEN) ## regenerate the tenant-side CRDs (ProvisioningRequest, VerticalPodAutoscaler) and the provreq types' deepcopy
	dir=$$($(GO) mod download -json $(AUTOSCALER_APIS) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p') && \
	  test -n "$$dir" && \
	  cd "$$dir" && GOFLAGS=-mod=readonly $(CONTROLLER_GEN) crd paths=./provisioningrequest/autoscaling.x-k8s.io/... output:crd:dir=$(CURDIR)/config/tenant/crd
	# controller-gen reports the checkpoint's int-keyed map, which upstream's
	# markers already turn into a preserve-unknown-fields object: the files
	# are written all the same.
	dir=$$($(GO) mod download -json $(VPA_MODULE) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p') && \
	  test -n "$$dir" && \
	  (cd "$$dir" && GOFLAGS=-mod=mod $(CONTROLLER_GEN) crd:allowDangerousTypes=true paths=./pkg/apis/autoscaling.k8s.io/v1/... output:crd:dir=$(CURDIR)/config/tenant/crd || true) && \
	  test -s config/tenant/crd/autoscaling.k8s.io_verticalpodautoscalers.yaml && test -s config/tenant/crd/autoscaling.k8s.io_verticalpodautoscalercheckpoints.yaml
	$(CONTROLLER_GEN) object paths=./internal/autoscaler/provreq/v1/...

vet: ## go vet
	$(GO) vet ./...

# The rest of the lint runs as tests (internal/layers: the import direction,
# one name per import, function length; docs: links; cli: the reference).
lint: vet ## gofmt and go vet over every package (make test runs it)
	@bad=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$bad" ]; then echo "not gofmt-formatted (run gofmt -w):"; echo "$$bad"; exit 1; fi

test-unit: ## unit tests (no upstream binaries needed)
	$(GO) test -count=1 ./api/... ./internal/... ./cmd/... ./charts/...

# The two longest packages, the local-node tests (test/localnode: real
# kubelets, one at a time) and the end-to-end tests (test/e2e), each run in a
# go test of their own, started at once beside the lint and the go test of
# every other package, so that neither waits for a free slot. Their lines
# are prefixed [localnode] and [e2e]; the target fails if any part fails.
test: build binaries ## every test (unit, integration, e2e against the real binaries) and the lint
	cd cmd/fke-kube-plane && CGO_ENABLED=0 $(GO) test -trimpath -count=1 ./...
	@set -o pipefail; \
	( $(GO) test -count=1 -timeout 45m ./test/localnode/ 2>&1 | sed -u 's/^/[localnode] /' ) & localnode=$$!; \
	( $(GO) test -count=1 -timeout 45m ./test/e2e/ 2>&1 | sed -u 's/^/[e2e] /' ) & e2e=$$!; \
	$(MAKE) --no-print-directory lint && \
	$(GO) test -count=1 -timeout 45m $$($(GO) list ./... | grep -v -e '/test/localnode$$' -e '/test/e2e$$'); rc=$$?; \
	wait $$localnode; lrc=$$?; wait $$e2e; erc=$$?; \
	echo "make test: lint and the other packages: exit $$rc; test/e2e: exit $$erc; test/localnode: exit $$lrc"; \
	[ $$rc -eq 0 ] && [ $$erc -eq 0 ] && [ $$lrc -eq 0 ]

demo: build demo-binaries ## the demo: a GPU cluster that autoscales
	hack/demo.sh

bench: build binaries ## benchmarks; see bench/README.md
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./bench/...

clean: ## remove build outputs (keeps the upstream binaries cache)
	rm -f $(BIN)/fke $(BIN)/fke-manager $(BIN)/fke-gpu-agent $(BIN)/fke-gpu-metrics $(BIN)/fke-vpa
