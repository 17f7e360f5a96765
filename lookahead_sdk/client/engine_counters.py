"""What llama-server itself counted (its Prometheus `/metrics`, on with `--metrics`): prompt
tokens computed, tokens generated, `llama_decode` calls and the slots busy in each. Read before
and after a run, the difference is the run's own engine work: on a CPU, where background work
and foreground replies share every batch, it says whether a run computed more tokens or spent
more per token."""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx

_SAMPLE = re.compile(r"^llamacpp:(\w+) ([0-9.eE+-]+)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class EngineCounters:
    prompt_tokens: float
    generated_tokens: float
    decode_calls: float
    busy_slot_calls: float  # the slots processing in each call, summed over the calls

    def since(self, before: EngineCounters) -> dict[str, float]:
        """This run's share (`self` read after it, `before` before it), with busy slots per call."""
        calls = self.decode_calls - before.decode_calls
        busy = self.busy_slot_calls - before.busy_slot_calls
        return {
            "prompt_tokens": self.prompt_tokens - before.prompt_tokens,
            "generated_tokens": self.generated_tokens - before.generated_tokens,
            "decode_calls": calls,
            "busy_slots_per_call": round(busy / calls, 3) if calls > 0 else 0.0,
        }


def parse_llamacpp_metrics(text: str) -> EngineCounters | None:
    """The counters from llama-server's `/metrics` text; None when it has none of them (another
    server, or llama-server without `--metrics`)."""
    values = {name: float(value) for name, value in _SAMPLE.findall(text)}
    needed = ("prompt_tokens_total", "tokens_predicted_total", "n_decode_total")
    if not all(name in values for name in needed):
        return None
    calls = values["n_decode_total"]
    return EngineCounters(
        prompt_tokens=values["prompt_tokens_total"],
        generated_tokens=values["tokens_predicted_total"],
        decode_calls=calls,
        # llama-server exports the mean over its lifetime (busy slot-calls / calls), rounded:
        # over a run of a few calls on a long-lived server the difference is approximate.
        busy_slot_calls=values.get("n_busy_slots_per_decode", 0.0) * calls,
    )


async def read_engine_counters(base_url: str) -> EngineCounters | None:
    """llama-server's counters now; None where the server exports none (never raises)."""
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.get(f"{base_url.rstrip('/')}/metrics")
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    return parse_llamacpp_metrics(response.text)
