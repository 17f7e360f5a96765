"""`lookahead-sdk calibrate`: fit the batch latency model from measured batches, save a profile,
and report held-out errors of the context-aware model vs the token-only model."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from lookahead_sdk.base.args import (
    add_renamed,
    comma_list,
    existing_file,
    fraction,
    output_file,
    port,
    positive_int,
)
from lookahead_sdk.bench.common import compact_table, provenance
from lookahead_sdk.scheduling.latency_model import save_profile
from lookahead_sdk.scheduling.measurements import (
    MeasurementSet,
    load_measurements,
    save_measurements,
)

if TYPE_CHECKING:  # the fit needs numpy (the `calibrate` extra): imported when it runs
    from lookahead_sdk.scheduling.calibrate import CalibrationReport, ErrorStats


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "calibrate",
        help="fit the context-aware batch latency model (T_GEMM table, alpha_d, alpha_p)",
        description=(
            "Least-squares fit of Est(B) = T_GEMM(M) + alpha_d*sum(L) + alpha_p*sum(A) and of a "
            "token-only baseline, from measured batches (--profile-data) or from batches measured "
            "now on the embedded llama.cpp engine (--measure-embedded). Writes a profile JSON and "
            "prints held-out errors."
        ),
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--profile-data",
        type=existing_file,
        metavar="PATH",
        help="measured batches, CSV or JSON (format: docs/scheduling.md)",
    )
    source.add_argument(
        "--measure-embedded",
        action="store_true",
        help="measure batches on the embedded engine (cached contexts 0-6K; about 2-4 min)",
    )
    add_renamed(
        parser,
        "--save-profile",
        "--out",
        type=output_file,
        required=True,
        metavar="PROFILE.json",
        help="where to write the fitted profile",
    )
    parser.add_argument("--name", help="profile name (default: derived from the source)")
    parser.add_argument("--heldout-frac", type=fraction, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--save-measurements",
        type=output_file,
        metavar="PATH",
        help="with --measure-embedded: also write the measured batches (JSON or CSV)",
    )
    parser.add_argument(
        "--port", type=port, default=18231, help="with --measure-embedded: engine port"
    )
    parser.add_argument(
        "--engine-threads",
        type=positive_int,
        default=1,
        help="threads of the measured engine (1: robust on a shared CPU)",
    )
    parser.add_argument(
        "--passes",
        type=positive_int,
        default=3,
        help="with --measure-embedded: passes over the plan (the fastest sample per shape is kept)",
    )
    parser.add_argument(
        "--new-tokens",
        type=comma_list(positive_int),
        default=(16, 128, 512),
        metavar="N,N,...",
        help="with --measure-embedded: new-token counts measured at every cached-prefix level",
    )
    parser.add_argument(
        "--report-json",
        type=output_file,
        metavar="PATH",
        help="also write the error report as JSON",
    )
    parser.set_defaults(func=run_calibrate)


def run_calibrate(args: argparse.Namespace) -> int:
    from lookahead_sdk.scheduling.calibrate import calibrate

    console = Console()
    measurements = _measurements(args, console)
    name = args.name or ("embedded-llama.cpp" if args.measure_embedded else args.profile_data.stem)
    report = calibrate(
        measurements.batches,
        name=name,
        heldout_frac=args.heldout_frac,
        seed=args.seed,
        metadata={**measurements.metadata, "n_batches": len(measurements.batches)},
    )
    save_profile(report.profile, args.save_profile)
    console.print(report_table(report))
    console.print(f"profile written to {args.save_profile}")
    if args.report_json:
        args.report_json.parent.mkdir(parents=True, exist_ok=True)
        args.report_json.write_text(json.dumps(report_json(report), indent=2) + "\n")
    return 0


def _measurements(args: argparse.Namespace, console: Console) -> MeasurementSet:
    if not args.measure_embedded:
        return load_measurements(args.profile_data)
    # Imported here: the scheduling package itself stays free of engine and HTTP code.
    from lookahead_sdk.bench.embedded_batches import (
        EmbeddedMeasurementPlan,
        measure_on_embedded_engine,
    )

    plan = EmbeddedMeasurementPlan(new_tokens=args.new_tokens, passes=args.passes)
    measured = measure_on_embedded_engine(plan, port=args.port, threads=args.engine_threads)
    # Where these batches were timed (commit, build, machine, command): the measurements' and
    # the fitted profile's metadata carry it.
    measured = replace(measured, metadata={**measured.metadata, "provenance": provenance()})
    console.print(f"measured {len(measured.batches)} batches on the embedded engine")
    if args.save_measurements:
        save_measurements(measured, args.save_measurements)
        console.print(f"measurements written to {args.save_measurements}")
    return measured


def report_json(report: CalibrationReport) -> dict[str, object]:
    document: dict[str, object] = {
        "profile": report.profile.name,
        "n_train": report.n_train,
        "train": {
            "context_aware": report.train_context_aware.to_json(),
            "token_only": report.train_token_only.to_json(),
        },
    }
    if report.heldout_context_aware is not None:
        document["heldout"] = report.heldout_json()
    return document


def report_table(report: CalibrationReport) -> Table:
    profile = report.profile
    table = compact_table(
        f"{profile.name}: alpha_d={profile.alpha_decode_ms:.3e} ms/token, "
        f"alpha_p={profile.alpha_prefill_ms:.3e} ms/unit, "
        f"T_GEMM knots={list(profile.gemm_table.tokens)}",
        (
            "model",
            f"train max (n={report.n_train})",
            "train mean",
            f"held-out max (n={report.n_heldout})",
            "held-out mean",
        ),
    )
    rows: list[tuple[str, ErrorStats, ErrorStats | None]] = [
        ("context-aware", report.train_context_aware, report.heldout_context_aware),
        ("token-only", report.train_token_only, report.heldout_token_only),
    ]
    for label, train, heldout in rows:
        table.add_row(
            label,
            f"{train.max_rel_err:.1%}",
            f"{train.mean_rel_err:.1%}",
            f"{heldout.max_rel_err:.1%}" if heldout else "-",
            f"{heldout.mean_rel_err:.1%}" if heldout else "-",
        )
    return table
