"""`lookahead-sdk bench estimator` (paper Fig. 15): held-out relative error of the context-aware
batch latency model (Eq. 1) vs the token-only model, each fitted by `calibrate` on the same
training split, on two sources:

- `sim`: batches timed by the simulator's GPU-like ground truth for the H100 profile (Eq. 1 plus
  effects it does not model, and 2% noise; see `lookahead_sdk.sim.ground_truth`), with cached
  contexts of 4K-20K tokens as in the paper;
- `embedded`: real prefill/decode timings of the embedded llama.cpp engine at cached contexts of
  0-6K tokens, measured live (default; starts the engine, about 2-4 minutes) or read from a file
  written earlier (`--embedded-data`, e.g. by `lookahead-sdk calibrate --measure-embedded
  --save-measurements PATH`).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from lookahead_sdk.base.args import (
    Number,
    existing_file,
    non_negative_float,
    non_negative_int,
    output_file,
    port,
    positive_int,
)
from lookahead_sdk.bench.common import compact_table, new_figure, save_figure, write_json
from lookahead_sdk.scheduling.latency_model import BatchShape, PrefillChunk
from lookahead_sdk.scheduling.measurements import (
    BatchMeasurement,
    MeasurementSet,
    load_measurements,
    save_measurements,
)
from lookahead_sdk.scheduling.profiles import latency_profile, load_profile
from lookahead_sdk.sim.ground_truth import GpuLikeTruth

if TYPE_CHECKING:  # numpy (the `calibrate` extra): imported when the bench runs
    from lookahead_sdk.scheduling.calibrate import CalibrationReport, CrossValidation

PAPER_CONTEXT_RANGE = (4096, 20_480)


def sim_batches(count: int, seed: int) -> list[BatchShape]:
    """Decode-only, prefill-only and hybrid batches with cached contexts in the paper's range."""
    rng = random.Random(seed)
    low, high = PAPER_CONTEXT_RANGE
    batches = []
    for index in range(count):
        kind = index % 3
        decodes = (
            tuple(rng.randint(low, high) for _ in range(rng.randint(1, 64))) if kind != 1 else ()
        )
        chunks = (
            tuple(
                PrefillChunk(
                    rng.choice((64, 256, 512, 1024, 2048, 4096, 8192)), rng.randint(low, high)
                )
                for _ in range(rng.randint(1, 2))
            )
            if kind != 0
            else ()
        )
        batches.append(BatchShape(decodes, chunks))
    return batches


def measure_sim(profile_name: str, count: int, noise: float, seed: int) -> MeasurementSet:
    profile = load_profile(profile_name)
    truth = GpuLikeTruth(profile, noise=noise, seed=seed)
    batches = tuple(
        BatchMeasurement(batch, truth.duration_ms(batch)) for batch in sim_batches(count, seed)
    )
    return MeasurementSet(
        batches, {"source": f"simulator ground truth ({profile.name})", "noise": noise}
    )


def register(bench_subparsers: argparse._SubParsersAction) -> None:
    parser = bench_subparsers.add_parser(
        "estimator",
        help="paper Fig. 15: held-out error of context-aware vs token-only latency models",
    )
    parser.add_argument("--json", type=output_file, required=True, metavar="PATH")
    parser.add_argument("--plot", type=output_file, metavar="PATH")
    parser.add_argument(
        "--profile",
        type=latency_profile,
        default="h100-qwen3-8b",
        help="profile behind the sim truth",
    )
    parser.add_argument("--sim-batches", type=positive_int, default=600)
    parser.add_argument(
        "--noise", type=non_negative_float, default=0.02, help="sim truth log-normal noise"
    )
    parser.add_argument(
        "--heldout-frac",
        type=Number(float, low=0, high=1, low_open=True, high_open=True),
        default=0.3,
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--cv-folds",
        type=cv_folds,
        default=5,
        help="also report k-fold cross-validation over all batches of each source (0: off)",
    )
    embedded = parser.add_mutually_exclusive_group()
    embedded.add_argument(
        "--embedded-data",
        type=existing_file,
        metavar="PATH",
        help="embedded-engine batches measured earlier (JSON/CSV) instead of measuring now",
    )
    embedded.add_argument(
        "--skip-embedded", action="store_true", help="only the simulator source (JSON lacks it)"
    )
    parser.add_argument(
        "--save-embedded",
        type=output_file,
        metavar="PATH",
        help="write the live measurements here",
    )
    parser.add_argument("--port", type=port, default=18231, help="embedded engine port")
    parser.add_argument(
        "--engine-threads",
        type=positive_int,
        default=1,
        help="threads of the measured engine (1: robust on a shared CPU)",
    )
    parser.set_defaults(func=run)


