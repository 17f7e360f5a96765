"""Measured batches (the calibration input): a batch shape and its measured latency.

Files (see docs/scheduling.md):

- JSON: {"schema": "lookahead-sdk/batch-measurements/v1", "metadata": {...},
         "batches": [{"decode_contexts": [int], "prefill_chunks": [[new_tokens, prefix_tokens]],
                      "latency_ms": float}]}
- CSV with a header row and columns `latency_ms,decode_contexts,prefill_chunks`:
  `decode_contexts` is `;`-separated context lengths, `prefill_chunks` is `;`-separated
  `new_tokens:prefix_tokens` pairs; either may be empty.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lookahead_sdk.scheduling.latency_model import BatchShape, PrefillChunk, _as_int, _as_ms

MEASUREMENTS_SCHEMA = "lookahead-sdk/batch-measurements/v1"
CSV_COLUMNS = ("latency_ms", "decode_contexts", "prefill_chunks")


@dataclass(frozen=True, slots=True)
class BatchMeasurement:
    batch: BatchShape
    latency_ms: float

    def __post_init__(self) -> None:
        if not (
            isinstance(self.latency_ms, int | float)
            and math.isfinite(self.latency_ms)
            and self.latency_ms > 0
        ):
            raise ValueError(f"latency_ms must be a finite number > 0, got {self.latency_ms!r}")
        if self.batch.forward_tokens == 0:
            raise ValueError("a measured batch needs at least one decode or prefill token")

    def to_json(self) -> dict[str, Any]:
        return {
            "decode_contexts": list(self.batch.decode_contexts),
            "prefill_chunks": [[c.new_tokens, c.prefix_tokens] for c in self.batch.prefill_chunks],
            "latency_ms": self.latency_ms,
        }

    @classmethod
    def from_json(cls, record: Mapping[str, Any], where: str) -> BatchMeasurement:
        if not isinstance(record, Mapping):
            raise ValueError(f"{where} must be a JSON object")
        if "latency_ms" not in record:
            raise ValueError(f"{where} is missing 'latency_ms'")
        decode = record.get("decode_contexts", [])
        chunks = record.get("prefill_chunks", [])
        if not isinstance(decode, list) or not isinstance(chunks, list):
            raise ValueError(f"{where}: decode_contexts and prefill_chunks must be lists")
        for index, chunk in enumerate(chunks):
            if not isinstance(chunk, list | tuple) or len(chunk) != 2:
                raise ValueError(
                    f"{where}.prefill_chunks[{index}] must be a [new_tokens, prefix_tokens] pair"
                )
        try:
            batch = BatchShape(
                tuple(decode),
                tuple(
                    PrefillChunk(
                        _as_int(f"prefill_chunks[{index}][0]", q),
                        _as_int(f"prefill_chunks[{index}][1]", p),
                    )
                    for index, (q, p) in enumerate(chunks)
                ),
            )
            return cls(batch, _as_ms("latency_ms", record["latency_ms"]))
        except (TypeError, ValueError) as error:
            raise ValueError(f"{where}: {error}") from error


@dataclass(frozen=True, slots=True)
class MeasurementSet:
    batches: tuple[BatchMeasurement, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": MEASUREMENTS_SCHEMA,
            "metadata": dict(self.metadata),
            "batches": [m.to_json() for m in self.batches],
        }


def load_measurements(path: str | Path) -> MeasurementSet:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no measurement file at {str(path)!r}")
    if path.suffix.lower() == ".csv":
        return MeasurementSet(tuple(_read_csv(path)), {"source_file": str(path)})
    try:
        document = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{str(path)!r} is neither CSV (by suffix) nor valid JSON: {error}"
        ) from error
    if not isinstance(document, Mapping) or document.get("schema") != MEASUREMENTS_SCHEMA:
        raise ValueError(
            f'{str(path)!r}: a measurement JSON file needs "schema": {MEASUREMENTS_SCHEMA!r}'
        )
    records = document.get("batches")
    if not isinstance(records, list):
        raise ValueError(f"{str(path)!r}: 'batches' must be a list")
    metadata = document.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise ValueError(f"{str(path)!r}: 'metadata' must be a JSON object, got {metadata!r}")
    batches = tuple(
        BatchMeasurement.from_json(record, f"batches[{index}]")
        for index, record in enumerate(records)
    )
    return MeasurementSet(batches, dict(metadata))


def save_measurements(measurements: MeasurementSet, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".csv":
        _write_csv(path, measurements.batches)
    else:
        path.write_text(json.dumps(measurements.to_json(), indent=1) + "\n")
    return path


def _read_csv(path: Path) -> Iterable[BatchMeasurement]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in CSV_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(
                f"{str(path)!r}: CSV header must name the columns {CSV_COLUMNS}; missing {missing}"
            )
        for line_number, row in enumerate(reader, start=2):
            where = f"{path.name} line {line_number}"
            empty = [c for c in CSV_COLUMNS if row[c] is None]
            if empty:
                raise ValueError(f"{where}: the row has no cell for the columns {empty}")
            try:
                decode = [int(v) for v in _split(row["decode_contexts"])]
                chunks = [_parse_chunk(v) for v in _split(row["prefill_chunks"])]
                latency = float(row["latency_ms"])
            except ValueError as error:
                raise ValueError(f"{where}: {error}") from error
            yield BatchMeasurement.from_json(
                {"decode_contexts": decode, "prefill_chunks": chunks, "latency_ms": latency}, where
            )


def _write_csv(path: Path, batches: Sequence[BatchMeasurement]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for m in batches:
            writer.writerow(
                [
                    m.latency_ms,
                    ";".join(str(c) for c in m.batch.decode_contexts),
                    ";".join(f"{c.new_tokens}:{c.prefix_tokens}" for c in m.batch.prefill_chunks),
                ]
            )


def _split(cell: str | None) -> list[str]:
    return [part.strip() for part in (cell or "").split(";") if part.strip()]


def _parse_chunk(text: str) -> list[int]:
    new, sep, prefix = text.partition(":")
    if not sep:
        raise ValueError(f"prefill chunk {text!r} must be written new_tokens:prefix_tokens")
    return [int(new), int(prefix)]
