"""Pluggable token counting that never downloads anything.

Preference order (see `auto_token_counter`): the serving engine's own tokenizer (llama.cpp,
vLLM or SGLang over HTTP), tiktoken with BPE data already on disk, then a bytes/4 approximation.
`CalibratedTokenCounter` scales any of them to the prompt sizes the model reports.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import math
import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import httpx

from lookahead_sdk.base.messages import Message, content_text

log = logging.getLogger(__name__)

# Role markers and separators a chat template adds around each message (ChatML: 4-5 tokens).
MESSAGE_OVERHEAD_TOKENS = 4

TIKTOKEN_URLS = {
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}


@runtime_checkable
class TokenCounter(Protocol):
    name: str

    def count_text(self, text: str) -> int: ...


def count_message(counter: TokenCounter, message: Message) -> int:
    return counter.count_text(content_text(message)) + MESSAGE_OVERHEAD_TOKENS


class ApproxTokenCounter:
    """About four UTF-8 bytes per token: the usual BPE average for English and code."""

    name = "approx-bytes/4"

    def count_text(self, text: str) -> int:
        return math.ceil(len(text.encode()) / 4)


# tiktoken's cl100k_base definition, built here from a local BPE file: tiktoken's own constructor
# would fetch the file over the network when its cache directory is not configured.
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
CL100K_SPECIAL_TOKENS = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


class TiktokenCounter:
    """cl100k_base from BPE data already on disk (never downloaded)."""

    name = "tiktoken:cl100k_base"

    def __init__(self) -> None:
        import tiktoken
        import tiktoken.load

        path = find_tiktoken_file("cl100k_base")
        if path is None:
            raise FileNotFoundError(
                "no offline BPE data for tiktoken's cl100k_base; set TIKTOKEN_CACHE_DIR to a "
                "directory holding it (llama-index-core ships one) or use ApproxTokenCounter"
            )
        self._encoding = tiktoken.Encoding(
            name="cl100k_base",
            pat_str=CL100K_PATTERN,
            mergeable_ranks=tiktoken.load.load_tiktoken_bpe(str(path)),
            special_tokens=CL100K_SPECIAL_TOKENS,
        )

    def count_text(self, text: str) -> int:
        return len(self._encoding.encode(text, disallowed_special=()))


def find_tiktoken_file(encoding: str) -> Path | None:
    """Locate a BPE file on disk: TIKTOKEN_CACHE_DIR, tiktoken's default cache, llama-index's copy."""
    url = TIKTOKEN_URLS.get(encoding)
    if url is None:
        return None
    cache_key = hashlib.sha1(url.encode()).hexdigest()
    candidates: list[Path] = []
    for env in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if os.environ.get(env):
            candidates.append(Path(os.environ[env]))
    candidates.append(Path(os.environ.get("TMPDIR", "/tmp")) / "data-gym-cache")
    spec = importlib.util.find_spec("llama_index")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidates.append(Path(location) / "core" / "_static" / "tiktoken_cache")
    for directory in candidates:
        path = directory / cache_key
        if path.is_file():
            return path
    return None


@dataclass(frozen=True)
class TokenizeDialect:
    """How one serving engine tokenizes text over HTTP."""

    name: str
    path: str
    text_field: str  # "content" (llama.cpp) or "prompt" (vLLM, SGLang, with the model name)

    def body(self, text: str, model: str | None) -> dict[str, Any]:
        if self.text_field == "content":
            return {"content": text, "add_special": False}
        return {"model": model or "default", "prompt": text, "add_special_tokens": False}


# Tried in this order; the first that answers a token list is kept. llama.cpp goes first: asked
# in another dialect it answers 200 with an empty list, which the probe does not accept.
TOKENIZE_DIALECTS: tuple[TokenizeDialect, ...] = (
    TokenizeDialect("llama.cpp", "/tokenize", "content"),
    TokenizeDialect("vllm", "/tokenize", "prompt"),
    TokenizeDialect("sglang", "/v1/tokenize", "prompt"),
)


class ServerTokenCounter:
    """The serving engine's own tokenizer over HTTP: llama.cpp `POST /tokenize {content}`, vLLM
    `POST /tokenize {model, prompt}`, SGLang `POST /v1/tokenize {model, prompt}`. The dialect is
    the one given, else the first that answers a token list (`probe`)."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        dialect: TokenizeDialect | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.model = model
        self.dialect = dialect
        self._client = httpx.Client(timeout=timeout_s)

    @property
    def name(self) -> str:
        dialect = self.dialect.name if self.dialect else "unprobed"
        return f"server:{self.base_url} ({dialect})"

    def _count(self, dialect: TokenizeDialect, text: str) -> int:
        response = self._client.post(
            f"{self.base_url}{dialect.path}", json=dialect.body(text, self.model)
        )
        response.raise_for_status()
        body = response.json()
        if isinstance(body, dict) and isinstance(body.get("count"), int):
            return body["count"]
        tokens = body.get("tokens", body.get("input_ids")) if isinstance(body, dict) else None
        if not isinstance(tokens, list):
            raise ValueError(
                f"{self.base_url}{dialect.path} answered without a token list: {body!r}"
            )
        return len(tokens)

    def count_text(self, text: str) -> int:
        if self.dialect is None and not self.probe():
            raise ValueError(f"{self.base_url} tokenizes in none of the known dialects")
        assert self.dialect is not None
        return self._count(self.dialect, text)

    def probe(self) -> bool:
        """Whether the server tokenizes (finding its dialect when none was given)."""
        for dialect in (self.dialect,) if self.dialect else TOKENIZE_DIALECTS:
            try:
                if self._count(dialect, "probe") > 0:
                    self.dialect = dialect
                    return True
            except (httpx.HTTPError, ValueError):
                continue
        return False

    def close(self) -> None:
        self._client.close()


