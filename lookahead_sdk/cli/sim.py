"""`lookahead-sdk sim serve`: a simulated engine behind an OpenAI/SGLang-compatible HTTP API."""

from __future__ import annotations

import argparse

from lookahead_sdk.base.args import add_be_batching, be_batching, port, positive_float, positive_int
from lookahead_sdk.scheduling.admission import DisaggConfig, HybridConfig
from lookahead_sdk.scheduling.latency_model import LatencyModel
from lookahead_sdk.scheduling.profiles import latency_profile, load_profile
from lookahead_sdk.sim.cluster import MODES, POLICIES, ClusterConfig
from lookahead_sdk.sim.ground_truth import GpuLikeTruth, ModelTruth


def register(subparsers: argparse._SubParsersAction) -> None:
    sim = subparsers.add_parser("sim", help="the discrete-event engine simulator")
    sim_commands = sim.add_subparsers(dest="sim_command", metavar="COMMAND", required=True)
    serve = sim_commands.add_parser(
        "serve",
        help="serve a simulated engine over HTTP (OpenAI chat + SGLang native subset)",
        description=(
            "Runs the simulator in real time (scaled by --time-scale) behind POST "
            "/v1/chat/completions, /generate, /tokenize, GET /get_server_info, /health, "
            "/v1/models and /stats."
        ),
    )
    serve.add_argument(
        "--profile",
        type=latency_profile,
        default="h100-qwen3-8b",
        help="latency profile: a built-in name (h100-qwen3-8b) or a profile JSON file",
    )
    serve.add_argument(
        "--kv-tokens", type=positive_int, required=True, help="KV pool size per instance (tokens)"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=port, default=30000)
    serve.add_argument("--mode", choices=MODES, default="colocated")
    serve.add_argument("--policy", choices=POLICIES, default="lookahead")
    serve.add_argument(
        "--time-scale",
        type=positive_float,
        default=1.0,
        help="wall seconds per simulated second (above 1 slows the simulation down)",
    )
    serve.add_argument("--model", default="sim-qwen3-8b", help="model name the server reports")
    serve.add_argument("--context-length", type=positive_int, default=40_960)
    serve.add_argument("--default-max-tokens", type=positive_int, default=32)
    serve.add_argument("--tbt-bound-ms", type=positive_float, default=50.0)
    add_be_batching(serve, HybridConfig())
    serve.add_argument("--slo-ttft-ms", type=positive_float, default=500.0)
    serve.add_argument(
        "--truth",
        choices=("gpu-like", "model"),
        default="gpu-like",
        help="iteration times: the latency model plus GPU-like effects and noise, or the model",
    )
    serve.add_argument("--seed", type=int, default=0)
    serve.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from lookahead_sdk.cli.serving import serve_asgi
    from lookahead_sdk.sim.server import SimServeConfig, create_app

    profile = load_profile(args.profile)
    cluster = ClusterConfig(
        mode=args.mode,
        policy=args.policy,
        kv_tokens=args.kv_tokens,
        hybrid=HybridConfig(tbt_bound_ms=args.tbt_bound_ms, **be_batching(args)),
        disagg=DisaggConfig(slo_ttft_ms=args.slo_ttft_ms),
    )
    truth = (
        GpuLikeTruth(profile, seed=args.seed)
        if args.truth == "gpu-like"
        else ModelTruth(LatencyModel(profile))
    )
    config = SimServeConfig(
        profile=profile,
        cluster=cluster,
        time_scale=args.time_scale,
        model=args.model,
        context_length=args.context_length,
        default_max_tokens=args.default_max_tokens,
        truth=truth,
    )
    print(
        f"simulated {profile.name} engine ({args.mode}, {args.policy} admission, "
        f"{args.kv_tokens} KV tokens, time scale {args.time_scale}) on http://{args.host}:{args.port}"
    )
    serve_asgi(create_app(config), host=args.host, port=args.port, log_level="warning")
    return 0
