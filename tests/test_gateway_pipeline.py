"""The gateway pipeline in process (an in-memory engine, no server, no SDK):
when it collects, what sticks between calls, how its state stays consistent,
and its pure parts (projection, truncation, calibration)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
from ctxopt.api.gateway.formats.anthropic import AnthropicMessages
from ctxopt.api.gateway.formats.conversation import Edit, chunk_id, first_prompt, latest_turns
from ctxopt.api.gateway.pipeline import Pipeline
from ctxopt.api.gateway.prepared import Outcome, Prepared
from ctxopt.api.gateway.projection import Call, Projection, project
from ctxopt.api.gateway.state import Calibration
from ctxopt.api.gateway.truncation import truncate
from ctxopt.config import Config
from ctxopt.engine import Engine

FORMAT = AnthropicMessages()
PATH = "v1/messages"
WINDOW = {"x-ctxopt-window-tokens": "6000"}


def history(exchanges: int, lines: int = 400) -> list[dict[str, Any]]:
    """A task, `exchanges` tool calls each answered by a long log, then a question."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "task: read the logs"}]
    for i in range(exchanges):
        call = {"type": "tool_use", "id": f"t{i}", "name": "read", "input": {"i": i}}
        messages.append({"role": "assistant", "content": [call]})
        text = f"log {i}\n" + "a line of output\n" * lines
        result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": text}
        messages.append({"role": "user", "content": [result]})
    messages.append({"role": "assistant", "content": "done reading"})
    messages.append({"role": "user", "content": "what did you find?"})
    return messages


def body(messages: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"model": "claude-sonnet-4-6", "max_tokens": 64, "messages": messages})


def pipeline(**config: Any) -> Pipeline:
    return Pipeline(Engine(replace(Config(data_dir=":memory:"), **config)), Config(**config))


def send(gateway: Pipeline, raw: bytes, headers: dict[str, str] = WINDOW) -> Prepared:
    return gateway.prepare(FORMAT, PATH, raw, headers, "")


def sent_messages(prepared: Prepared) -> list[Any]:
    messages: list[Any] = orjson.loads(prepared.body)["messages"]
    return messages


def test_below_the_threshold_the_request_goes_up_as_sent() -> None:
    raw = body(history(2, lines=10))
    prepared = send(pipeline(), raw)
    assert prepared.outcome == Outcome.BELOW_THRESHOLD
    assert prepared.body is raw
    assert prepared.state is not None and not prepared.state.decisions


def test_at_the_threshold_a_collection_lands_the_prompt_under_the_ceiling() -> None:
    prepared = send(pipeline(), body(history(20)))
    assert prepared.outcome == Outcome.OPTIMIZED
    assert prepared.tokens_after < 6000 < prepared.tokens_before
    assert prepared.state is not None and prepared.state.decisions
    assert FORMAT.violations(orjson.loads(prepared.body)) == []


def test_decisions_stick_so_the_prefix_is_byte_identical_between_collections() -> None:
    gateway = pipeline()
    messages = history(20)
    first = send(gateway, body(messages))
    assert first.state is not None
    version = first.state.version
    more = [{"role": "assistant", "content": "one more look"}, {"role": "user", "content": "go on"}]
    later = [*messages, *more]
    second = send(gateway, body(later))
    assert second.outcome == Outcome.OPTIMIZED
    assert second.state is first.state and first.state.version == version  # no new collection
    assert sent_messages(second)[: len(messages) - 1] == sent_messages(first)[:-1]


