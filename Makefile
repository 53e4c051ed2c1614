# sextant: `make help` lists the targets.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# sextant-ranker is kube-scheduler: its component-base version (--version=raw, /version,
# the kubernetes_build_info metric) is the Kubernetes release it is built from, which
# also sets its feature gates' emulation version, with sextant's release as semver build
# metadata. The build date is the commit's, so that a rebuild of a commit is identical.
KUBE_VERSION = $(shell go list -m -f '{{.Version}}' k8s.io/kubernetes)
KUBE_SEMVER = $(subst ., ,$(patsubst v%,%,$(KUBE_VERSION)))
GIT_COMMIT = $(shell git rev-parse HEAD 2>/dev/null)
GIT_TREE_STATE = $(shell git rev-parse HEAD >/dev/null 2>&1 && { git diff --quiet HEAD -- && echo clean || echo dirty; })
BUILD_DATE = $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null || echo 1970-01-01T00:00:00Z)
KUBE_PKG := k8s.io/component-base/version
LDFLAGS = -s -w -X sextant.io/sextant/internal/version.Version=$(VERSION) \
  -X $(KUBE_PKG).gitVersion=$(KUBE_VERSION)+sextant.$(shell printf %s '$(VERSION)' | tr -c '0-9A-Za-z.-' '-') \
  -X $(KUBE_PKG).gitMajor=$(word 1,$(KUBE_SEMVER)) -X $(KUBE_PKG).gitMinor=$(word 2,$(KUBE_SEMVER)) \
  -X $(KUBE_PKG).gitCommit=$(GIT_COMMIT) -X $(KUBE_PKG).gitTreeState=$(GIT_TREE_STATE) \
  -X $(KUBE_PKG).buildDate=$(BUILD_DATE)
# Static binaries for the images. Tests build the same way, and nothing takes -trimpath:
# either difference would change every package's build-cache key and compile the whole
# Kubernetes tree a second time.
export CGO_ENABLED := 0
GO_BUILD = go build -ldflags "$(LDFLAGS)"
# Room for a busy shared machine (docs/development.md); CI allows 90 minutes for everything.
E2E_TIMEOUT ?= 60m

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: deps
deps: ## Install the Debian packages the build, tests and cluster need (root; idempotent).
	scripts/deps.sh

.PHONY: build
build: ## Build bin/sextant-agent, bin/sextant-ranker, bin/sextant-sidecars and bin/sextant-sidecar-wrapper (static).
	$(GO_BUILD) -o bin/sextant-agent ./agent/cmd/sextant-agent
	$(GO_BUILD) -o bin/sextant-ranker ./ranker/cmd/sextant-ranker
	$(GO_BUILD) -o bin/sextant-sidecars ./sidecars/cmd/sextant-sidecars
	$(GO_BUILD) -o bin/sextant-sidecar-wrapper ./agent/cmd/sextant-sidecar-wrapper
	@bin/sextant-ranker --version | grep -qF ' (kube-scheduler $(KUBE_VERSION)+sextant.' || \
	  { echo "build: sextant-ranker's kube-scheduler version was not stamped: $$(bin/sextant-ranker --version)" >&2; exit 1; }

# helm-docs writes the chart's README values table from values.yaml's "# --" comments.
# Pinned and run through the module proxy; it needs Go modules that do not build beside
# the project's own, so it is not a tool line of go.mod.
HELM_DOCS_VERSION := v1.14.2
# The Kubernetes version `make lint` renders the chart for (Chart.yaml's kubeVersion
# refuses a render without one).
LINT_KUBE_VERSION := 1.36.0

.PHONY: generate
generate: ## Regenerate deepcopy, CRD YAML, the bpf2go objects and the chart README's values table.
	go generate ./...
	cd charts && go run github.com/norwoodj/helm-docs/cmd/helm-docs@$(HELM_DOCS_VERSION) --chart-search-root . \
	  --sort-values-order file --log-level warning

.PHONY: lint
lint: ## helm lint --strict of the chart (values checked against values.schema.json), with the defaults and with every option on.
	go tool helm lint --strict --kube-version $(LINT_KUBE_VERSION) charts/sextant
	go tool helm lint --strict --kube-version $(LINT_KUBE_VERSION) charts/sextant \
	  --set serviceMonitor.enabled=true,prometheusRule.enabled=true,priorityClasses.create=false \
	  --set 'agent.devices.dra.kinds={accelerator,gpu}' \
	  --set-json 'imagePullSecrets=[{"name":"regcred"}]' --set image.agent.digest=sha256:$$(printf '0%.0s' $$(seq 64))

.PHONY: verify
verify: generate lint ## Regenerate and fail on any diff; helm lint, gofmt, go vet, go mod tidy; lint the dashboards and alerts.
	@git diff --exit-code -- api bpf charts/sextant/crds charts/sextant/README.md || { echo "verify: generated files differ from the committed ones: run 'make generate' and commit" >&2; exit 1; }
	@untracked=$$(git ls-files --others --exclude-standard -- api bpf charts/sextant/crds); \
	  [ -z "$$untracked" ] || { echo "verify: generated files not committed: $$untracked" >&2; exit 1; }
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  [ -z "$$unformatted" ] || { echo "verify: gofmt would change: $$unformatted" >&2; exit 1; }
	go vet ./...
	@# The e2e suite builds only with its tag: vet it here, or a broken suite shows only at its run.
	go vet -tags e2e ./test/e2e/
	go mod tidy -diff
	@# The dashboards' and alerts' queries parse with Prometheus's parser; panel IDs are unique; panels use $$datasource.
	go test -count=1 ./test/lint/

