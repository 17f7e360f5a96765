"""A tool: a real Python function plus the OpenAI function schema that describes it."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., str | Awaitable[str]] = field(compare=False)

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    async def call(self, arguments: str | dict[str, Any]) -> str:
        """Run the tool; bad arguments come back as an error string the model can read."""
        try:
            kwargs = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
            if not isinstance(kwargs, dict):
                raise TypeError("tool arguments must be a JSON object")
            result = self.function(**kwargs)
            if inspect.isawaitable(result):
                result = await result
        except asyncio.CancelledError:
            raise
        except Exception as error:
            return f"error: {self.name} failed: {type(error).__name__}: {error}"
        return str(result)


class ToolRegistry:
    def __init__(self, tools: list[Tool] | tuple[Tool, ...] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def schemas(self) -> list[dict[str, Any]]:
        return [tool.schema() for tool in self._tools.values()]

    async def call(self, name: str, arguments: str | dict[str, Any]) -> str:
        tool = self._tools.get(name)
        if tool is None:
            return f"error: unknown tool {name!r}; available: {sorted(self._tools)}"
        return await tool.call(arguments)
