"""Source edits applied to the vendored llama.cpp before it is built: priority-aware batching.

Stock llama-server fills each batch by walking its slots in index order and samples a slot's first
token only when the whole batch is computed. A short latency-critical prompt (an agent's commit
turn, which a lookahead left with only its newest output to prefill) that arrives next to another
agent's long prompt waits for both. The edits make llama-server honour the request's
``priority_class`` tag (sent by ``lookahead_sdk.client.transport``) when it fills a batch:

- latency-critical prompts first, and among them the one with the fewest tokens left first;
- best-effort prompts (``"priority_class": "be"``) only fill batches that no latency-critical
  prompt is waiting for;
- a batch in which a latency-critical prompt ends is closed after it: its first token comes when
  the batch is computed, and a CPU computes a batch token by token, so other prompts' tokens
  there would only delay it. They go into the next batch; the split costs one batch's fixed
  time, ~9 ms here against ~2.5 ms per token (docs/scheduling.md, embedded profile).

With a small batch (``EngineConfig.batch_tokens``) a short prompt then waits for the batch
already running when it arrives and computes its own tokens, whatever else the engine is
prefilling. A best-effort request can ask for smaller batches still
(``"best_effort_batch_tokens": N``): its prompt goes into batches of at most N tokens, so a
latency-critical prompt arriving meanwhile waits for one of those (the client sizes N by time,
``client.slack.BatchSizer``). Requests without the tag are latency-critical, so untagged clients see llama.cpp's
usual behaviour, except that shorter prompts go first.

A batch holding best-effort prompt tokens and no latency-critical prompt token is aborted when
a latency-critical completion arrives: the queue's worker thread sees the task while the batch
computes, the CPU backend's abort callback stops the graph at its next node, llama.cpp drops the
failed ubatch's KV, and the batch's tokens are undone: a best-effort prompt's go back to it (the
request goes on later from its last computed batch), a decoding reply adds its last sampled
token again. The urgent prompt then waits for one graph node instead of a whole batch (128
tokens: 0.2-0.9 s on the development machine). A batch with a latency-critical prompt's tokens
is never aborted, nor one on a memory that needs checkpoints to roll back.

One edit fixes a llama.cpp bug that the SDK's slot pinning (``id_slot``) runs into: a request for
a busy slot went through the prompt-cache update before it was deferred, which saved the running
request's half-computed prompt and loaded another cached prompt into the busy slot. When the
loaded prompt was longer than the running one, that request never finished and the server spun
at full CPU (a small batch leaves many such windows, one per batch of a long prompt).

One edit skips a copy no one reads back. When a request takes a slot whose prompt it shares less
than half of, llama-server saves that prompt (the slot's whole KV state) into its RAM prompt
cache, in its main loop, while every slot waits: 0.5-0.8 s for a 57 MiB state beside 12 slots
on the development machine (docs/engine.md). A request with ``"discard_slot_prompt": true``
and an ``id_slot`` skips the save of that slot's prompt, still loading a cached prompt that
covers its own. The SDK sends it when it knows the slot holds a dead context: one its program
replaced by a committed transform (``client.llamacpp_slots.SlotPairs.retire``).

Each edit replaces one exact, unique snippet; a source that does not match fails the build with
the edit's name, never builds a half-patched binary. ``PATCH_ID`` changes whenever an edit does,
and the binaries are cached per ``PATCH_ID`` (``paths.bin_dir``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from lookahead_sdk.engine.errors import BuildError

# What the edited server logs per aborted batch, followed by ", N tokens undone"
# (read back by `engine.abort_log`).
ABORT_LOG_LINE = "best-effort batch aborted for a latency-critical task"


@dataclass(frozen=True)
class SourceEdit:
    name: str
    path: str  # relative to the llama.cpp source root
    old: str
    new: str


_TASK_FIELD = SourceEdit(
    name="task field best_effort",
    path="tools/server/server-task.h",
    old="    int id_slot   = -1;\n",
    new=(
        "    int id_slot   = -1;\n"
        '    bool best_effort = false; // lookahead-sdk: the request\'s "priority_class" is "be"\n'
        "    int best_effort_batch = 0; // lookahead-sdk: most tokens in a batch with its prompt\n"
        "    bool discard_slot_prompt = false; // lookahead-sdk: the id_slot's prompt is dead\n"
    ),
)

_CHILD_TASK_FIELD = SourceEdit(
    name="child tasks inherit best_effort",
    path="tools/server/server-task.h",
    old="        copy.id_slot   = -1; // child tasks cannot specify slot\n",
    new=(
        "        copy.id_slot   = -1; // child tasks cannot specify slot\n"
        "        copy.best_effort = best_effort;\n"
        "        copy.best_effort_batch = best_effort_batch;\n"
        "        copy.discard_slot_prompt = false; // it names no slot\n"
    ),
)

_PARSE_PRIORITY_CLASS = SourceEdit(
    name="parse priority_class",
    path="tools/server/server-context.cpp",
    old='            task.id_slot = json_value(data, "id_slot", -1);\n',
    new=(
        '            task.id_slot = json_value(data, "id_slot", -1);\n'
        '            task.best_effort = json_value(data, "priority_class", std::string("lc")) == "be";\n'
        '            task.best_effort_batch = json_value(data, "best_effort_batch_tokens", 0);\n'
        '            task.discard_slot_prompt = json_value(data, "discard_slot_prompt", false);\n'
    ),
)

_PROMPT_ORDER = SourceEdit(
    name="batch prompts by priority",
    path="tools/server/server-context.cpp",
    old=(
        "            bool add_ok = true; // false means the batch is full, skip remaining slots\n"
        "\n"
        "            iterate(slots, [&](server_slot & slot) {\n"
        "                if (!add_ok || batch.size() >= n_batch) {\n"
        "                    return; // batch is full, skip remaining slots\n"
        "                }\n"
    ),
    new=(
        "            bool add_ok = true; // false means the batch is full, skip remaining slots\n"
        "            bool lc_prompt_done = false; // a latency-critical prompt finishes in this batch\n"
        "\n"
        "            // lookahead-sdk: latency-critical prompts first, fewest tokens left first;\n"
        "            // best-effort prompts only fill a batch no latency-critical prompt waits for.\n"
        "            auto prompt_tokens_left = [](const server_slot & s) -> int {\n"
        "                if (!s.task || (s.state != SLOT_STATE_PROCESSING_PROMPT && s.state != SLOT_STATE_STARTED)) {\n"
        "                    return -1;\n"
        "                }\n"
        "                const int done = s.state == SLOT_STATE_STARTED\n"
        "                    ? (int) s.prompt.tokens.get_common_prefix(s.task->tokens)\n"
        "                    : s.prompt.n_tokens();\n"
        "                return std::max(0, s.task->n_tokens() - done);\n"
        "            };\n"
        "            struct prompt_rank { server_slot * slot; bool waiting; bool best_effort; int left; };\n"
        "            std::vector<prompt_rank> ranks;\n"
        "            bool lc_prompt_waiting = false;\n"
        "            for (auto & s : slots) {\n"
        "                const int left = prompt_tokens_left(s);\n"
        "                const bool best_effort = s.task && s.task->best_effort;\n"
        "                ranks.push_back({ &s, left >= 0, best_effort, left });\n"
        "                lc_prompt_waiting |= left >= 0 && !best_effort;\n"
        "            }\n"
        "            std::stable_sort(ranks.begin(), ranks.end(), [](const prompt_rank & a, const prompt_rank & b) {\n"
        "                if (a.waiting != b.waiting) return a.waiting;\n"
        "                if (a.best_effort != b.best_effort) return !a.best_effort;\n"
        "                return a.left < b.left;\n"
        "            });\n"
        "            std::vector<server_slot *> prompt_order;\n"
        "            for (const auto & r : ranks) {\n"
        "                if (!(lc_prompt_waiting && r.waiting && r.best_effort)) {\n"
        "                    prompt_order.push_back(r.slot);\n"
        "                }\n"
        "            }\n"
        "\n"
        "            iterate(prompt_order, [&](server_slot & slot) {\n"
        "                if (!add_ok || batch.size() >= n_batch || lc_prompt_done) {\n"
        "                    return; // batch is full, skip remaining slots\n"
        "                }\n"
    ),
)

_CLOSE_BATCH = SourceEdit(
    name="close the batch after a latency-critical prompt",
    path="tools/server/server-context.cpp",
    old=(
        "                        slot.state = SLOT_STATE_DONE_PROMPT;\n"
        "\n"
        "                        GGML_ASSERT(batch.size() > 0);\n"
    ),
    new=(
        "                        slot.state = SLOT_STATE_DONE_PROMPT;\n"
        "                        // lookahead-sdk: its first token comes when this batch is computed;\n"
        "                        // other prompts' tokens would only delay it (a CPU computes a batch\n"
        "                        // token by token), so they go into the next batch.\n"
        "                        lc_prompt_done = !slot.task->best_effort;\n"
        "\n"
        "                        GGML_ASSERT(batch.size() > 0);\n"
    ),
)

_BEST_EFFORT_BATCH = SourceEdit(
    name="small batches for best-effort prompts",
    path="tools/server/server-context.cpp",
    old=(
        "                    while (slot.prompt.n_tokens() < slot.task->n_tokens() && batch.size() < n_batch) {\n"
    ),
    new=(
        "                    // lookahead-sdk: a best-effort prompt asking for it goes in smaller\n"
        "                    // batches: a latency-critical prompt arriving meanwhile waits for one.\n"
        "                    const int32_t n_batch_slot = slot.task->best_effort && slot.task->best_effort_batch > 0\n"
        "                        ? std::min(n_batch, (int32_t) slot.task->best_effort_batch) : n_batch;\n"
        "                    while (slot.prompt.n_tokens() < slot.task->n_tokens() && batch.size() < n_batch_slot) {\n"
    ),
)

_BUSY_SLOT_KEEPS_ITS_PROMPT = SourceEdit(
    name="a busy slot requested by id keeps its prompt",
    path="tools/server/server-context.cpp",
    old=(
        '                SLT_INF(*ret, "selected slot by id (%d)\\n", task.id_slot);\n'
        "            }\n"
    ),
    new=(
        '                SLT_INF(*ret, "selected slot by id (%d)\\n", task.id_slot);\n'
        "                // lookahead-sdk: the caller defers a task for a busy slot. Without this\n"
        "                // return the prompt-cache update below saves and replaces the prompt of\n"
        "                // the request the slot is running, which then never finishes.\n"
        "                if (ret->is_processing()) {\n"
        "                    return ret;\n"
        "                }\n"
        "            }\n"
    ),
)

_DISCARD_DEAD_PROMPT = SourceEdit(
    name="a prompt the request marks dead is not saved",
    path="tools/server/server-context.cpp",
    old=(
        "                ret->prompt_save(*prompt_cache);\n"
        "\n"
        "                if (!ret->prompt_load(*prompt_cache, task.tokens)) {\n"
    ),
    new=(
        "                // lookahead-sdk: the requested slot holds a context its program replaced\n"
        "                // (the client knows, the server cannot): no request will load it back, and\n"
        "                // saving it copies the slot's whole KV state while every slot waits.\n"
        "                if (task.discard_slot_prompt && task.id_slot == ret->id) {\n"
        '                    SRV_TRC(" - discarding prompt with length %d, marked dead by the request\\n", (int) ret->prompt.tokens.size());\n'
        "                } else {\n"
        "                    ret->prompt_save(*prompt_cache);\n"
        "                }\n"
        "\n"
        "                if (!ret->prompt_load(*prompt_cache, task.tokens)) {\n"
    ),
)

_ABORT_STATE = SourceEdit(
    name="abort a best-effort batch: state",
    path="tools/server/server-context.cpp",
    old="    int n_empty_consecutive = 0;\n",
    new=(
        "    int n_empty_consecutive = 0;\n"
        "\n"
        "    // lookahead-sdk: a batch holding best-effort prompt tokens and no latency-critical prompt\n"
        "    // token is aborted when a latency-critical task arrives, so that the task waits for one\n"
        "    // graph node, not the batch.\n"
        "    bool batch_abortable = false;\n"
        "    bool batch_aborted   = false;\n"
        "    std::atomic<bool> lc_task_arrived{false}; // set by the queue's worker while decoding\n"
        "\n"
        "    static bool abort_best_effort_batch(void * data) {\n"
        "        const auto * ctx = static_cast<const server_context_impl *>(data);\n"
        "        return ctx->batch_abortable && ctx->lc_task_arrived.load(std::memory_order_relaxed);\n"
        "    }\n"
        "\n"
        "    // the batch's tokens from `off` on are undone (their KV with them): a prompt's go back to\n"
        "    // it, a decoding slot adds its last sampled token again; each slot goes on from where the\n"
        "    // last computed batch left it\n"
        "    void unbatch_best_effort_prompts(int32_t off) {\n"
        "        std::vector<int32_t> n_undone(slots.size(), 0);\n"
        "        for (int32_t i = off; i < batch.size(); ++i) {\n"
        "            n_undone.at(batch.tokens[i].id_slot)++;\n"
        "        }\n"
        "        for (size_t id = 0; id < slots.size(); ++id) {\n"
        "            if (n_undone[id] == 0) {\n"
        "                continue;\n"
        "            }\n"
        "            auto & slot = slots[id];\n"
        "            const int32_t n_keep = slot.prompt.n_tokens() - n_undone[id];\n"
        "            slot.prompt.tokens.keep_first(n_keep);\n"
        "            llama_memory_seq_rm(llama_get_memory(ctx_tgt), slot.id, n_keep, -1);\n"
        "            if (slot.state != SLOT_STATE_GENERATING) {\n"
        "                slot.state = SLOT_STATE_PROCESSING_PROMPT;\n"
        "            }\n"
        "            slot.i_batch = -1;\n"
        "        }\n"
        f'        SRV_INF("{ABORT_LOG_LINE}, %d tokens undone\\n", batch.size() - off);\n'
        "    }\n"
    ),
)

_ABORT_SIGNAL = SourceEdit(
    name="abort a best-effort batch: a latency-critical task arrives",
    path="tools/server/server-context.cpp",
    old=(
        '            SRV_DBG("decoding, decline task, id_task = %d\\n", task.id);\n'
        "            return false;\n"
    ),
    new=(
        '            SRV_DBG("decoding, decline task, id_task = %d\\n", task.id);\n'
        "            // lookahead-sdk: a latency-critical completion a free slot can take aborts a\n"
        "            // batch of best-effort prompt tokens only (abort_best_effort_batch)\n"
        "            if (task.type == SERVER_TASK_TYPE_COMPLETION && !task.best_effort &&\n"
        "                    (task.id_slot < 0 || task.id_slot >= (int) slots.size() || !slots[task.id_slot].is_processing())) {\n"
        "                lc_task_arrived.store(true, std::memory_order_relaxed);\n"
        "            }\n"
        "            return false;\n"
    ),
)

_ABORT_WHICH_BATCH = SourceEdit(
    name="abort a best-effort batch: which batch",
    path="tools/server/server-context.cpp",
    old="        int32_t off_next = 0;\n",
    new=(
        "        // lookahead-sdk: a batch is aborted when it holds best-effort prompt tokens and no\n"
        "        // latency-critical prompt token (decoding slots' tokens are undone and added again),\n"
        "        // on a memory that can drop a sequence's tail (no checkpoints to keep)\n"
        "        lc_task_arrived.store(false, std::memory_order_relaxed);\n"
        "        batch_aborted = false;\n"
        "        bool batch_best_effort_prompt = false;\n"
        "        batch_abortable = !batch.has_embd && !spec && n_swa == 0 &&\n"
        "            ctx_tgt_seq_rm_type == COMMON_CONTEXT_SEQ_RM_TYPE_PART;\n"
        "        for (int32_t i = 0; batch_abortable && i < batch.size(); ++i) {\n"
        "            const auto & slot = slots.at(batch.tokens[i].id_slot);\n"
        "            const bool best_effort = slot.task && slot.task->best_effort;\n"
        "            batch_best_effort_prompt |= batch.tokens[i].is_prompt && best_effort;\n"
        "            batch_abortable = slot.task && slot.task->type == SERVER_TASK_TYPE_COMPLETION &&\n"
        "                !slot.task->is_parent() && (best_effort || !batch.tokens[i].is_prompt);\n"
        "        }\n"
        "        batch_abortable = batch_abortable && batch_best_effort_prompt;\n"
        "\n"
        "        int32_t off_next = 0;\n"
    ),
)

_ABORT_STOPS_THE_UPDATE = SourceEdit(
    name="abort a best-effort batch: back to the task queue",
    path="tools/server/server-context.cpp",
    old=(
        "                } else {\n"
        "                    // try again with the updated n_batch\n"
        "                    continue;\n"
        "                }\n"
    ),
    new=(
        "                } else if (batch_aborted) {\n"
        "                    break; // lookahead-sdk: back to the task queue, the urgent task first\n"
        "                } else {\n"
        "                    // try again with the updated n_batch\n"
        "                    continue;\n"
        "                }\n"
    ),
)

_ABORT_CALLBACK = SourceEdit(
    name="abort a best-effort batch: the callback",
    path="tools/server/server-context.cpp",
    old=(
        "        int ret = 0;\n"
        "        queue_tasks.yield_to_queue([&]() {\n"
        "            ret = llama_process(ctx_tgt, LLAMA_PROCESS_TYPE_DECODE, batch.view.get());\n"
    ),
    new=(
        "        int ret = 0;\n"
        "        llama_set_abort_callback(ctx_tgt, abort_best_effort_batch, this); // lookahead-sdk\n"
        "        queue_tasks.yield_to_queue([&]() {\n"
        "            ret = llama_process(ctx_tgt, LLAMA_PROCESS_TYPE_DECODE, batch.view.get());\n"
    ),
)

_ABORT_HANDLED = SourceEdit(
    name="abort a best-effort batch: undo it",
    path="tools/server/server-context.cpp",
    old="                // TODO: handle ret == 2 (abort) when we start aborting\n",
    new=(
        "                // lookahead-sdk: a best-effort batch aborted for a latency-critical task; the\n"
        "                // failed ubatch's KV is already removed, the prompts go back to before it\n"
        "                if (ret == 2 && batch_abortable) {\n"
        "                    unbatch_best_effort_prompts(off);\n"
        "                    batch_aborted = true;\n"
        "                    return false;\n"
        "                }\n"
    ),
)

_ATOMIC_INCLUDE = SourceEdit(
    name="abort a best-effort batch: <atomic>",
    path="tools/server/server-context.cpp",
    old="#include <algorithm>\n",
    new="#include <algorithm>\n#include <atomic>\n",
)

EDITS: tuple[SourceEdit, ...] = (
    _TASK_FIELD,
    _CHILD_TASK_FIELD,
    _PARSE_PRIORITY_CLASS,
    _PROMPT_ORDER,
    _CLOSE_BATCH,
    _BEST_EFFORT_BATCH,
    _BUSY_SLOT_KEEPS_ITS_PROMPT,
    _DISCARD_DEAD_PROMPT,
    _ATOMIC_INCLUDE,
    _ABORT_STATE,
    _ABORT_SIGNAL,
    _ABORT_WHICH_BATCH,
    _ABORT_STOPS_THE_UPDATE,
    _ABORT_CALLBACK,
    _ABORT_HANDLED,
)


def patch_id(edits: tuple[SourceEdit, ...]) -> str:
    """A short digest of the edits: the binaries' cache key."""
    text = "".join(f"{edit.path}\0{edit.old}\0{edit.new}\0" for edit in edits)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


PATCH_ID: str = patch_id(EDITS)


def apply_edits(source_dir: Path, edits: tuple[SourceEdit, ...] = EDITS) -> None:
    """Apply every edit to the llama.cpp tree at ``source_dir``; all or none.

    Raises BuildError naming the edit when its snippet is missing or not unique (the pinned
    llama.cpp changed): every file is checked before any is written.
    """
    patched: dict[Path, str] = {}
    for edit in edits:
        file = source_dir / edit.path
        if file not in patched:
            if not file.is_file():
                raise BuildError(
                    f"llama.cpp source edit {edit.name!r}: {edit.path} is missing from "
                    f"{source_dir}; the vendored llama.cpp does not match the pinned version"
                )
            patched[file] = file.read_text()
        count = patched[file].count(edit.old)
        if count != 1:
            raise BuildError(
                f"llama.cpp source edit {edit.name!r}: expected its snippet once in {edit.path}, "
                f"found it {count} times; the vendored llama.cpp does not match the pinned "
                "version (update lookahead_sdk/engine/patches.py)"
            )
        patched[file] = patched[file].replace(edit.old, edit.new)
    for file, text in patched.items():
        file.write_text(text)