.PHONY: test
test: deps verify test-unit test-e2e ## Everything CI runs: verify, unit tests, then the suite on the real local cluster.

.PHONY: test-unit
test-unit: ## Unit tests under the race detector (go test -race ./..., cgo on for it); tests that need root or tools skip without them.
	CGO_ENABLED=1 go test -race -count=1 ./...

FUZZTIME ?= 30s
.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 30s); `make test` replays their seeds and saved crashers.
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

.PHONY: test-e2e
test-e2e: ## Integration tests against the real local cluster (root; brings it up, and down again if it started it).
	E2E_TIMEOUT=$(E2E_TIMEOUT) scripts/test-e2e.sh

.PHONY: images
images: images-oci ## Build the images: for IMAGE_PLATFORMS in bin/images/, and for this machine as tarballs, imported if the cluster runs.
	@if scripts/cluster.sh status >/dev/null 2>&1; then scripts/images.sh import; \
	  else scripts/images.sh base >/dev/null && scripts/images.sh project; fi

# The platforms of the images `make images` builds and `make push` pushes.
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64
IMAGE_ARCHES = $(subst linux/,,$(subst $(comma), ,$(IMAGE_PLATFORMS)))
comma := ,

.PHONY: images-oci
images-oci: ## Build the exit0, sextant-agent, sextant-ranker, sextant-sidecars and sextant-sidecar-wrapper images for IMAGE_PLATFORMS as OCI layouts in bin/images/.
	for arch in $(IMAGE_ARCHES); do \
	  GOOS=linux GOARCH=$$arch $(GO_BUILD) -o bin/linux_$$arch/ ./agent/cmd/sextant-agent ./ranker/cmd/sextant-ranker ./sidecars/cmd/sextant-sidecars ./agent/cmd/sextant-sidecar-wrapper; \
	  GOOS=linux GOARCH=$$arch go build -trimpath -ldflags "-s -w" -o bin/linux_$$arch/exit0 ./scripts/images/exit0; \
	done
	IMAGE_PLATFORMS=$(IMAGE_PLATFORMS) scripts/images.sh oci >/dev/null

TAG ?= $(VERSION)
.PHONY: push
push: push-registry images-oci ## Push the images to REGISTRY/NAME:TAG (TAG default: git describe) and the chart to oci://REGISTRY; prints their digests.
	scripts/images.sh push $(REGISTRY) $(TAG)

# Refuses a push without REGISTRY before anything is built.
.PHONY: push-registry
push-registry:
	@[ -n "$(REGISTRY)" ] || { echo "push: set REGISTRY, e.g. make push REGISTRY=registry.example.com/sextant [TAG=v0.1.0]" >&2; exit 1; }

.PHONY: cluster-up
cluster-up: ## Start the local real cluster (root; idempotent).
	scripts/cluster.sh up

.PHONY: cluster-down
cluster-down: ## Stop the local cluster and remove everything it made.
	scripts/cluster.sh down

.PHONY: deploy
deploy: ## Build and import the images, then install the chart into the local cluster.
	scripts/deploy.sh

.PHONY: demo
demo: cluster-up deploy ## Bring the cluster up, install sextant, and show what it does.
	scripts/demo.sh

.PHONY: bench-meter
bench-meter: ## iperf3 over a veth with and without the eBPF meter; ratio and ns/packet.
	scripts/bench-meter.sh

.PHONY: bench-enforce
bench-enforce: ## iperf3 over a veth with the meter alone and with bandwidth enforcement; ratio, CPU per packet, a pod's classes with 200 pods; the guarantees on the local cluster.
	scripts/bench-enforce.sh

# Flags added to make bench-ranker's, e.g. the 8-NUMA-node shape beside today's at 5000
# nodes: BENCH_RANKER_ARGS="--nodes 5000 --schedulers sextant --shape 2numa,8numa-8gpu".
BENCH_RANKER_ARGS ?=

.PHONY: bench-ranker
bench-ranker: ## sextant-ranker against vanilla kube-scheduler on 500 and 5000 nodes; flags in BENCH_RANKER_ARGS (e.g. --shape 2numa,8numa-8gpu).
	scripts/bench-ranker.sh $(BENCH_RANKER_ARGS)

# Flags of scripts/bench-sidecar.sh, e.g. BENCH_SIDECAR_ARGS="--jobs 20 --runs 1".
BENCH_SIDECAR_ARGS ?=

.PHONY: bench-sidecar
bench-sidecar: ## p50/p99 of main-container exit to sidecar stop, bursts of 20 and 100 Jobs, 3 runs (BENCH_SIDECAR_ARGS).
	scripts/bench-sidecar.sh $(BENCH_SIDECAR_ARGS)

.PHONY: bench-numa
bench-numa: ## 50 pods pinned to NUMA nodes on the real node: share pinned from the first instruction, pin latency p50/p99.
	scripts/bench-numa.sh

.PHONY: clean
clean: ## Remove build output (not the cluster: see cluster-down).
	rm -rf bin
