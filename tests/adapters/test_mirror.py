"""HistoryMirror: the runtime's history always equals the mirror's view of it, whatever the
framework does with its own list (grow it, keep it after a commit, store the commit, edit it)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from lookahead_sdk.adapters._mirror import HistoryMirror
from lookahead_sdk.base.messages import Message


@dataclass(eq=False)  # identity matters: frameworks hand back the same objects, or copies
class Item:
    role: str
    text: str


def to_openai(item: Item) -> Message:
    return {"role": item.role, "content": item.text}


def from_openai(message: Message) -> Item:
    return Item(message["role"], message["content"])


def mirror() -> HistoryMirror[Item]:
    return HistoryMirror(to_openai, from_openai)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("grow"), st.integers(1, 3)),
        st.tuples(st.just("commit_kept"), st.integers(0, 5)),  # framework keeps its own list
        st.tuples(st.just("commit_stored"), st.integers(0, 5)),  # framework stores the commit
        st.tuples(st.just("copy"), st.integers(0, 5)),  # framework hands back copies
        st.tuples(st.just("edit"), st.integers(0, 5)),
    ),
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_runtime_history_always_equals_the_mirrored_view(ops: list[tuple[str, int]]) -> None:
    m = mirror()
    framework: list[Item] = [Item("system", "sys")]
    runtime: list[Message] = []
    counter = 0

    def sync() -> None:
        plan = m.plan(framework)
        if plan.replace is not None:
            runtime[:] = plan.replace
        else:
            runtime.extend(plan.append)
        assert runtime == [e.message for e in m.main]

    sync()
    for op, n in ops:
        if op == "grow":
            before = list(runtime)
            for _ in range(n):
                counter += 1
                framework.append(Item("tool" if counter % 2 else "assistant", f"m{counter}"))
            plan = m.plan(framework)
            assert plan.replace is None  # growing never loses the runtime's history
            assert plan.append == [to_openai(i) for i in framework[-n:]]
            runtime.extend(plan.append)
            assert runtime[: len(before)] == before
        elif op in ("commit_kept", "commit_stored"):
            keep = min(n, len(runtime))
            committed = (
                [
                    runtime[0],
                    {"role": "user", "content": f"summary {counter}"},
                    *runtime[len(runtime) - keep :],
                ]
                if runtime
                else []
            )
            items = m.adopt(committed)
            runtime[:] = committed
            assert [to_openai(i) for i in items] == committed
            if op == "commit_stored":
                framework = list(items)
        elif op == "copy":
            framework = [Item(i.role, i.text) for i in framework]
        elif op == "edit" and len(framework) > 1:
            index = 1 + n % (len(framework) - 1)
            framework[index] = Item(framework[index].role, framework[index].text + " edited")
        sync()


def test_a_commit_reuses_unchanged_items_and_builds_new_ones_once() -> None:
    m = mirror()
    items = [Item("system", "s"), Item("user", "u"), Item("tool", "same"), Item("tool", "same")]
    m.plan(items)
    committed = [
        to_openai(items[0]),
        {"role": "user", "content": "summary"},
        to_openai(items[2]),
        to_openai(items[3]),
    ]
    adopted = m.adopt(committed)
    assert adopted[0] is items[0]
    assert adopted[1] not in items and adopted[1].text == "summary"
    assert {id(adopted[2]), id(adopted[3])} == {
        id(items[2]),
        id(items[3]),
    }  # equal messages, each reused once
    assert m.diverged


def test_scratchpad_already_mirrored_is_not_added_twice() -> None:
    m = mirror()
    head, answer = [Item("system", "s"), Item("user", "q")], Item("assistant", "done")
    scratchpad = [Item("assistant", "call"), Item("tool", "out")]
    m.plan([*head, *scratchpad])
    assert m.stored([*scratchpad, answer], start=len(head)) == ([answer], [])
    copies = [Item(i.role, i.text) for i in scratchpad]
    assert m.stored([*copies, answer], start=len(head)) == ([answer], [])
    repeated_question = Item("user", "q")  # equal to a message before the scratchpad: still new
    new, uncovered = m.stored([repeated_question], start=len(head))
    assert new == [repeated_question] and [e.item for e in uncovered] == scratchpad


def test_a_scratchpad_stored_in_another_form_is_dropped_wherever_it_was_kept() -> None:
    m = mirror()
    head = [Item("system", "s"), Item("user", "q")]
    steps = [Item("assistant", "Thought: read"), Item("user", "Observation: out")]
    m.plan([*head, *steps])
    m.adopt([to_openai(head[0]), {"role": "user", "content": "summary"}, *map(to_openai, steps)])
    joined = Item("assistant", "Thought: read\nObservation: out")
    new, uncovered = m.stored([joined], start=len(head))
    assert new == [joined] and [e.item for e in uncovered] == steps
    remaining = m.drop(uncovered)
    assert remaining == [to_openai(head[0]), {"role": "user", "content": "summary"}]
    assert [e.item for e in m.seen] == head


def test_rebuilt_items_are_compared_by_content_and_only_they() -> None:
    """LlamaIndex rebuilds its memory messages per call and hands back the rest as they were:
    the rebuilt ones are matched by content, an edited one is still caught."""
    m = mirror()
    items = [Item("system", "s"), Item("user", "u"), *(Item("tool", f"t{i}") for i in range(50))]
    m.plan(items)
    rebuilt = [Item("system", "s"), Item("user", "u"), *items[2:], Item("tool", "new")]
    plan = m.plan(rebuilt)
    assert plan.replace is None and plan.append == [to_openai(rebuilt[-1])]
    edited = [*rebuilt[:10], Item("tool", "edited"), *rebuilt[11:]]
    assert m.plan(edited).replace is not None
