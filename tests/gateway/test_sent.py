"""What a call reuses of the last one beyond the parse (in process, no server):
the bytes of the list elements sent before (sent.py), the rendered messages
of a resumed render (`Renders`, `Resume`), the projection of the leading
turns (`project`) and aider's marks (`host_marks`); each gives what the
whole computation gives."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
from ctxopt.api.gateway.formats.aider import host_marks
from ctxopt.api.gateway.formats.anthropic import AnthropicMessages
from ctxopt.api.gateway.formats.conversation import Edit, HostMarks, Resume
from ctxopt.api.gateway.formats.openai_chat import OpenAIChat
from ctxopt.api.gateway.projection import Call, project
from ctxopt.api.gateway.sent import dump

from tests.gateway.test_aider import aider_body
from tests.test_gateway_pipeline import FORMAT, body, history, pipeline, send

MARKER = {"type": "ephemeral"}


def message(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}


def test_the_elements_written_last_time_are_copied_not_serialised_again() -> None:
    items = [message(i) for i in range(4)]
    first = dump({"model": "m", "messages": items, "stream": False}, "messages", None)
    assert first.raw == orjson.dumps({"model": "m", "messages": items, "stream": False})
    items[1]["content"] = "changed in place"  # what no caller may do: it shows the copy
    grown = [*items, message(4)]
    second = dump({"model": "m", "messages": grown, "stream": False}, "messages", first)
    assert b"message 1" in second.raw and b"changed in place" not in second.raw
    assert second.raw.startswith(first.raw[: first.ends[-1]])


def test_a_body_is_written_as_the_parser_writes_it_whatever_changed() -> None:
    items = [message(i) for i in range(5)]
    bodies: list[dict[str, Any]] = [
        {"model": "m", "messages": items},
        {"model": "m", "messages": [*items, message(5)]},  # grown
        {"model": "m", "messages": [items[0], message(9), *items[2:]]},  # one replaced
        {"model": "other", "messages": items},  # what comes before the list changed
        {"model": "other", "messages": items[:2]},  # shrunk
        {"model": "other", "messages": []},
        {"model": "other"},  # no list
        {"messages": items, "model": "last"},  # the list first
    ]
    previous = None
    for current in bodies:
        previous = dump(current, "messages", previous)
        assert previous.raw == orjson.dumps(current)


def test_a_resumed_render_equals_a_full_one() -> None:
    fmt = OpenAIChat()
    items = [message(i) for i in range(6)]
    current = {"model": "gpt-4o", "messages": items}
    conversation = fmt.parse(current, "", None)
    assert conversation is not None
    edits = {(1, -1): Edit("[shrunk]"), (3, -1): Edit("[shrunk]")}
    fmt.render(current, conversation, edits, frozenset(), Resume(0))
    grown = {"model": "gpt-4o", "messages": [*items, message(6)]}
    later = {**edits, (5, -1): Edit("[shrunk]")}  # message 5's edits changed: 5 stable
    resumed = fmt.render(grown, conversation, later, frozenset(), Resume(5))
    assert resumed == fmt.render(grown, conversation, later, frozenset())
    assert resumed["messages"][3]["content"] == "[shrunk]"


def test_a_marker_a_later_message_moved_back_is_not_resumed() -> None:
    """Anthropic: a dropped block's cache marker moves to the last kept block
    before it, in an earlier message; when that later message keeps its block
    on the next call, the earlier one goes without the marker again."""
    fmt = AnthropicMessages()
    items: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "task"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "looking"}]},
        {"role": "user", "content": [{"type": "text", "text": "more"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "aside", "cache_control": MARKER},
                {"type": "text", "text": "answer"},
            ],
        },
    ]
    current = {"model": "claude-sonnet-4-6", "messages": items}
    conversation = fmt.parse(current, "", None)
    assert conversation is not None
    first = fmt.render(current, conversation, {(3, 0): Edit(None)}, frozenset(), Resume(0))
    assert first["messages"][2]["content"][0]["cache_control"] == MARKER
    grown = {**current, "messages": [*items, {"role": "user", "content": "go on"}]}
    # messages 0-2 carry the edits they carried (none); message 3's changed
    again = fmt.render(grown, conversation, {}, frozenset(), Resume(3))
    assert again == fmt.render(grown, conversation, {}, frozenset())
    assert "cache_control" not in again["messages"][2]["content"][0]


def test_a_projection_taken_over_from_the_last_call_equals_a_full_walk() -> None:
    """Also when the protected turns move back over a turn with edits: that turn
    is walked again, protected now."""
    gateway = pipeline()
    messages = history(20)
    send(gateway, body(messages))
    state = send(gateway, body(messages)).state  # every turn reused
    assert state is not None and state.conversation is not None
    assert state.projection is not None
    conversation = state.conversation
    edited = min(ref[0] for ref in state.projection.edits)
    call = Call(
        FORMAT,
        orjson.loads(body(messages)),
        conversation,
        state.turn_ids,
        state.projection.protected | {edited},
        0,
        6000,
        state.tokens,
    )
    taken = project(call, state, state.projection)
    walked = project(call, state, None)
    assert list(taken.edits.items()) == list(walked.edits.items())
    assert not any(ref[0] == edited for ref in taken.edits)
    assert (taken.tokens_after, taken.engine_tokens, taken.tokens_before) == (
        walked.tokens_after,
        walked.engine_tokens,
        walked.tokens_before,
    )


def test_aiders_marks_carried_from_the_last_call_equal_a_fresh_read() -> None:
    fmt = OpenAIChat()
    exchange = [("user", "fix it"), ("assistant", "looking")]
    current = aider_body("fix the bug", {"a.py": "x = 1\n"}, exchange)
    earlier = fmt.parse(current, "", None)
    assert earlier is not None
    longer = {**current, "messages": [*current["messages"], {"role": "user", "content": "and?"}]}
    conversation = fmt.parse(longer, "", earlier)
    assert conversation is not None and conversation.reused > 0
    fresh = host_marks(replace(conversation, marks=HostMarks()))
    assert conversation.marks == fresh and fresh.examples_end >= 0 and fresh.working


def test_a_resumed_render_takes_over_only_the_same_message_objects() -> None:
    """The caller vouches for the edits; a message the host sent again as another
    object (here with its keys in another order) is rendered again."""
    fmt = OpenAIChat()
    items = [message(i) for i in range(4)]
    current = {"model": "gpt-4o", "messages": items}
    conversation = fmt.parse(current, "", None)
    assert conversation is not None
    fmt.render(current, conversation, {}, frozenset(), Resume(0))
    reordered = {"content": items[1]["content"], "role": items[1]["role"]}
    again = {"model": "gpt-4o", "messages": [items[0], reordered, *items[2:]]}
    resumed = fmt.render(again, conversation, {}, frozenset(), Resume(4))
    assert resumed["messages"][1] is reordered
    assert orjson.dumps(resumed) == orjson.dumps(fmt.render(again, conversation, {}, frozenset()))
