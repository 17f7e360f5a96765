#!/usr/bin/env bash
# Build the separate virtualenv in which the bundled SGLang plugin is tested on CPU
# (tests/sglang). It is kept apart from .venv because sglang==0.5.23 pins openai==2.8.0 and
# CUDA-only packages that must not enter the main environment's resolver.
#
# Idempotent: re-running it re-checks every pin and installs only what is missing.
# Usage: scripts/setup_sglang_env.sh [VENV_DIR]   (default: <repo>/.venv-sglang)
# Env:   PYTHON  interpreter used to create the venv (default: python3.11, else python3)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV_DIR="${1:-$REPO_ROOT/.venv-sglang}"
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"

SGLANG_VERSION="0.5.23"
TORCH_VERSION="2.13.0"

if [[ ! -x "$VENV_DIR/bin/python" ]]; then
  echo "[setup-sglang] creating $VENV_DIR with $PYTHON"
  "$PYTHON" -m venv "$VENV_DIR"
fi
VPY="$VENV_DIR/bin/python"
# pip reports sglang's unmet (GPU-only) requirements after every --no-deps install; expected.
pip_install() { "$VPY" -m pip install --disable-pip-version-check --quiet "$@"; }

# Every install after torch runs under this constraint, otherwise pip swaps the CPU build
# for a newer CUDA build (plus ~3 GB of nvidia libraries) to satisfy some dependency's range.
CONSTRAINTS="$VENV_DIR/sglang-constraints.txt"
printf 'torch==%s+cpu\n' "$TORCH_VERSION" >"$CONSTRAINTS"

echo "[setup-sglang] sglang==$SGLANG_VERSION (no deps)"
pip_install --no-deps "sglang==$SGLANG_VERSION"

# torch==2.13.0 resolves to the CPU wheel this machine kind keeps on disk (pip's find-links).
echo "[setup-sglang] torch==$TORCH_VERSION (CPU build)"
if ! "$VPY" -c "import torch, sys; sys.exit(0 if torch.__version__ == '$TORCH_VERSION+cpu' else 1)" 2>/dev/null; then
  pip_install "torch==$TORCH_VERSION" -c "$CONSTRAINTS"
fi

echo "[setup-sglang] what the scheduler / OpenAI-serving modules import"
pip_install -c "$CONSTRAINTS" \
  numpy orjson psutil pybase64 requests packaging pillow fastapi msgspec pyzmq pydantic \
  setproctitle uvloop tqdm aiohttp IPython dill uvicorn einops jsonschema partial-json-parser \
  gguf loguru "transformers==5.19.0" "tokenizers==0.23.2" "openai==2.8.0" \
  "sentencepiece==0.2.1" "apache-tvm-ffi==0.1.11"
# triton: SGLang imports it at top level; on CPU nothing is compiled, the real package just imports.
pip_install -c "$CONSTRAINTS" --no-deps "xgrammar==0.2.7" "compressed-tensors==0.18.0" \
  "triton==3.6.0"

# The SDK itself: --no-deps because its core pins openai>=2.45,<3 while sglang pins 2.8.0; the
# plugin needs none of openai. Its other core deps and the test tools are installed explicitly.
echo "[setup-sglang] lookahead-sdk (editable, no deps) + core deps + test tools"
pip_install -c "$CONSTRAINTS" --no-deps -e "$REPO_ROOT"
pip_install -c "$CONSTRAINTS" "httpx>=0.27" "tiktoken>=0.8" "pydantic>=2.7" "rich>=13" \
  "pytest>=8" "pytest-asyncio>=0.24" "hypothesis>=6.100" "pytest-timeout>=2.3"

"$VPY" - <<PY
import importlib.metadata as md
import torch
assert torch.__version__ == "$TORCH_VERSION+cpu", torch.__version__
for name in ("sglang", "openai", "lookahead-sdk"):
    print(f"[setup-sglang] {name}=={md.version(name)}")
print(f"[setup-sglang] torch=={torch.__version__}")
PY
echo "[setup-sglang] done: $VENV_DIR"
