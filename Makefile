# Set-up and entry points. `make run` and `make test` are the README's two commands.
#   TORCH_INDEX=https://download.pytorch.org/whl/cpu make install   # force the CPU torch wheel where
#                                                                   # pip would otherwise pick a CUDA build
#   make install-gpu                                                # CUDA machines: faiss-gpu for faiss-cpu
#   make lock                                                       # requirements/*.txt from pyproject.toml
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
TORCH_INDEX ?=
export NUMBA_CACHE_DIR := $(CURDIR)/.cache/numba
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# Python writes the bytecode of what a run imports, once, into the environment and the checkout (the install
# compiles nothing: tools/install.py); with PYTHONDONTWRITEBYTECODE set, every new process would compile
# torch's and transformers' modules again.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install install-dev install-gpu lock run test test-full lint docs clean-outputs

$(BIN)/python:
	$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "zsdr needs Python 3.11 (set PYTHON=/path/to/python3.11)")'
	$(PYTHON) -m venv $(VENV)

# tools/install.py: torch, then exactly the packages of the lock file (requirements/cpu.txt, dev.txt),
# by uv (pinned, installed by pip) with pip's package sources; pip where uv fails.
$(VENV)/.installed: pyproject.toml requirements/cpu.txt tools/install.py | $(BIN)/python
	$(BIN)/python tools/install.py $(BIN)/python $(if $(TORCH_INDEX),--torch-index $(TORCH_INDEX))
	$(BIN)/zsdr doctor --warm
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed requirements/dev.txt
	$(BIN)/python tools/install.py $(BIN)/python --extra dev
	touch $@

# faiss-cpu and faiss-gpu ship the same `faiss` module: swap one for the other.
$(VENV)/.installed-gpu: $(VENV)/.installed
	$(BIN)/python -m pip uninstall --quiet --yes faiss-cpu
	$(BIN)/python -m pip install --quiet $$($(BIN)/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["gpu"])')
	$(BIN)/zsdr doctor
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev
install-gpu: $(VENV)/.installed-gpu

# After a change of pyproject.toml's pins or requirements/constraints.txt (tests/test_packaging.py
# fails until the locks agree); then `make install-dev` installs the new locks.
lock: | $(BIN)/python
	$(BIN)/python tools/lock.py $(BIN)/python

run: install
	$(BIN)/snakemake --cores all results/table1.csv

# Test modules run side by side, one module per worker (module fixtures are built once), the longest first
# (tests/conftest.py); the slowest tests are listed at the end. One worker more than the cores (at most 4):
# the SLURM test's worker mostly waits for its cluster, and the others keep every core busy meanwhile.
TEST_WORKERS := $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n + 1 < 4 ? n + 1 : 4 )))
PYTEST_ARGS := -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15
test: install-dev
	$(BIN)/pytest $(PYTEST_ARGS)

# The default suite with the mini run's trainings to their ends (its learning signal checked; by default they
# stop after 6 steps: tests/test_mini_run.py) and then the whole mini DAG of every paper table.
test-full: install-dev
	ZSDR_FULL_DAG=1 $(BIN)/pytest $(PYTEST_ARGS)

lint: install-dev
	$(BIN)/snakemake --lint
	$(BIN)/snakefmt --check Snakefile rules/

# docs/configuration.md from schemas/config.schema.yaml (tests/test_docs.py fails when it is out of date).
docs: install
	$(BIN)/python -m zsdr.docs

clean-outputs:
	rm -rf data models indexes embeddings runs metrics stats logs results/table1.* results/report.html $(wildcard results/*/) .snakemake
