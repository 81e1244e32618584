# The two commands a user needs: `make demo` and `make test`. Everything installs into .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
# scripts/install_env.py decides what this machine gets (see its docstring):
# - CPU, Linux x86-64: torch 2.13.0 with PyTorch's CPU wheel index added (TORCH_CPU_INDEX: small +cpu wheels, no
#   CUDA libraries), and vLLM's CPU build when that +cpu torch is what pip got; otherwise one line says vLLM was left
#   out and rollouts use the hf engine. VLLM=0 leaves it out, VLLM=1 insists.
# - macOS arm64 / Linux aarch64: torch from PyPI, no vLLM.
# - A visible NVIDIA GPU: a CUDA torch from PyPI; `GPU_VLLM=1` adds vLLM's GPU build. GPU=0|1 forces either path.
GPU ?= auto
VLLM ?= auto
GPU_VLLM ?= 0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
INSTALL := $(PY) scripts/install_env.py --gpu $(GPU) --torch-cpu-index "$(TORCH_CPU_INDEX)" \
	--vllm $(if $(filter 1,$(GPU_VLLM)),1,$(VLLM))
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo demo-fresh test test-fast lint format bench bench-smoke check-install clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# Reinstall when the dependency list changes. `make demo` installs only what the demo runs; `make test` adds the
# test, serving, data and benchmark tools.
$(DEMO_STAMP): pyproject.toml scripts/install_env.py | $(PY)
	$(INSTALL) --profile demo
	$(PY) -c "import torch; print('torch', torch.__version__, 'cuda' if torch.cuda.is_available() else 'cpu')"
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml scripts/install_env.py | $(PY)
	$(INSTALL) --profile test
	$(PY) -c "import torch; print('torch', torch.__version__, 'cuda' if torch.cuda.is_available() else 'cpu')"
	touch $(STAMP) $(DEMO_STAMP)

# What a fresh machine with only the public package indexes would resolve (no local pip config or wheel folders).
check-install: | $(PY)
	$(PY) scripts/install_env.py --profile test --public --dry-run --gpu 0 --torch-cpu-index "$(TORCH_CPU_INDEX)"

demo: $(DEMO_STAMP)
	$(PY) -m verl.trainer.main_ppo

# The demo again from step 0: its checkpoints, metrics, report and export in outputs/verl/demo are replaced (a second
# `make demo` only says the run has finished). The environment in .venv is kept.
demo-fresh: $(DEMO_STAMP)
	$(PY) -m verl.trainer.main_ppo trainer.resume_mode=disable trainer.overwrite_checkpoints=true

# Test files run in TEST_WORKERS processes side by side (pytest-xdist; each test process uses one torch thread and
# a file stays in one process, so its module fixtures are built once): one per core, at most 4 (each may start a
# local Ray). TEST_WORKERS=0 runs everything in this process, one test after another.
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; n = os.cpu_count() or 1; print(min(n, 4) if n > 1 else 0)")

test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15 tests

test-fast: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow" tests

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(STAMP)
	$(PY) bench/run_all.py

bench-smoke: $(STAMP)
	$(PY) bench/run_all.py --smoke

clean:
	rm -rf $(VENV) outputs .pytest_cache
