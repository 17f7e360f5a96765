"""Where the embedded engine keeps its files: one cache root per machine.

Layout under the root (``~/.cache/lookahead-sdk`` or ``$LOOKAHEAD_SDK_CACHE``)::

    llama.cpp/<version>/bin-<build>/  llama-server, llama-quantize (built from the sdist with the
                                    source edits of lookahead_sdk.engine.patches; engine.build_id)
    llama.cpp/<version>/models/     requantized model files
    llama.cpp/<version>/logs/       build logs
    run/engine-<port>.json          state of an engine started by us
    run/slots-<port>/               that engine's slot copies (KV of a slot, to seed another)
    logs/engine-<port>.log          that engine's log
"""

from __future__ import annotations

import os
from pathlib import Path

from lookahead_sdk.engine.build_id import BUILD_ID

# The llama.cpp source we build is the one vendored in this llama-cpp-python sdist.
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
CACHE_ENV_VAR = "LOOKAHEAD_SDK_CACHE"


def cache_root() -> Path:
    override = os.environ.get(CACHE_ENV_VAR)
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "lookahead-sdk"


def version_dir() -> Path:
    return cache_root() / "llama.cpp" / LLAMA_CPP_PYTHON_VERSION


def bin_dir() -> Path:
    # Keyed by the source edits and cmake flags: a changed one builds new binaries.
    return version_dir() / f"bin-{BUILD_ID}"


def models_dir() -> Path:
    return version_dir() / "models"


def build_logs_dir() -> Path:
    return version_dir() / "logs"


def state_file(port: int) -> Path:
    return cache_root() / "run" / f"engine-{port}.json"


def engine_log_file(port: int) -> Path:
    return cache_root() / "logs" / f"engine-{port}.log"


def slot_save_dir(port: int) -> Path:
    return cache_root() / "run" / f"slots-{port}"