def test_in_shadow_mode_the_original_goes_up_reported_as_shadow() -> None:
    raw = body(history(20))
    prepared = send(pipeline(gateway_mode="shadow"), raw)
    assert prepared.body is raw and prepared.outcome == Outcome.SHADOW
    assert prepared.tokens_after < prepared.tokens_before
    assert prepared.state is not None
    # the provider counts what was sent: the original, not the plan's prompt
    prepared.state.calibration.report(prepared.tokens_before * 3 // 2)
    assert prepared.state.calibration.scale > 1.0


def test_a_chunk_the_host_no_longer_sends_loses_its_decision_and_moves_the_version() -> None:
    prepared = send(pipeline(), body(history(20)))
    state = prepared.state
    assert state is not None and state.decisions
    version = state.version
    state.not_sent(set())
    assert not state.decisions and not state.tokens
    assert state.version > version


def test_a_projection_under_an_older_version_is_not_reused() -> None:
    gateway = pipeline()
    raw = body(history(20))
    send(gateway, raw)
    state = send(gateway, raw).state  # the second call reuses every turn's mapping
    assert state is not None and state.conversation is not None
    turns = state.conversation.turns
    assert state.conversation.reused == len(turns)
    protected = frozenset({*latest_turns(turns), first_prompt(turns) or 0})
    call = Call(
        FORMAT,
        orjson.loads(raw),
        state.conversation,
        state.turn_ids,
        protected,
        0,
        6000,
        state.tokens,
    )
    assert state.projection is not None
    turns_blank = [replace(turn, edits=[]) for turn in state.projection.turns]
    blank = replace(state.projection, edits={}, turns=turns_blank)
    assert project(call, state, blank).edits == {}  # same version: the turns are reused
    one = next(iter(state.decisions))
    state.not_sent(set(state.tokens) - {one})  # one decision goes, the version moves
    assert project(call, state, blank).edits  # walked again under the others


def test_a_chunk_restored_elsewhere_comes_back_whole_on_the_next_call() -> None:
    gateway = pipeline()
    messages = history(20, lines=100)  # a restored result stays under the threshold
    first = send(gateway, body(messages))
    state = first.state
    assert state is not None
    stashed = sorted(i for i, d in state.decisions.items() if d.stash_id)
    gateway.engine.restore("", state.session_id, stashed[:1], budget=None, force=False)
    second = send(gateway, body(messages))
    assert stashed[0] not in state.decisions
    assert stashed[0] in state.live
    assert second.tokens_after > first.tokens_after


def test_the_engine_plans_under_the_ceiling_less_what_it_does_not_see() -> None:
    projection = Projection({}, tokens_after=900, engine_tokens=700, tokens_before=2000, turns=[])
    assert projection.overhead == 200
    assert replace(projection, engine_tokens=950).overhead == 0


def mapped(exchanges: int, ceiling: int) -> Call:
    """A request as the pipeline maps it, sized at three characters a token."""
    raw = orjson.loads(body(history(exchanges, lines=40)))
    conversation = FORMAT.parse(raw, PATH, None)
    assert conversation is not None
    turns = conversation.turns
    ids = [
        [chunk_id(t, b, turn.role, block) for b, block in enumerate(turn.blocks)]
        for t, turn in enumerate(turns)
    ]
    sizes = {
        cid: len(block.text) // 3 + 1
        for t, turn in enumerate(turns)
        for block, cid in zip(turn.blocks, ids[t], strict=True)
    }
    protected = frozenset({0, len(turns) - 1})
    return Call(FORMAT, raw, conversation, ids, protected, 0, ceiling, sizes)


def test_truncation_drops_the_exchanges_the_plan_emptied_before_any_that_hold_content() -> None:
    call = mapped(3, ceiling=10_000)
    emptied = {(3, 0): Edit(""), (4, 0): Edit("[placeholder]")}  # the second exchange (t1)
    cut = truncate(call, emptied, {}, target=1)
    assert cut.dropped_turns == 2 and not cut.broken
    assert [m["content"][0].get("id") for m in cut.body["messages"][1:5]] == [
        "t0",
        None,
        "t2",
        None,
    ]


def test_truncation_keeps_the_first_prompt_and_the_latest_turn_and_the_format_rules() -> None:
    call = mapped(3, ceiling=5)
    cut = truncate(call, {}, {}, target=4)
    assert cut.dropped_turns == 6 and cut.over_ceiling and not cut.broken
    original = call.body["messages"]
    assert cut.body["messages"] == [original[0], original[-2], original[-1]]
    assert FORMAT.violations(cut.body) == []


def test_a_provider_count_over_twice_ours_is_taken_for_an_error() -> None:
    calibration = Calibration()
    calibration.report(500)  # nothing sent yet
    assert calibration.scale == 1.0
    calibration.sent(100)
    calibration.report(150)
    assert calibration.scale == 1.5
    calibration.report(250)
    assert calibration.scale == 1.5
