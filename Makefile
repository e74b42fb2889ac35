# joiner developer entry points. `make demo` and `make test` work on a fresh
# machine: they create .venv/, build (or reuse) the cluster binaries and start
# the local KWOK cluster themselves.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@echo "==> creating the virtual environment in $(VENV)/ (first run downloads the Python dependencies)"
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) is required"; exit 1; }
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet --progress-bar off -e '.[dev]'
	@touch $(STAMP)
	@echo "==> $(VENV)/ is ready ($(BIN)/joiner --help)"

.PHONY: venv
venv: $(STAMP) ## create or update the virtual environment

.PHONY: binaries
binaries: ## build (or reuse) the pinned cluster binaries (one line per binary; Go's output in ~/.cache/joiner/build.log)
	@bash hack/build-all.sh binaries

.PHONY: tools
tools: ## build (or reuse) helm, promtool and prometheus from their pinned Go modules
	@bash hack/build-all.sh tools

.PHONY: manifests
manifests: $(STAMP) tools ## regenerate deploy/controller/ from the Helm chart
	@$(BIN)/python hack/gen-manifests.py

.PHONY: cluster-up cluster-down cluster-status
cluster-up: ## start the local KWOK cluster (.kwok/kubeconfig)
	@bash hack/cluster.sh up
cluster-down: ## stop the local KWOK cluster
	@bash hack/cluster.sh down
cluster-status:
	@bash hack/cluster.sh status

.PHONY: crds
crds: $(STAMP) ## regenerate deploy/crds from the api/ models
	@$(BIN)/python -m api.crdgen

.PHONY: lint
lint: lint-fast tools ## ruff, mypy --strict, the layering contracts, the CRD drift check, hadolint, the chart's manifests
	@echo "==> deploy/controller/ generated from the Helm chart"
	@$(BIN)/python hack/gen-manifests.py --check

.PHONY: lint-fast
lint-fast: $(STAMP) ## lint that needs no Go-built tool (all of lint but the Helm chart's manifests)
	@echo "==> ruff"
	@$(BIN)/ruff check .
	@$(BIN)/ruff format --check .
	@echo "==> mypy --strict"
	@$(BIN)/mypy
	@echo "==> layering (import-linter)"
	@$(BIN)/lint-imports
	@echo "==> CRD drift"
	@$(BIN)/python -m api.crdgen --check
	@echo "==> Kubernetes field table drift (controller/kube_fields.json, strict decoding)"
	@$(BIN)/python hack/gen-kube-fields.py --check
	@echo "==> metrics reference drift (docs/metrics.md)"
	@$(BIN)/python -m controller.metrics_doc --check
	@echo "==> Dockerfile (hadolint)"
	@$(BIN)/hadolint Dockerfile

.PHONY: unit
unit: $(STAMP) ## unit tests (pure, no cluster)
	@echo "==> unit tests"
	@$(BIN)/pytest tests/unit -q

.PHONY: e2e
e2e: $(STAMP) binaries tools ## end-to-end tests, on 3 KWOK clusters at once (JOINER_E2E_WORKERS=0: one after another on .kwok/)
	@echo "==> end-to-end tests on $${JOINER_E2E_WORKERS:-3} clusters at once (0: on .kwok/, started if it is not running)"
	@$(BIN)/pytest tests/e2e -q -n $${JOINER_E2E_WORKERS:-3} --dist loadfile --no-loadscope-reorder

.PHONY: test
test: $(STAMP) ## the whole suite: unit tests and lint while the binaries build in the background, then e2e
	@bash hack/test.sh

.PHONY: chaos
chaos: $(STAMP) binaries ## the fault suite on the local KWOK cluster (5 seeded runs; SEED=, RUNS=, KILLS=, CKILLS=, RATES=1)
	@$(BIN)/python -m hack.chaos --seed $${SEED:-1} --runs $${RUNS:-5} --kills $${KILLS:-4} --consolidation-kills $${CKILLS:-2} $${RATES:+--fault-rates}

.PHONY: dashboard
dashboard: $(STAMP) binaries tools ## docs/dashboard.png from an 8-minute run on the local KWOK cluster (OUT= another file)
	@$(BIN)/python -m hack.dashboard_run --out $${OUT:-docs/dashboard.png}

.PHONY: demo
demo: $(STAMP) binaries ## the main job: cluster, CRDs, NodePools, controller, GPU workloads
	@bash hack/demo.sh

.PHONY: bench
bench: $(STAMP) ## solver benchmarks (figures go to docs/performance.md)
	@$(BIN)/python -m hack.bench.solver
	@$(BIN)/python -m hack.bench.quality

SIZES ?= 1000,5000
.PHONY: bench-karpenter
bench-karpenter: $(STAMP) ## Karpenter v1.15.0's scheduling benchmark beside joiner's, same workload (SIZES=1000,5000)
	@$(BIN)/python -m hack.bench.karpenter_side_by_side --sizes $(SIZES)

.PHONY: clean
clean: ## stop the cluster and remove local state (not the binary cache)
	@bash hack/cluster.sh down || true
	@rm -rf .kwok .mypy_cache .ruff_cache .pytest_cache
