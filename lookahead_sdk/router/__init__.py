"""Program-aware routing across backends: a pure policy core (no I/O, no event loop, injected
clock) that an HTTP proxy or the fleet simulator drives with events and whose decisions they
execute. See `thunder.py` for the algorithm and `table.py` for the shared bookkeeping."""

from lookahead_sdk.router.baselines import (
    LeastLoadedStickyPolicy,
    RoundRobinPolicy,
    SessionAffinityPolicy,
)
from lookahead_sdk.router.config import BaselineConfig, ThunderConfig
from lookahead_sdk.router.decisions import (
    Admission,
    Decision,
    ForceAdmit,
    Forward,
    Hold,
    Ignored,
    Pause,
    Reject,
    Requeue,
    Restore,
    Teardown,
)
from lookahead_sdk.router.interface import RouterPolicy
from lookahead_sdk.router.metrics import BackendMetrics, RouterMetrics
from lookahead_sdk.router.policies import POLICY_NAMES, make_policy
from lookahead_sdk.router.state import LookaheadKind, Phase, ProgramView, Status
from lookahead_sdk.router.table import RouterCore
from lookahead_sdk.router.thunder import ThunderPolicy

__all__ = [
    "POLICY_NAMES",
    "Admission",
    "BackendMetrics",
    "BaselineConfig",
    "Decision",
    "ForceAdmit",
    "Forward",
    "Hold",
    "Ignored",
    "LeastLoadedStickyPolicy",
    "LookaheadKind",
    "Pause",
    "Phase",
    "ProgramView",
    "Reject",
    "Requeue",
    "Restore",
    "RoundRobinPolicy",
    "RouterCore",
    "RouterMetrics",
    "RouterPolicy",
    "SessionAffinityPolicy",
    "Status",
    "Teardown",
    "ThunderConfig",
    "ThunderPolicy",
    "make_policy",
]
