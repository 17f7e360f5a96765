"""A seeded code-analysis workload like the paper's, scaled to the model's window: each step reads real source.

The corpus is the Python standard library of the running interpreter (real, offline source
text). The workload plans which tool calls the agent makes, so a synchronous run and a lookahead
run see exactly the same contexts and can be compared side by side; the model's own replies are
real generations.
"""

from __future__ import annotations

import asyncio
import random
import sysconfig
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lookahead_sdk.base.tokens import TokenCounter
from lookahead_sdk.base.tools import Tool
from lookahead_sdk.core.policy import PAPER_WINDOW_TOKENS

# Tokens a read adds to the context, scaled with the model's window like every threshold. The
# paper's workload adds ~600-650 tokens per step to a 32K model. Files are read in chunks of
# varied size: every `DEFAULT_LARGE_OUTPUT_EVERY`-th read is LARGE_OUTPUT_FACTOR times larger (a
# whole class), which is what Offload's threshold (1024 tokens at 32K) selects; the mean read is
# ~690 tokens at 32K, ~170 at 8K.
PAPER_READ_TOKENS = (440, 480)  # a normal read at the paper's 32K window
DEFAULT_LARGE_OUTPUT_EVERY = 4
LARGE_OUTPUT_FACTOR = 3


def default_read_tokens(window_tokens: int) -> tuple[int, int]:
    scale = window_tokens / PAPER_WINDOW_TOKENS
    low, high = (max(1, round(bound * scale)) for bound in PAPER_READ_TOKENS)
    return low, high


DEFAULT_TOOL_OUTPUT_TOKENS = default_read_tokens(8192)  # the embedded model's window

# Sizeable, stable, pure-Python stdlib modules.
CORPUS_MODULES: tuple[str, ...] = (
    "argparse.py",
    "ast.py",
    "calendar.py",
    "configparser.py",
    "csv.py",
    "dataclasses.py",
    "difflib.py",
    "enum.py",
    "fractions.py",
    "functools.py",
    "gettext.py",
    "heapq.py",
    "inspect.py",
    "ipaddress.py",
    "json/decoder.py",
    "json/encoder.py",
    "logging/__init__.py",
    "mailbox.py",
    "pathlib.py",
    "pickle.py",
    "pprint.py",
    "shlex.py",
    "shutil.py",
    "statistics.py",
    "string.py",
    "tarfile.py",
    "textwrap.py",
    "threading.py",
    "tokenize.py",
    "typing.py",
    "urllib/parse.py",
    "uuid.py",
    "zipfile.py",
)

MAIN_SYSTEM_PROMPT = (
    "You are a careful code-analysis agent. You read source files with tools, note what each "
    "part does, spot risky code (error handling, concurrency, input validation) and keep "
    "findings short. After each tool result, write one or two sentences of findings."
)
SUBAGENT_ROLE = (
    "You are a focused code-review sub-agent. Another agent handed you one module. Read what "
    "you need with read_source, then answer the instruction in at most three sentences. "
    "Here is the context you were handed:\n\n"
)
DELEGATE_PROMPT = "Write a short instruction for a sub-agent that will review module {module}."


def corpus_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def read_lines(root: Path, path: str, start_line: int = 1, end_line: int | None = None) -> str:
    """Lines [start_line, end_line] of `path` under `root`, numbered, as the read tool shows them."""
    target = (root / path).resolve()
    if not target.is_relative_to(root.resolve()) or not target.is_file():
        raise ValueError(f"no source file {path!r} under {root}")
    lines = target.read_text(encoding="utf-8", errors="replace").splitlines()
    end = len(lines) if end_line is None else min(end_line, len(lines))
    body = "\n".join(
        f"{number:5d}  {lines[number - 1]}" for number in range(max(1, start_line), end + 1)
    )
    return f"# {path} lines {start_line}-{end}\n{body}"


def read_source_tool(root: Path, latency_s: Callable[[], float] | None = None) -> Tool:
    """A real file-reading tool confined to `root`. `latency_s` models where the tool runs: a
    remote sandbox answers after a round trip and its own execution time, not instantly."""

    async def read_source(path: str, start_line: int = 1, end_line: int | None = None) -> str:
        if latency_s is not None:
            await asyncio.sleep(latency_s())
        return read_lines(root, path, start_line, end_line)

    return Tool(
        name="read_source",
        description="Read lines [start_line, end_line] of a source file, with line numbers.",
        parameters={
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "path relative to the source root"},
                "start_line": {"type": "integer", "minimum": 1},
                "end_line": {"type": "integer", "minimum": 1},
            },
            "required": ["path"],
        },
        function=read_source,
    )


def delegate_tool_schema() -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": "delegate",
            "description": "Hand a self-contained review task to a sub-agent with a fresh context.",
            "parameters": {
                "type": "object",
                "properties": {"instruction": {"type": "string"}},
                "required": ["instruction"],
            },
        },
    }


@dataclass(frozen=True)
class PlannedCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Delegation:
    """The main agent writes an instruction (streamed), a sub-agent reviews `module`."""

    module: str
    prompt: str
    handover: str
    subagent_calls: tuple[PlannedCall, ...]


Step = PlannedCall | Delegation


