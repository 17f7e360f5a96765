"""The embedded real LLM engine: llama.cpp's llama-server serving SmolLM2-135M-Instruct on CPU.

``ensure_engine(EngineConfig(port=8089, slots=4))`` builds the server if needed, starts it (or
reuses ours already running there) and returns an ``EngineHandle``; point an OpenAI client at
``handle.openai_base_url`` and call ``handle.stop()`` when done. See docs/engine.md.
"""

from lookahead_sdk.engine.build import EngineBinaries, ensure_binaries
from lookahead_sdk.engine.config import EngineConfig
from lookahead_sdk.engine.errors import (
    BuildError,
    EngineConflictError,
    EngineError,
    EngineExitedError,
    EngineStartError,
    EngineStateFileError,
    EngineStopError,
    MissingToolError,
    ModelNotFoundError,
    PortInUseError,
)
from lookahead_sdk.engine.model import DEFAULT_QUANTIZATION, model_path, shipped_model_path
from lookahead_sdk.engine.server import (
    EngineHandle,
    EngineStatus,
    engine_status,
    ensure_engine,
    start_engine,
    stop_engine,
)

__all__ = [
    "DEFAULT_QUANTIZATION",
    "BuildError",
    "EngineBinaries",
    "EngineConfig",
    "EngineConflictError",
    "EngineError",
    "EngineExitedError",
    "EngineHandle",
    "EngineStartError",
    "EngineStateFileError",
    "EngineStatus",
    "EngineStopError",
    "MissingToolError",
    "ModelNotFoundError",
    "PortInUseError",
    "engine_status",
    "ensure_binaries",
    "ensure_engine",
    "model_path",
    "shipped_model_path",
    "start_engine",
    "stop_engine",
]
