"""The package's errors. Catch `LookaheadError` for anything lookahead-sdk raises on purpose.

- `InvalidInputError`: input that cannot be used (a saved state, a request field); a
  `ValueError` too; the message names the field. Raised before anything is changed.
- `ConfigurationError`: an `InvalidInputError` in a setting or argument; names the fix too.
- `StateError`: an operation the object's current state does not allow (closed runtime, a saved
  state that does not fit).
- `EngineError`: the embedded llama.cpp engine failed (subclasses in `lookahead_sdk.engine.errors`).
"""

from __future__ import annotations


class LookaheadError(Exception):
    """Base class of every error lookahead-sdk raises on purpose."""


class InvalidInputError(LookaheadError, ValueError):
    """Input that cannot be used; the message names the field. Nothing was changed."""


class ConfigurationError(InvalidInputError):
    """A setting or argument that cannot work; the message names the field and the fix."""


class StateError(LookaheadError, RuntimeError):
    """The operation does not fit the object's current state."""


class EngineError(LookaheadError, RuntimeError):
    """Base class for every embedded-engine failure."""