class CalibratedTokenCounter:
    """Another counter's counts scaled to what the model reports: `observe(estimated, actual)`
    with a request's estimated prompt size and its `usage.prompt_tokens` moves the scale factor
    towards their ratio (an exponential moving average, bounded), as LangChain's
    `count_tokens_approximately(use_usage_metadata_scaling=True)` scales by the latest usage.
    Framework adapters feed it every model call whose usage the framework returns."""

    def __init__(
        self,
        inner: TokenCounter,
        *,
        smoothing: float = 0.3,
        bounds: tuple[float, float] = (0.25, 4.0),
        min_tokens: int = 32,
    ) -> None:
        self.inner = inner
        self.smoothing = smoothing
        self.bounds = bounds
        self.min_tokens = min_tokens
        self.scale = 1.0
        self.observations = 0

    @property
    def name(self) -> str:
        return f"{self.inner.name} x{self.scale:.3f}"

    def count_text(self, text: str) -> int:
        count = self.inner.count_text(text)
        return count if self.scale == 1.0 else math.ceil(count * self.scale)

    def observe(self, estimated: int, actual: int) -> None:
        """A request estimated at `estimated` tokens (with the current scale) was `actual`."""
        if estimated < self.min_tokens or actual <= 0:
            return  # too small to say anything about the ratio
        low, high = self.bounds
        target = self.scale * actual / estimated
        self.scale = min(high, max(low, self.scale + self.smoothing * (target - self.scale)))
        self.observations += 1


class CachedTokenCounter:
    """Memoizes counts by text (LRU), so re-counting a message after a transform is free."""

    def __init__(self, inner: TokenCounter, *, max_entries: int = 4096) -> None:
        self.inner = inner
        self.name = inner.name
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._max_entries = max_entries

    def count_text(self, text: str) -> int:
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            return cached
        count = self.inner.count_text(text)
        self._cache[text] = count
        if len(self._cache) > self._max_entries:
            self._cache.popitem(last=False)
        return count


def auto_token_counter(
    base_url: str | None = None, *, model: str | None = None
) -> CachedTokenCounter:
    """Server tokenizer when the server has one, else offline tiktoken, else the approximation."""
    if base_url:
        server = ServerTokenCounter(base_url, model=model)
        if server.probe():
            return CachedTokenCounter(server)
        server.close()
    try:
        return CachedTokenCounter(TiktokenCounter())
    except (FileNotFoundError, ImportError) as error:
        log.info("tiktoken unavailable offline (%s); approximating token counts", error)
        return CachedTokenCounter(ApproxTokenCounter())


def common_prefix_length(first: Sequence[int], second: Sequence[int]) -> int:
    """How many leading token ids two sequences share."""
    length = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        length += 1
    return length
