"""Engine-independent scheduling: the context-aware batch latency model (paper Eq. 1), its
calibration, and lookahead-aware admission policies.

Pure Python (numpy only in calibration): the same objects run inside SGLang (via the plugin), in
the discrete-event simulator and in tests.
"""

from lookahead_sdk.scheduling.admission import (
    AdmissionPolicy,
    AdmissionRound,
    Admit,
    Decision,
    Defer,
    DisaggConfig,
    HybridConfig,
    HybridPolicy,
    RoundPlan,
    SlackAwarePolicy,
    VanillaConfig,
    VanillaPolicy,
)
from lookahead_sdk.scheduling.latency_model import (
    BatchFeatures,
    BatchShape,
    LatencyEstimator,
    LatencyModel,
    LatencyProfile,
    PiecewiseLinearTable,
    PrefillChunk,
    TokenOnlyModel,
    save_profile,
)
from lookahead_sdk.scheduling.profiles import (
    BUILTIN_PROFILES,
    H100_QWEN3_8B,
    H100_QWEN3_8B_ROOFLINE,
    load_profile,
)
from lookahead_sdk.scheduling.requests import PriorityClass, RequestDescriptor

__all__ = [
    "BUILTIN_PROFILES",
    "H100_QWEN3_8B",
    "H100_QWEN3_8B_ROOFLINE",
    "AdmissionPolicy",
    "AdmissionRound",
    "Admit",
    "BatchFeatures",
    "BatchShape",
    "Decision",
    "Defer",
    "DisaggConfig",
    "HybridConfig",
    "HybridPolicy",
    "LatencyEstimator",
    "LatencyModel",
    "LatencyProfile",
    "PiecewiseLinearTable",
    "PrefillChunk",
    "PriorityClass",
    "RequestDescriptor",
    "RoundPlan",
    "SlackAwarePolicy",
    "TokenOnlyModel",
    "VanillaConfig",
    "VanillaPolicy",
    "load_profile",
    "save_profile",
]