def cv_folds(text: str) -> int:
    folds = non_negative_int(text)
    if folds == 1:
        raise argparse.ArgumentTypeError("expected 0 (off) or an integer >= 2, got '1'")
    return folds


def run(args: argparse.Namespace) -> int:
    from lookahead_sdk.scheduling.calibrate import calibrate, cross_validate  # numpy

    console = Console()
    sources: dict[str, MeasurementSet] = {
        "sim": measure_sim(args.profile, args.sim_batches, args.noise, args.seed)
    }
    if args.embedded_data:
        sources["embedded"] = load_measurements(args.embedded_data)
    elif not args.skip_embedded:
        from lookahead_sdk.bench.embedded_batches import measure_on_embedded_engine

        sources["embedded"] = measure_on_embedded_engine(
            port=args.port, threads=args.engine_threads
        )
        if args.save_embedded:
            save_measurements(sources["embedded"], args.save_embedded)
    reports = {
        name: calibrate(
            data.batches,
            name=f"estimator-{name}",
            heldout_frac=args.heldout_frac,
            seed=args.seed,
        )
        for name, data in sources.items()
    }
    document: dict[str, Any] = {"sources": {name: r.heldout_json() for name, r in reports.items()}}
    cross: dict[str, CrossValidation] = {}
    if args.cv_folds:
        cross = {
            name: cross_validate(data.batches, folds=args.cv_folds, seed=args.seed)
            for name, data in sources.items()
        }
        document["cross_validation"] = {name: cv.to_json() for name, cv in cross.items()}
    write_json(args.json, document)
    console.print(_table(reports))
    if cross:
        console.print(_cv_table(cross))
    if args.plot:
        _plot(args.plot, reports)
    return 0


def _table(reports: dict[str, CalibrationReport]) -> Table:
    table = compact_table(
        "held-out relative error: context-aware (Eq. 1) vs token-only",
        ("source", "n held-out", "ctx-aware max", "ctx-aware mean", "token max", "token mean"),
    )
    for name, report in reports.items():
        heldout: dict[str, Any] = report.heldout_json()
        table.add_row(
            name,
            str(heldout["n_heldout"]),
            f"{heldout['context_aware']['max_rel_err']:.1%}",
            f"{heldout['context_aware']['mean_rel_err']:.1%}",
            f"{heldout['token_only']['max_rel_err']:.1%}",
            f"{heldout['token_only']['mean_rel_err']:.1%}",
        )
    return table


def _cv_table(cross: dict[str, CrossValidation]) -> Table:
    table = compact_table(
        "k-fold cross-validation (every batch predicted by a fit without it)",
        ("source", "folds", "n", "ctx-aware max", "ctx-aware mean", "token max"),
    )
    for name, cv in cross.items():
        table.add_row(
            name,
            str(cv.folds),
            str(cv.context_aware.n),
            f"{cv.context_aware.max_rel_err:.1%}",
            f"{cv.context_aware.mean_rel_err:.1%}",
            f"{cv.token_only.max_rel_err:.1%}",
        )
    return table


def _plot(path: str | Path, reports: dict[str, CalibrationReport]) -> None:
    figure, axes = new_figure(1, len(reports), size=(5 * len(reports), 4))
    for axis, (name, report) in zip(axes[0], reports.items(), strict=True):
        heldout = report.heldout_json()
        labels = ("max", "mean")
        for offset, model in ((-0.2, "context_aware"), (0.2, "token_only")):
            values = [heldout[model][f"{label}_rel_err"] * 100 for label in labels]
            axis.bar([i + offset for i in range(len(labels))], values, width=0.4, label=model)
        axis.axhline(10, color="grey", linestyle="--", linewidth=1)
        axis.set_xticks(range(len(labels)), [f"{label} rel. error" for label in labels])
        axis.set_ylabel("% (held-out)")
        axis.set_yscale("log")
        axis.set_title(f"{name} (n={heldout['n_heldout']})")
        axis.legend()
    save_figure(figure, path)
