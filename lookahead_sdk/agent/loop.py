"""The reference agent loop: model turn, tool calls, segment boundary; the runtime does the rest."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from lookahead_sdk.agent.workload import Delegation, PlannedCall, Step
from lookahead_sdk.base.completion import ChatResult, OpenAICompletionClient
from lookahead_sdk.base.messages import Message
from lookahead_sdk.base.tags import current_tags, use_tags
from lookahead_sdk.base.tokens import count_message
from lookahead_sdk.base.tools import ToolRegistry
from lookahead_sdk.core.config import RuntimeConfig
from lookahead_sdk.core.policy import ContextPolicy, resolve_policy
from lookahead_sdk.core.runtime import CommitKind, CommitOutcome, LookaheadRuntime, RuntimeStats
from lookahead_sdk.core.warmer import RequestShape


@dataclass(frozen=True)
class TurnRecord:
    agent: str  # "main" or "sub"
    step: int
    ttft_s: float  # from wanting to call the model (commit included) to its first token
    commit: CommitKind
    context_tokens: int
    prompt_tokens: int
    cached_tokens: int
    # Tokens the agent's history gained since its previous model call (the reply and the tool
    # outputs; a sub-agent's first call: its whole context): what the turn brings that is new in
    # either mode, so transform turns can be compared with normal turns of the same size.
    new_tokens: int = 0
    # For a hit: tokens of the committed context no completed warm-up covered, and whether no
    # warm-up had completed at all (a cold hit).
    unwarmed_tokens: int | None = None
    cold_hit: bool = False
    total_s: float = 0.0  # from wanting to call the model to its last token
    # Where the TTFT went (perf_counter stamps, 0.0: not known): wanting to call the model
    # (`started_at`), the request going out after the commit (`sent_at`), its first token.
    started_at: float = 0.0
    sent_at: float = 0.0
    first_token_at: float = 0.0
    program_id: str | None = None

    @property
    def is_transform_turn(self) -> bool:
        return self.commit is not CommitKind.NONE


@dataclass
class AgentRun:
    turns: list[TurnRecord] = field(default_factory=list)
    stats: RuntimeStats = field(default_factory=RuntimeStats)
    messages: list[Message] = field(default_factory=list)
    history_tokens_at_last_call: int = 0  # the main history's size when its last call was sent
    lookahead_turns: list[float] = field(default_factory=list)  # `lookahead_turns_timed`


def tool_message(call: dict[str, Any], content: str) -> Message:
    return {"role": "tool", "tool_call_id": call["id"], "content": content}


def planned_tool_call(call: PlannedCall, call_id: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
    }


@dataclass
class ReferenceAgent:
    """A small async agent. With a `plan`, tool calls come from the workload (reproducible runs);
    without one, from the model's own tool calls."""

    llm: OpenAICompletionClient
    tools: ToolRegistry
    policy: ContextPolicy | None = None
    # The runtime's settings; its summarizer defaults to `llm`, its request shape to llm's model
    # (with the tools when `send_tools`).
    config: RuntimeConfig = field(default_factory=RuntimeConfig)
    max_tokens: int = 48
    instruction_tokens: int = 80
    send_tools: bool = False
    on_turn: Callable[[TurnRecord], None] | None = None

    default_context_policy: ClassVar[ContextPolicy | None] = None

    def with_context_policy(self, policy: ContextPolicy) -> ReferenceAgent:
        return replace(self, policy=policy)

    def new_runtime(self, messages: Sequence[Message]) -> LookaheadRuntime:
        policy = resolve_policy(self.policy, self)
        if policy is None:
            raise ValueError(
                "ReferenceAgent needs a context policy: policy=... or @context_policy(...)"
            )
        overrides: dict[str, Any] = {}
        if self.config.summarizer is None:
            overrides["summarizer"] = self.llm
        if self.config.shape is None:
            tools = tuple(self.tools.schemas()) if self.send_tools else None
            overrides["shape"] = RequestShape(self.llm.model, tools)
        return LookaheadRuntime(policy, self.config, messages=messages, **overrides)

    async def run(
        self, system: str, task: str, *, plan: Sequence[Step] | None = None, max_steps: int = 50
    ) -> AgentRun:
        record = AgentRun()
        async with self.new_runtime(
            [{"role": "system", "content": system}, {"role": "user", "content": task}]
        ) as runtime:
            steps = len(plan) if plan is not None else max_steps
            for step in range(steps):
                # The step limit bounds the run: no lookahead starts that it would end before.
                runtime.model_calls_left = steps - step - 1
                planned = plan[step] if plan is not None else None
                if isinstance(planned, Delegation):
                    await self._delegate(runtime, planned, step, record)
                    continue
                result = await self._model_turn(runtime, "main", step, record)
                calls = (
                    [planned_tool_call(planned, f"call_{step}")]
                    if planned
                    else result.message.get("tool_calls", [])
                )
                runtime.append({**result.message, "tool_calls": calls} if calls else result.message)
                if not calls:
                    break
                # The model's turn is a segment too: a ready lookahead warms it while the tools run,
                # so the commit turn prefills only the newest tool output.
                await runtime.boundary()
                for call in calls:
                    output = await self.tools.call(
                        call["function"]["name"], call["function"]["arguments"]
                    )
                    runtime.append(tool_message(call, output))
                await runtime.boundary()
            record.stats, record.messages = runtime.stats, list(runtime.main.messages)
            record.lookahead_turns = list(runtime.lookahead_turns_timed)
        return record

    async def _model_turn(
        self,
        runtime: LookaheadRuntime,
        agent: str,
        step: int,
        record: AgentRun,
        *,
        stream_tool: str | None = None,
    ) -> ChatResult:
        started = time.perf_counter()
        new_tokens = runtime.main.tokens - record.history_tokens_at_last_call
        outcome = None if runtime.spawns_subagents else await runtime.commit()
        messages = outcome.messages if outcome else list(runtime.main.messages)
        record.history_tokens_at_last_call = runtime.main.tokens

        async def on_delta(text: str, tool_name: str | None) -> None:
            await runtime.stream_boundary(text, tool_name=tool_name or stream_tool)

        streaming = runtime.spawns_subagents and runtime.mode == "lookahead"
        if streaming and stream_tool:
            # The tool is known before its arguments stream (a tool-calling model streams the
            # name first): its context is prefilled from here, even if no argument text follows.
            await runtime.stream_boundary("", tool_name=stream_tool)
        result = await self.llm.chat(
            messages,
            max_tokens=self.instruction_tokens if stream_tool else self.max_tokens,
            tools=runtime.shape.tools,
            on_delta=on_delta if streaming else None,
            started_at=started,
        )
        self._record(record, agent, step, result, outcome, runtime.main.tokens, new_tokens)
        return result

    async def _delegate(
        self, runtime: LookaheadRuntime, delegation: Delegation, step: int, record: AgentRun
    ) -> None:
        runtime.append({"role": "user", "content": delegation.prompt})
        result = await self._model_turn(runtime, "main", step, record, stream_tool="delegate")
        written = result.message.get("content") or ""
        # A model that wrote no instruction delegates the request itself (Isolate rejects an
        # empty instruction).
        instruction = written if written.strip() else delegation.prompt
        call = planned_tool_call(
            PlannedCall("delegate", {"instruction": instruction}), f"call_{step}"
        )
        runtime.append({"role": "assistant", "content": None, "tool_calls": [call]})
        started = time.perf_counter()
        outcome = await runtime.commit()
        parent = current_tags()
        child = replace(parent, program_id=f"{parent.program_id}/sub{step}") if parent else None
        if child:  # the sub-agent runs in the slot its context was warmed in
            await runtime.hand_over(child.program_id or "", outcome.messages)
        try:
            with use_tags(child):  # the sub-agent is its own program, with its own context
                answer = await self._run_subagent(
                    runtime, outcome, delegation, step, started, record
                )
        finally:
            if child:
                runtime.subagent_ended(child.program_id or "")
        runtime.append(tool_message(call, answer))
        await runtime.boundary()

    async def _run_subagent(
        self,
        runtime: LookaheadRuntime,
        spawned: CommitOutcome,
        delegation: Delegation,
        step: int,
        started: float,
        record: AgentRun,
    ) -> str:
        messages, new = list(spawned.messages), list(spawned.messages)
        for index, planned in enumerate([*delegation.subagent_calls, None]):
            result = await self.llm.chat(messages, max_tokens=self.max_tokens, started_at=started)
            new_tokens = sum(count_message(runtime.main.token_counter, m) for m in new)
            first = spawned if index == 0 else None
            self._record(record, "sub", step, result, first, 0, new_tokens)
            if planned is None:
                return result.message.get("content") or ""
            call = planned_tool_call(planned, f"sub_{step}_{index}")
            new = [
                {**result.message, "tool_calls": [call]},
                tool_message(call, await self.tools.call(planned.name, planned.arguments)),
            ]
            messages += new
            started = time.perf_counter()
        return ""

    def _record(
        self,
        record: AgentRun,
        agent: str,
        step: int,
        result: ChatResult,
        outcome: CommitOutcome | None,
        context_tokens: int,
        new_tokens: int,
    ) -> None:
        turn = TurnRecord(
            agent=agent,
            step=step,
            ttft_s=result.ttft_s,
            total_s=result.total_s,
            commit=outcome.kind if outcome is not None else CommitKind.NONE,
            context_tokens=context_tokens,
            prompt_tokens=result.prompt_tokens,
            cached_tokens=result.cached_tokens,
            new_tokens=new_tokens,
            unwarmed_tokens=outcome.unwarmed_tokens if outcome is not None else None,
            cold_hit=outcome is not None and outcome.cold,
            started_at=result.first_token_at - result.ttft_s if result.first_token_at else 0.0,
            sent_at=result.sent_at,
            first_token_at=result.first_token_at,
            program_id=tags.program_id if (tags := current_tags()) else None,
        )
        record.turns.append(turn)
        if self.on_turn is not None:
            self.on_turn(turn)
