"""Deterministic offline tokenization and a fixed ChatML template for the simulated server.

Each message renders to its own token list and a prompt is their concatenation, so a message
prefix always renders to a token prefix: a warmed prefix hits the cache when the same messages
come back with a suffix. Generated text is filler made of single-token words, so it tokenizes
back to exactly the ids that were generated (the next turn reuses the answer's KV).
"""

from __future__ import annotations

import json
import re
import zlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from lookahead_sdk.base.tokens import CL100K_PATTERN, CL100K_SPECIAL_TOKENS, find_tiktoken_file

IM_START = 100_264
IM_END = 100_265
SPECIAL_TEXT = {IM_START: "<|im_start|>", IM_END: "<|im_end|>"}
FILLER_WORDS = (" the", " of", " and", " to", " in", " is", " that", " for", " it", " as")


class Tokenizer(Protocol):
    name: str
    vocab_size: int  # token ids are 0 .. vocab_size - 1 (the chat markers included)

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class TiktokenTokenizer:
    """cl100k_base from BPE data already on disk (llama-index-core ships a copy)."""

    name = "tiktoken:cl100k_base"

    def __init__(self) -> None:
        import tiktoken
        import tiktoken.load

        path = find_tiktoken_file("cl100k_base")
        if path is None:
            raise FileNotFoundError("no offline BPE data for tiktoken's cl100k_base")
        self._encoding = tiktoken.Encoding(
            name="cl100k_base",
            pat_str=CL100K_PATTERN,
            mergeable_ranks=tiktoken.load.load_tiktoken_bpe(str(path)),
            special_tokens=CL100K_SPECIAL_TOKENS,
        )
        self.vocab_size = max(self._encoding.n_vocab, IM_END + 1)

    def encode(self, text: str) -> list[int]:
        return self._encoding.encode(text, disallowed_special=())

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(SPECIAL_TEXT.get(i) or self._encoding.decode([i]) for i in ids)


class WordTokenizer:
    """Fallback: one token per whitespace-led word, id from a CRC32 of the word (stable)."""

    name = "words-crc32"
    _PIECE = re.compile(r"\s*\S+|\s+")
    _VOCAB = 100_000
    vocab_size = IM_END + 1

    def __init__(self) -> None:
        self._text_of: dict[int, str] = {}

    def encode(self, text: str) -> list[int]:
        ids = []
        for piece in self._PIECE.findall(text):
            token = zlib.crc32(piece.encode()) % self._VOCAB
            self._text_of.setdefault(token, piece)
            ids.append(token)
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(SPECIAL_TEXT.get(i) or self._text_of.get(i, "") for i in ids)


def default_tokenizer() -> Tokenizer:
    try:
        return TiktokenTokenizer()
    except (FileNotFoundError, ImportError):
        return WordTokenizer()


class ChatTemplate:
    """ChatML: `<|im_start|>{role}\\n{content}<|im_end|>\\n` per message, then
    `<|im_start|>assistant\\n` as the generation prompt. Tools render as a leading block."""

    def __init__(self, tokenizer: Tokenizer, *, cache_entries: int = 4096) -> None:
        self.tokenizer = tokenizer
        self._cache: OrderedDict[str, list[int]] = OrderedDict()
        self._cache_entries = cache_entries
        self._newline = tokenizer.encode("\n")
        self.filler_ids = [tokenizer.encode(word)[0] for word in FILLER_WORDS]

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        ids: list[int] = []
        if tools:
            ids += self._block("tools", json.dumps(list(tools), sort_keys=True))
        for index, message in enumerate(messages):
            if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
                raise ValueError(f"messages[{index}] must be an object with a string 'role'")
            ids += self._block(message["role"], message_text(message))
        if add_generation_prompt:
            ids += [IM_START, *self._encode_cached("assistant\n")]
        return ids

    def filler(self, count: int) -> list[int]:
        return [self.filler_ids[i % len(self.filler_ids)] for i in range(count)]

    def _block(self, role: str, text: str) -> list[int]:
        return [
            IM_START,
            *self._encode_cached(f"{role}\n"),
            *self._encode_cached(text),
            IM_END,
            *self._newline,
        ]

    def _encode_cached(self, text: str) -> list[int]:
        cached = self._cache.get(text)
        if cached is None:
            cached = self.tokenizer.encode(text)
            self._cache[text] = cached
            if len(self._cache) > self._cache_entries:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(text)
        return cached


def message_text(message: Mapping[str, Any]) -> str:
    """A message's content as text: content parts joined, tool calls as JSON after the text."""
    content = message.get("content")
    if isinstance(content, list):
        text = "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    elif content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        raise ValueError(
            f"message content must be a string, a list of parts or null, got {content!r}"
        )
    tool_calls = message.get("tool_calls")
    if tool_calls:
        text += json.dumps(tool_calls, sort_keys=True)
    if message.get("tool_call_id"):
        text = f"[{message['tool_call_id']}] {text}"
    return text
