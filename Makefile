# Capstan's developer commands. `make run` runs Capstan on a local cluster; `make test` runs every
# test. Everything they need beyond Go is built from Go modules by hack/tools.sh.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

BIN := $(CURDIR)/bin
CLOUD ?= sim
# -count=1: the end-to-end tests build and run the capstan binary, which go test cannot track,
# so a cached pass could hide a change.
GO_TEST_FLAGS ?= -timeout 45m -count=1
# The release version: the image's, the charts'. Defaults to the chart's appVersion.
PLAIN_HTTP ?= false
# Where `make image` writes the OCI layout (and <dir>.digest), and `make release` the packaged charts.
IMAGE_DIR ?= $(BIN)/image
CHARTS_DIR ?= $(BIN)/charts
# Where `make release` writes the kubectl plugin's archives, checksums.txt and krew manifest; the
# URL they will be published under (the manifest's uris; empty: the archives' names, installed with
# `kubectl krew install --manifest capstan.yaml --archive …`); the platforms built.
PLUGIN_DIR ?= $(BIN)/plugin
PLUGIN_URL ?=
PLUGIN_PLATFORMS ?= linux/amd64,linux/arm64,darwin/amd64,darwin/arm64
VERSION ?= $(shell sed -n 's/^appVersion: "\(.*\)"$$/\1/p' charts/capstan/Chart.yaml)

.PHONY: help
help: ## Show the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

.PHONY: tools
tools: ## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, controller-gen, staticcheck, helm and the OCI registry (cached).
	@hack/tools.sh

.PHONY: generate
generate: tools ## Regenerate deepcopy functions and CRDs from the API types, and the chart's README from its values.
	$(BIN)/controller-gen object paths=./api/...
	$(BIN)/controller-gen crd paths=./api/... output:crd:artifacts:config=config/crd
	hack/crd-patterns.sh
	go run ./hack/crd-schema config/crd
	hack/crd-chart.sh
	go run ./hack/chart-readme charts/capstan

.PHONY: image
image: ## Build the linux/amd64 and linux/arm64 container image into bin/image (IMAGE_DIR; an OCI layout, digest in bin/image.digest).
	go run ./hack/image -version $(VERSION) -out $(IMAGE_DIR)

.PHONY: image-smoke
image-smoke: image ## Run the image under podman (installed with apt-get if missing) against a fresh local cluster: --version, and a pending pod provisioned from inside the container.
	VERSION=$(VERSION) IMAGE_DIR=$(IMAGE_DIR) hack/image-smoke.sh

.PHONY: release
release: image tools ## Push the image and the capstan-crd and capstan charts at $(VERSION) to REGISTRY=host[:port]/path (PLAIN_HTTP=true for a registry without TLS); write the kubectl plugin's archives and krew manifest to PLUGIN_DIR (their uris under PLUGIN_URL).
	@[ -n "$(REGISTRY)" ] || { echo "make release: set REGISTRY=host[:port]/path" >&2; exit 2; }
	go run ./hack/release -version $(VERSION) -layout $(IMAGE_DIR) -registry $(REGISTRY) -plain-http=$(PLAIN_HTTP) -helm $(BIN)/helm -out $(CHARTS_DIR) \
		-plugin-out $(PLUGIN_DIR) -plugin-url '$(PLUGIN_URL)' -plugin-platforms $(PLUGIN_PLATFORMS)

.PHONY: verify
verify: tools ## Regenerate and fail on any difference; gofmt, go vet and layout checks.
	@hack/verify.sh

# The specs of Karpenter's regression suite `make test` runs against Capstan (a Ginkgo regexp; no
# quote characters, it is passed in single quotes): its LimitRange and standalone NodeClaim specs
# (well under a minute) and its first runaway scale-up spec (five minutes, one machine or two on
# Capstan where it allows 34). `make conformance` runs both whole suites.
CONFORMANCE_QUICK ?= LimitRange|StandaloneNodeClaim should (create a standard NodeClaim|create a NodeClaim propagating|remove the cloudProvider NodeClaim|delete a NodeClaim from the node termination finalizer|delete a NodeClaim if it references a NodeClass that (isn.t Ready|doesn.t exist))|runaway scale-up when consolidation is enabled

.PHONY: test
test: verify ## Run all tests (unit, API validation on a real API server, local cluster, every fuzz target for 3s, the image under podman, specs of Karpenter's own suites).
	hack/ensure-awscli.sh
	go test $(GO_TEST_FLAGS) ./...
	hack/fuzz.sh 3s
	$(MAKE) --no-print-directory image-smoke
	hack/conformance.sh regression '$(CONFORMANCE_QUICK)'

# The suite `make conformance` runs, and the specs it picks (FOCUS) and leaves out (SKIP).
SUITE ?= all

# The EC2 instance-type facts the embedded catalog is made from, one JSON object per line: a
# file outside the repository, so it has no default (make catalog CATALOG_SOURCE=path).
CATALOG_SOURCE ?=

.PHONY: catalog
catalog: ## Regenerate the embedded EC2 catalog (internal/catalog/data) from CATALOG_SOURCE, each line checked.
	@test -n '$(CATALOG_SOURCE)' || { echo "make catalog: set CATALOG_SOURCE to the instance-type facts file (one JSON object per line)" >&2; exit 1; }
	go run ./hack/catalog -in '$(CATALOG_SOURCE)' -out internal/catalog/data/ec2-instance-types.jsonl.gz

.PHONY: conformance
conformance: tools ## Run Karpenter v1.15's own end-to-end suites against Capstan on a fresh local cluster each (SUITE: all — both at once —, regression or disruption; FOCUS, SKIP: Ginkgo regexps); one line per spec.
	hack/conformance.sh $(SUITE) '$(FOCUS)'

.PHONY: chaos
chaos: ## Run the chaos suite's full scenarios (test/chaos, test/chaos/aws; SCENARIO=regexp picks some) and print their figures; make test runs the short ones.
	hack/chaos.sh '$(or $(SCENARIO),.)'
# How long `make fuzz` runs each fuzz target.
FUZZTIME ?= 30s

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 30s); a failing input lands in the package's testdata/fuzz.
	hack/fuzz.sh $(FUZZTIME)

.PHONY: cluster-up
cluster-up: ## Start the local cluster; KUBECONFIG=.capstan/kubeconfig.
	@hack/cluster.sh up

.PHONY: cluster-down
cluster-down: ## Stop the local cluster and remove its state.
	@hack/cluster.sh down

.PHONY: run
run: ## Run Capstan in the foreground on a local cluster with the simulated cloud (CLOUD=aws: on local AWS endpoints).
	@CLOUD=$(CLOUD) hack/run.sh
