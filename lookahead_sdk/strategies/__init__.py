"""The four context strategies of the paper, with defaults scaled to the model's window."""

from lookahead_sdk.strategies.isolate import Isolate
from lookahead_sdk.strategies.keep_recent import KeepRecent
from lookahead_sdk.strategies.offload import Offload, read_offloaded_tool
from lookahead_sdk.strategies.summarize import Summarize

__all__ = ["Isolate", "KeepRecent", "Offload", "Summarize", "read_offloaded_tool"]
