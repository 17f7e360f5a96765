"""HTTP-side hook: lift the lookahead tags of a request body into `custom_params`.

Wraps `TokenizerManager.generate_request(obj, request)`, the async generator every generation
route goes through (`/v1/chat/completions`, `/v1/completions`, `/generate`) with the Starlette
request whose JSON body Starlette has already parsed and cached. The body's top-level tag fields
and, for `/generate` (which has no top-level `custom_params`), its top-level `custom_params` are
merged into `obj.sampling_params["custom_params"]`, which SGLang carries to the scheduler's `Req`.
Invalid tags raise ValueError, which SGLang's routes answer with HTTP 400.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from lookahead_sdk.base.protocol import TAG_FIELDS, merge_tag_fields


async def tagged_generate_request(
    original: Any, tokenizer_manager: Any, obj: Any, request: Any = None, *args: Any, **kwargs: Any
) -> AsyncIterator[Any]:
    body = None if request is None else await json_body(request)
    attach_tags(obj, body)
    inner = original(tokenizer_manager, obj, request, *args, **kwargs)
    try:
        async for item in inner:
            yield item
    finally:
        await inner.aclose()


async def json_body(request: Any) -> Mapping[str, Any] | None:
    """The request's JSON object body, or None (not JSON, unreadable, not an object)."""
    if "json" not in request.headers.get("content-type", ""):
        return None
    try:
        body = await request.json()
    except (ValueError, RuntimeError, OSError):
        return None
    return body if isinstance(body, Mapping) else None


def attach_tags(obj: Any, body: Mapping[str, Any] | None) -> None:
    """Merge the body's tags into each of `obj`'s sampling-params dicts (validating them even when
    there is no body, e.g. a request made through SGLang's Python `Engine`)."""
    if not hasattr(obj, "sampling_params"):
        return
    top_level = _top_level_tags(body)
    params = obj.sampling_params
    if params is None:
        merged = merge_tag_fields(top_level, None)
        if merged is not None:
            obj.sampling_params = {"custom_params": merged}
        return
    for one in params if isinstance(params, list) else [params]:
        merged = merge_tag_fields(top_level, one.get("custom_params"))
        if merged is not None:
            one["custom_params"] = merged


def _top_level_tags(body: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if body is None:
        return None
    tags = {name: body[name] for name in TAG_FIELDS if body.get(name) is not None}
    nested = body.get("custom_params")
    if isinstance(nested, Mapping):
        tags.update({name: nested[name] for name in TAG_FIELDS if nested.get(name) is not None})
    return tags or None
