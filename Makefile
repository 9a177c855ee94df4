# agentworkers: the two commands a newcomer needs are `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CLUSTER := $(BIN)/python hack/localcluster.py

.PHONY: help demo run test tools unit e2e lint format typecheck crds helm image docker-image kind-up cluster-up cluster-down cluster-status dist plugin bench faults clean

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

demo: $(BIN)/.installed ## run the demo on the local control plane (builds it on first use)
	$(BIN)/python hack/demo.py

run: $(BIN)/.installed ## the operator and the pod runner on the local control plane, until Ctrl-C
	$(BIN)/python hack/run.py

test: $(BIN)/.installed tools ## every test: unit, then end-to-end on the local control plane
	$(BIN)/pytest

# The Go-built tools and the pod image, cached: built up front so that a cold build
# (minutes) is not charged to the first test that needs it.
tools: $(BIN)/.installed ## build the Go-built tools (control plane, kwok, helm, krew, Flux, Kueue, Jaeger) and, as root, the pod image
	bash hack/build-binaries.sh >/dev/null
	bash hack/build-helm.sh >/dev/null
	bash hack/build-krew.sh >/dev/null
	bash hack/build-flux.sh >/dev/null
	bash hack/build-jaeger.sh >/dev/null
	bash hack/build-kueue.sh >/dev/null
	PYTHON=$(BIN)/python bash hack/pod-tools.sh >/dev/null

# The slow unit tests (marked `slow`: helm, the release artefacts) run in `make test` only.
unit: $(BIN)/.installed ## unit tests only (no cluster), but the slow ones: seconds, for the edit-test loop
	$(BIN)/pytest tests/unit -m "not slow"

e2e: $(BIN)/.installed tools ## end-to-end tests only
	$(BIN)/pytest tests/e2e

lint: $(BIN)/.installed ## ruff lint and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(BIN)/.installed ## fix what ruff can, and format
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck: $(BIN)/.installed ## mypy --strict
	$(BIN)/mypy

crds: $(BIN)/.installed ## regenerate crds/ (and the chart's copy) from the models
	$(BIN)/python -m agentworkers.api.crdgen crds
	cp crds/*.yaml charts/agentworkers/crds/

helm: ## build helm from Go modules (cached)
	hack/build-helm.sh

IMAGE ?= ghcr.io/agentworkers/agentworkers:0.1.0

image: ## build the image from the Dockerfile, no Docker or registry (root; docs/image.md)
	$(PYTHON) hack/image.py

docker-image: ## build the same Dockerfile with a Docker engine (IMAGE=name:tag)
	docker build --build-arg VERSION=$(lastword $(subst :, ,$(IMAGE))) -t $(IMAGE) .

kind-up: docker-image ## a kind cluster with the image loaded and the chart installed (needs Docker)
	kind create cluster --name agentworkers
	kind load docker-image $(IMAGE) --name agentworkers
	hack/build-helm.sh >/dev/null
	$$(hack/build-helm.sh | tail -1)/helm install agentworkers charts/agentworkers \
	  -n agentworkers-system --create-namespace --values charts/agentworkers/ci/kind-values.yaml
	@echo "installed: kubectl --context kind-agentworkers get pods -n agentworkers-system"

cluster-up: $(BIN)/.installed ## start the local control plane (etcd, apiserver, controllers, kwok)
	$(CLUSTER) up

cluster-down: $(BIN)/.installed ## stop it and remove its state
	$(CLUSTER) down

cluster-status: $(BIN)/.installed ## is the local control plane up, and where
	$(CLUSTER) status

dist: $(BIN)/.installed ## release artefacts in dist/: the wheel and sdist, and the chart package
	$(BIN)/python hack/dist.py

plugin: $(BIN)/.installed ## pack the kubectl plugin for krew (dist/plugin/: archive and manifest)
	$(BIN)/python hack/build-plugin.py

bench: $(BIN)/.installed ## run the benchmarks
	@for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

faults: $(BIN)/.installed tools ## the fault suite: faults injected under load, invariants counted
	$(BIN)/python bench/faults.py

clean: cluster-down ## stop the control plane, remove the venv and caches
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache dist
