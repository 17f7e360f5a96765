"""Pluggable token counting that never downloads anything.

Preference order (see `auto_token_counter`): the serving engine's own tokenizer (`/tokenize`),
tiktoken with BPE data already on disk, then a bytes/4 approximation.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import math
import os
from collections import OrderedDict
from pathlib import Path
from typing import Protocol, runtime_checkable

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


class ServerTokenCounter:
    """The engine's own tokenizer via llama.cpp / SGLang-style `POST /tokenize`."""

    def __init__(self, base_url: str, *, timeout_s: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.name = f"server:{self.base_url}/tokenize"
        self._client = httpx.Client(timeout=timeout_s)

    def count_text(self, text: str) -> int:
        response = self._client.post(f"{self.base_url}/tokenize", json={"content": text})
        response.raise_for_status()
        body = response.json()
        tokens = body.get("tokens", body.get("input_ids"))
        if not isinstance(tokens, list):
            raise ValueError(f"{self.base_url}/tokenize answered without a token list: {body!r}")
        return len(tokens)

    def probe(self) -> bool:
        try:
            return self.count_text("probe") > 0
        except (httpx.HTTPError, ValueError):
            return False

    def close(self) -> None:
        self._client.close()


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


def auto_token_counter(base_url: str | None = None) -> CachedTokenCounter:
    """Server tokenizer when the server has one, else offline tiktoken, else the approximation."""
    if base_url:
        server = ServerTokenCounter(base_url)
        if server.probe():
            return CachedTokenCounter(server)
        server.close()
    try:
        return CachedTokenCounter(TiktokenCounter())
    except (FileNotFoundError, ImportError) as error:
        log.info("tiktoken unavailable offline (%s); approximating token counts", error)
        return CachedTokenCounter(ApproxTokenCounter())
