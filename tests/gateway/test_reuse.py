"""Parsing, projecting, rendering and serialising only what changed (reuse.py,
`Renders`, `project`, sent.py): the cached path gives what a fresh parse, a
full walk, a full render and a whole serialisation give, whatever the host
does to its history between calls (in process, no server)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any
from unittest.mock import patch

import orjson
from ctxopt.api.gateway.app import wire_format
from ctxopt.api.gateway.formats.aider import host_marks
from ctxopt.api.gateway.formats.anthropic import AnthropicMessages
from ctxopt.api.gateway.formats.conversation import Conversation, Edit, HostMarks, Renders
from ctxopt.api.gateway.pipeline import Pipeline
from ctxopt.api.gateway.projection import Call, Projection, project
from ctxopt.api.gateway.reuse import Bodies
from ctxopt.api.gateway.sent import Sent
from ctxopt.api.gateway.state import ConversationState
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import Action
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.gateway.histories import Step, Trajectory, request

ROUTES = {
    "anthropic": ("anthropic", "v1/messages"),
    "openai-chat": ("openai", "v1/chat/completions"),
    "openai-responses": ("openai", "v1/responses"),
    "gemini": ("gemini", "v1beta/models/gemini-2.5-pro:generateContent"),
}
SLOT = ("", "ns", "anthropic", "s")


def messages(n: int, text: str = "output") -> list[dict[str, Any]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f'{text} {i} "q" \\ [,]'}
        for i in range(n)
    ]


def raw_of(items: list[dict[str, Any]], **extra: Any) -> bytes:
    return orjson.dumps({"model": "m", "messages": items, **extra})


def test_a_resent_prefix_is_handed_over_as_the_same_objects() -> None:
    bodies = Bodies()
    first = bodies.parse(raw_of(messages(6)), "messages", SLOT)
    later = bodies.parse(raw_of(messages(8), stream=True), "messages", SLOT)
    assert later == orjson.loads(raw_of(messages(8), stream=True))
    assert all(a is b for a, b in zip(first["messages"], later["messages"][:6], strict=True))


def test_an_edited_earlier_message_is_parsed_again_and_what_follows_it() -> None:
    bodies = Bodies()
    first = bodies.parse(raw_of(messages(6)), "messages", SLOT)
    edited = messages(7)
    edited[2] = {**edited[2], "content": edited[2]["content"].replace("output", "OUTPUT")}
    later = bodies.parse(raw_of(edited), "messages", SLOT)
    assert later["messages"] == edited
    assert all(a is b for a, b in zip(first["messages"][:2], later["messages"], strict=False))
    rest = zip(first["messages"][2:], later["messages"][2:6], strict=True)
    assert not any(a is b for a, b in rest)


def test_a_list_key_given_twice_is_read_as_the_parser_reads_it() -> None:
    bodies = Bodies()
    bodies.parse(raw_of(messages(4)), "messages", SLOT)
    twice = raw_of(messages(4))[:-1] + b',"messages":[{"role":"user","content":"last"}]}'
    assert bodies.parse(twice, "messages", SLOT) == orjson.loads(twice)


def test_conversations_sharing_a_slot_each_find_their_own_last_body() -> None:
    bodies = Bodies()
    one, other = messages(5, "one"), messages(5, "other")
    parsed = {
        name: bodies.parse(raw_of(m), "messages", SLOT) for name, m in (("1", one), ("2", other))
    }
    later = bodies.parse(raw_of(messages(6, "one")), "messages", SLOT)
    assert later["messages"][0] is parsed["1"]["messages"][0]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["grow", "edit", "reformat", "key"]),
            st.integers(0, 40),
            st.text(alphabet='ab"\\,[]{} \n\u00e9', max_size=12),
        ),
        min_size=1,
        max_size=10,
    )
)
@settings(max_examples=200, deadline=None)
def test_a_spliced_parse_equals_a_fresh_parse_over_any_edits(
    steps: list[tuple[str, int, str]],
) -> None:
    bodies = Bodies(per_slot=2)
    items = messages(3)
    extra: dict[str, Any] = {}
    style = 0
    for op, at, text in steps:
        if op == "grow":
            items = [*items, {"role": "user", "content": [{"type": "text", "text": text}]}]
        elif op == "edit":
            items = [*items]
            items[at % len(items)] = {"role": "assistant", "content": text}
        elif op == "reformat":
            style = (style + 1) % 3
        else:
            extra = {**extra, f"k{at % 3}": text}
        body = {"model": "m", "messages": items, **extra}
        raw = written(body, style)
        assert bodies.parse(raw, "messages", SLOT) == orjson.loads(raw)


def written(body: dict[str, Any], style: int) -> bytes:
    """Compact JSON, indented, or compact with escapes the parser would not write."""
    if style == 1:
        return json.dumps(body, indent=1).encode()
    compact = orjson.dumps(body)
    return compact.replace("\u00e9".encode(), b"\\u00e9") if style == 2 else compact


def test_a_message_rendering_is_reused_only_for_the_same_message_under_equal_edits() -> None:
    fmt = AnthropicMessages()
    result = {"type": "tool_result", "tool_use_id": "t", "content": "a long log"}
    call = {"type": "tool_use", "id": "t", "name": "read", "input": {}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result]},
    ]
    body: dict[str, Any] = {"model": "m", "messages": messages}
    conversation = fmt.parse(body, "", None)
    assert conversation is not None
    edits = {(2, 0): Edit("[stashed]")}
    first = fmt.render(body, conversation, edits, frozenset())["messages"][2]
    again = fmt.render(body, conversation, {(2, 0): Edit("[stashed]")}, frozenset())["messages"][2]
    assert again is first
    changed = fmt.render(body, conversation, {(2, 0): Edit("[masked]")}, frozenset())
    assert changed["messages"][2]["content"][0]["content"] == "[masked]"
    copy = {**body, "messages": [*messages[:2], {**messages[2]}]}
    other = fmt.render(copy, conversation, edits, frozenset())["messages"][2]
    assert other is not first and other == first
    assert messages[2]["content"][0] is result  # the input is untouched


@contextmanager
def uncached() -> Iterator[None]:
    """Every body parsed whole, every turn projected and marked, every message
    rendered and serialised again."""

    def whole(_self: Bodies, raw: bytes, key: str, slot: tuple[str, ...]) -> Any:
        return orjson.loads(raw)

    def dumped(_self: Sent, _conversation: Any, body: dict[str, Any], _key: str) -> bytes:
        return orjson.dumps(body)

    def walked(call: Call, decided: Any, _previous: Any) -> Projection:
        return project(call, decided, None)

    def read(conversation: Conversation) -> HostMarks:
        return host_marks(replace(conversation, marks=HostMarks()))

    def returnable(state: ConversationState) -> list[str]:
        return [i for i, d in state.decisions.items() if d.action != Action.DELETE]

    with (
        patch.object(Bodies, "parse", whole),
        patch.object(Renders, "get", lambda *_args: None),
        patch.object(Renders, "resumed", lambda *_args: ([], [], 0)),
        patch.object(Sent, "dump", dumped),
        patch("ctxopt.api.gateway.pipeline.project", walked),
        patch("ctxopt.api.gateway.formats.aider.host_marks", read),
        patch.object(ConversationState, "returnable", property(returnable)),
    ):
        yield


def output(i: int, size: int) -> str:
    return "\n".join(f"line {k} of output {i}: value {k * i}" for k in range(size))


@given(
    st.sampled_from(sorted(ROUTES)),
    st.lists(
        st.tuples(
            st.sampled_from(["grow", "grow", "edit", "reformat", "shrink"]), st.integers(0, 30)
        ),
        min_size=2,
        max_size=7,
    ),
    st.sampled_from([1500, 3000, 0]),
)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_forwarded_body_is_byte_identical_to_the_uncached_path(
    fmt_name: str, ops: list[tuple[str, int]], window: int
) -> None:
    """Two pipelines, the same calls: one parses and renders only what changed,
    the other everything; what goes upstream is the same bytes, call after call,
    while the host grows, edits earlier outputs (in place: the body keeps its
    length) and reformats its JSON, and the window shrinks (collections change
    the decisions that stuck); 0: the model's own window, nothing collected."""
    prefix, path = ROUTES[fmt_name]
    fmt = wire_format(prefix, path)
    assert fmt is not None
    cached, fresh = (
        Pipeline(Engine(replace(Config(data_dir=":memory:"))), Config()) for _ in range(2)
    )
    steps = [Step(f"look {i}", f"cat f{i}", output(i, 20 + 7 * i)) for i in range(40)]
    shown, pretty = 4, False
    for op, at in ops:
        if op == "grow":
            shown += 1
        elif op == "edit":
            k = at % shown
            steps[k] = replace(steps[k], output=steps[k].output.replace("line", "LINE", 1))
        elif op == "shrink":
            window = window * 2 // 3
        else:
            pretty = not pretty
        headers = {"x-ctxopt-session": "s"}
        if window:
            headers["x-ctxopt-window-tokens"] = str(window)
        body = request(fmt_name, Trajectory("t", "system", "task", tuple(steps)), shown)
        raw = json.dumps(body, indent=2).encode() if pretty else orjson.dumps(body)
        got = cached.prepare(fmt, path, raw, headers, "")
        with uncached():
            want = fresh.prepare(fmt, path, raw, headers, "")
        assert (got.outcome, got.tokens_before, got.tokens_after) == (
            want.outcome,
            want.tokens_before,
            want.tokens_after,
        )
        assert got.body == want.body
