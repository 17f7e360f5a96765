"""Asking a backend what it is and how many KV tokens it holds (`capacity.py` parses the
answers), and whether it is healthy."""

from __future__ import annotations

import json
from typing import Any

import httpx

from lookahead_sdk.router.capacity import (
    BackendInfo,
    from_llamacpp,
    from_server_info,
    from_vllm_metrics,
)


class BackendUnreachable(Exception):
    """The backend did not answer at all (connection refused, timed out)."""


class CapacityUnknown(Exception):
    """The backend answered but reported no KV capacity the router can read."""


async def discover(client: httpx.AsyncClient, url: str) -> BackendInfo:
    """What `url` serves and its KV capacity: SGLang / the simulator, then llama.cpp, then vLLM."""
    for path in ("/get_server_info", "/server_info"):
        info = from_server_info(url, await _json(client, f"{url}{path}"))
        if info is not None:
            return info
    props = await _json(client, f"{url}/props")
    if isinstance(props, dict) and "default_generation_settings" in props:
        info = from_llamacpp(url, props, await _json(client, f"{url}/slots"))
        if info is not None:
            return info
    metrics = await _text(client, f"{url}/metrics")
    info = from_vllm_metrics(url, metrics or "")
    if info is not None:
        return info
    raise CapacityUnknown(
        f"{url} reports no KV capacity (tried SGLang /get_server_info, llama.cpp /props and "
        f"/slots, vLLM /metrics); pass --capacity {url}=TOKENS"
    )


async def healthy(client: httpx.AsyncClient, url: str) -> bool:
    try:
        response = await client.get(f"{url}/health")
    except httpx.HTTPError:
        return False
    return response.status_code == 200


async def _json(client: httpx.AsyncClient, url: str) -> Any:
    text = await _text(client, url)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


async def _text(client: httpx.AsyncClient, url: str) -> str | None:
    try:
        response = await client.get(url)
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError) as error:
        raise BackendUnreachable(f"{url}: {error!r}") from error
    except httpx.HTTPError:
        return None
    return response.text if response.status_code == 200 else None
