"""Discrete-event engine simulator driven by the batch latency model, running the same admission
policies as the SGLang plugin; also served over HTTP (`lookahead-sdk sim serve`)."""

from lookahead_sdk.sim.cluster import ClusterConfig, SimCluster
from lookahead_sdk.sim.ground_truth import GpuLikeTruth, ModelTruth
from lookahead_sdk.sim.request import Phase, RequestTags, SimRequest
from lookahead_sdk.sim.simulation import Simulation

__all__ = [
    "ClusterConfig",
    "GpuLikeTruth",
    "ModelTruth",
    "Phase",
    "RequestTags",
    "SimCluster",
    "SimRequest",
    "Simulation",
]
