"""Fleet-scale simulation of the router: the policy core, unchanged, over simulated engines with
KV capacity, LRU prefix eviction and re-prefill cost from the batch latency model."""

from lookahead_sdk.router.fleet_sim.driver import (
    FirstResponse,
    FleetConfig,
    FleetResult,
    FleetSimulation,
    run_fleet,
)
from lookahead_sdk.router.fleet_sim.engine import EngineRequest, EngineStats, SimEngine
from lookahead_sdk.router.fleet_sim.workload import ProgramSpec, WorkloadConfig, sample_program

__all__ = [
    "EngineRequest",
    "EngineStats",
    "FirstResponse",
    "FleetConfig",
    "FleetResult",
    "FleetSimulation",
    "ProgramSpec",
    "SimEngine",
    "WorkloadConfig",
    "run_fleet",
    "sample_program",
]