@dataclass
class CodeAnalysisWorkload:
    seed: int
    steps: int
    token_counter: TokenCounter
    tokens_per_output: tuple[int, int] = DEFAULT_TOOL_OUTPUT_TOKENS
    large_output_every: int = DEFAULT_LARGE_OUTPUT_EVERY  # 0: every read the same size
    handover_tokens: int = 700
    tool_latency_s: float = 0.0  # mean; each call takes 0.5x-1.5x of it (seeded)
    # Source handed over with the task, in tokens: the agent starts with this much context, as a
    # program does mid-trajectory (0: the task alone).
    task_tokens: int = 0
    root: Path = field(default_factory=corpus_root)

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        low, high = self.tokens_per_output
        if self.tool_latency_s < 0:
            raise ValueError(f"tool_latency_s must be >= 0 seconds, got {self.tool_latency_s}")
        if not 0 < low <= high:
            raise ValueError(
                f"tokens_per_output must be (low, high) with 0 < low <= high, got {self.tokens_per_output}"
            )
        if self.large_output_every < 0:
            raise ValueError(
                f"large_output_every must be >= 0 (0: no large reads), got {self.large_output_every}"
            )
        if self.task_tokens < 0:
            raise ValueError(
                f"task_tokens must be >= 0 (0: the task alone), got {self.task_tokens}"
            )
        self.modules = [m for m in CORPUS_MODULES if (self.root / m).is_file()]
        if len(self.modules) < 4:
            raise FileNotFoundError(
                f"too few corpus modules under {self.root}; is this a full CPython install?"
            )
        self._lines: dict[str, list[str]] = {}

    def task(self) -> str:
        rng = random.Random(self.seed)
        picked = rng.sample(self.modules, 3)
        task = f"Analyze these standard-library modules for risky code: {', '.join(picked)}. Read them chunk by chunk."
        if not self.task_tokens:
            return task
        start, end = self._line_range(rng, picked[0], self.task_tokens, self.task_tokens)
        excerpt = read_lines(self.root, picked[0], start + 1, end)
        return f"{task}\n\nWhere the previous reviewer stopped:\n{excerpt}"

    def read_plan(self) -> list[PlannedCall]:
        """`steps` reads, each a line range of `tokens_per_output` tokens (every
        `large_output_every`-th one LARGE_OUTPUT_FACTOR times that). Where the cycle starts
        depends on the seed: concurrent agents (consecutive seeds) are no more in lockstep than
        agents on different tasks are, each hitting its large reads and limits in other rounds."""
        rng = random.Random(self.seed)
        every = self.large_output_every
        return [
            self._chunk_call(rng, large=every > 0 and (step + self.seed) % every == every - 1)
            for step in range(self.steps)
        ]

    def delegation_plan(self, reads_per_subagent: int = 1) -> list[Delegation]:
        """`steps` delegations, each handing one module (with an outline) to a sub-agent."""
        rng = random.Random(self.seed)
        plan = []
        for _ in range(self.steps):
            module = rng.choice(self.modules)
            calls = tuple(self._chunk_call(rng, module) for _ in range(reads_per_subagent))
            plan.append(
                Delegation(
                    module,
                    DELEGATE_PROMPT.format(module=module),
                    SUBAGENT_ROLE + self._outline(module),
                    calls,
                )
            )
        return plan

    def _source_lines(self, module: str) -> list[str]:
        if module not in self._lines:
            self._lines[module] = (
                (self.root / module).read_text(encoding="utf-8", errors="replace").splitlines()
            )
        return self._lines[module]

    def _chunk_call(
        self, rng: random.Random, module: str | None = None, *, large: bool = False
    ) -> PlannedCall:
        factor = LARGE_OUTPUT_FACTOR if large else 1
        low, high = (factor * bound for bound in self.tokens_per_output)
        module = module or rng.choice(self.modules)
        start, end = self._line_range(rng, module, low, high)
        return PlannedCall(
            "read_source", {"path": module, "start_line": start + 1, "end_line": end}
        )

    def _line_range(self, rng: random.Random, module: str, low: int, high: int) -> tuple[int, int]:
        """[start, end) of numbered lines worth `low` to `high` tokens, from a seeded start."""
        lines = self._source_lines(module)
        start = rng.randrange(0, max(1, len(lines) - 200))
        end, tokens = start, 0
        while end < len(lines) and tokens < low:
            line_tokens = self.token_counter.count_text(f"{end + 1:5d}  {lines[end]}\n")
            if tokens + line_tokens > high and tokens > 0:
                break
            tokens += line_tokens
            end += 1
        return start, end

    def _outline(self, module: str) -> str:
        """Docstring head, imports and signatures of a module, within `handover_tokens`."""
        picked, tokens = [f"Module: {module}"], 0
        for line in self._source_lines(module):
            stripped = line.strip()
            if not stripped.startswith(("def ", "class ", "import ", "from ", "async def ")):
                continue
            line_tokens = self.token_counter.count_text(line)
            if tokens + line_tokens > self.handover_tokens:
                break
            picked.append(line.rstrip())
            tokens += line_tokens
        return "\n".join(picked)


def workload_tools(workload: CodeAnalysisWorkload) -> Sequence[Tool]:
    if not workload.tool_latency_s:
        return (read_source_tool(workload.root),)
    rng = random.Random(workload.seed + 7919)
    return (
        read_source_tool(workload.root, lambda: workload.tool_latency_s * rng.uniform(0.5, 1.5)),
    )
