"""Generational collections in the gateway pipeline (in process, an in-memory
engine): a minor collection prunes only the turns since the last full one and
leaves every byte before them as the provider cached it; a full one runs when
a minor one cannot land; what either removes stays restorable."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import orjson
from ctxopt.api.gateway.formats.anthropic import AnthropicMessages
from ctxopt.api.gateway.pipeline import Pipeline
from ctxopt.api.gateway.prepared import Outcome, Prepared
from ctxopt.api.gateway.schedule import schedule
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import Action
from ctxopt.prices import ANTHROPIC_CACHE

FORMAT = AnthropicMessages()
PATH = "v1/messages"
WINDOW = 20_000
HEADERS = {"x-ctxopt-window-tokens": str(WINDOW)}
START, STEP = 62, 3  # exchanges at the first collection, and more per call


def exchange(i: int) -> list[dict[str, Any]]:
    """One tool call and its log (about 300 tokens)."""
    call = {"type": "tool_use", "id": f"t{i}", "name": "read", "input": {"i": i}}
    text = f"log {i}\n" + "".join(f"line {j} of step {i}: status ok\n" for j in range(30))
    result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": text}
    return [{"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}]


def history(exchanges: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "task: read the logs"}]
    for i in range(exchanges):
        messages += exchange(i)
    return messages


def send(gateway: Pipeline, messages: list[dict[str, Any]]) -> Prepared:
    raw = orjson.dumps({"model": "claude-sonnet-4-6", "max_tokens": 64, "messages": messages})
    return gateway.prepare(FORMAT, PATH, raw, HEADERS, "")


def sent(prepared: Prepared) -> list[Any]:
    messages: list[Any] = orjson.loads(prepared.body)["messages"]
    return messages


def pipeline(**config: Any) -> Pipeline:
    settings = {
        "gateway_generations": True,
        "gateway_trigger_percent": 95.0,
        "gateway_landing_percent": 60.0,
        "gateway_full_landing_percent": 30.0,
        "gateway_recent_share": 0.0,  # the latest turns' share and count: their own tests
        "gateway_recent_turns": 2,
        **config,
    }
    return Pipeline(Engine(replace(Config(data_dir=":memory:"), **settings)), Config(**settings))


@dataclass(frozen=True)
class Second:
    """The second collection of a growing history, and what came before it."""

    before: Prepared  # the request before it
    prepared: Prepared
    exchanges: int  # of its history
    first_old: frozenset[str]  # the old generation the first collection started


def second_collection(gateway: Pipeline) -> Second:
    """A history of START exchanges (the first collection), then STEP more a call up
    to the next collection."""
    first = send(gateway, history(START))
    assert first.state is not None and first.note.startswith("full collection"), first.note
    old, before = first.state.generations.old, first
    for exchanges in range(START + STEP, START + 40 * STEP, STEP):
        prepared = send(gateway, history(exchanges))
        if "collection" in prepared.note:
            return Second(before, prepared, exchanges, old)
        before = prepared
    raise AssertionError("no second collection")


def test_the_first_collection_is_full_and_starts_the_old_generation() -> None:
    prepared = send(pipeline(), history(START))
    state = prepared.state
    assert state is not None and prepared.outcome == Outcome.OPTIMIZED
    assert prepared.note.startswith("full collection")
    assert prepared.tokens_after <= 0.3 * WINDOW
    # old: all but the latest two turns, which the plan kept whole as roots
    assert state.generations.old == {i for row in state.turn_ids[:-2] for i in row}


def test_a_minor_collection_leaves_every_byte_before_the_first_young_turn_as_sent() -> None:
    second = second_collection(pipeline())
    before, minor = second.before, second.prepared
    assert minor.note.startswith("minor collection"), minor.note
    assert minor.state is not None
    old = len(history(START)) - 2  # messages (one a turn) before the first young one
    assert minor.state.generations.old == {i for row in minor.state.turn_ids[:old] for i in row}
    # the old generation's bytes are the previous request's: the provider's cache holds
    assert sent(minor)[:old] == sent(before)[:old]
    # and the young generation was pruned to land
    assert minor.tokens_after <= (0.6 + 0.05) * WINDOW < minor.tokens_before
    assert sent(minor)[old:] != history(second.exchanges)[old:]


def test_without_generations_the_second_collection_rewrites_the_old_prefix() -> None:
    gateway = pipeline(gateway_generations=False, gateway_landing_percent=30.0)
    second = second_collection(gateway)
    old = len(history(START))
    assert sent(second.prepared)[:old] != sent(second.before)[:old]


def test_a_full_collection_runs_when_the_old_generation_leaves_a_minor_one_no_room() -> None:
    # full collections land at 58%, minor ones at 60%: the old generation and the latest
    # turns alone are over 60% of the ceiling, so no minor collection can land
    gateway = pipeline(gateway_full_landing_percent=58.0)
    second = second_collection(gateway)
    full = second.prepared
    assert full.note.startswith("full collection"), full.note
    state = full.state
    assert state is not None and state.generations.old > second.first_old  # a new one
    assert full.tokens_after <= 0.58 * WINDOW


def test_what_a_minor_collection_removes_stays_restorable() -> None:
    gateway = pipeline()
    second = second_collection(gateway)
    minor = second.prepared
    state = minor.state
    assert state is not None and minor.note.startswith("minor collection")
    young = [
        i
        for i, d in state.decisions.items()
        if i not in state.generations.old and d.action in (Action.STASH, Action.TRIM)
    ]
    assert young and all(state.decisions[i].stash_id for i in young)
    restored, _ = gateway.engine.restore("", state.session_id, young[:1], budget=None, force=True)
    assert young[0] in restored
    again = send(gateway, history(second.exchanges))
    assert young[0] not in state.decisions and again.tokens_after > minor.tokens_after


def test_with_generations_a_full_collection_lands_at_its_own_landing() -> None:
    due = schedule(
        ANTHROPIC_CACHE, size=76_000, growth=500, ceiling=80_000, trigger_share=0.95,
        landing_share=0.6, full_landing_share=0.3,
    )  # fmt: skip
    assert due is not None and (due.target, due.full_target) == (48_000, 24_000)
    plain = schedule(
        ANTHROPIC_CACHE, size=76_000, growth=500, ceiling=80_000, trigger_share=0.95,
        landing_share=0.6,
    )  # fmt: skip
    assert plain is not None and plain.full_target == plain.target == 48_000


def test_a_minor_collection_is_priced_by_the_young_part_it_rewrites() -> None:
    # growing ~900 tokens a call against a 20,000 window, a rewrite of the whole prompt
    # pays only down to ~42% of it; a minor one rewrites what follows the old generation
    # (~30%) and so pays for a landing above half the window
    second = second_collection(pipeline(gateway_landing_percent=80.0))
    minor = second.prepared
    assert minor.note.startswith("minor collection"), minor.note
    assert 0.5 * WINDOW <= minor.tokens_after <= 0.8 * WINDOW < minor.tokens_before


def test_a_collection_lands_at_its_share_of_the_room_the_task_leaves() -> None:
    # a task of ~2,300 tokens: a full collection at 30% keeps 30% of the other ~17,700
    # tokens under the 20,000 window (~7,700), not 30% of the window (6,000, which
    # leaves the outputs ~3,700 tokens: the plan cannot land there)
    task = "task: read the logs\n" + "".join(
        f"requirement {j}: the parser must accept form {j} and report it\n" for j in range(150)
    )
    messages = history(55)
    messages[0] = {"role": "user", "content": task}
    full = send(pipeline(), messages)
    assert full.note == "full collection", full.note
    assert 0.35 * WINDOW <= full.tokens_after <= 0.4 * WINDOW


def unchanged_suffix(sent_messages: list[Any], original: list[dict[str, Any]]) -> int:
    same = 0
    for a, b in zip(reversed(sent_messages), reversed(original), strict=True):
        if a != b:
            break
        same += 1
    return same


def test_a_collection_keeps_the_latest_turns_whole_up_to_its_share_of_the_room() -> None:
    # a long listing four messages from the end costs many tokens for its value: ranked by
    # value per token alone, the turns before it are cut and it is kept; with the latest
    # turns as roots up to 60% of the room, every one of them is sent as it was
    messages = history(START)
    messages[-3]["content"][0]["content"] = "".join(
        f"vendor/pkg/module_{j}.py: unchanged, 0 issues, 412 bytes\n" for j in range(150)
    )
    kept = {}
    for share in (0.0, 0.6):
        gateway = pipeline(gateway_recent_share=share, gateway_full_landing_percent=40.0)
        prepared = send(gateway, messages)
        assert prepared.note.startswith("full collection"), prepared.note
        kept[share] = unchanged_suffix(sent(prepared), messages)
    assert kept[0.6] >= kept[0.0] + 4  # two more exchanges at least


def listed(lines: int) -> list[dict[str, Any]]:
    """A history whose latest three exchanges carry listings of `lines` lines (~15 tokens each)."""
    messages = history(START)
    for index in (-1, -3, -5):
        messages[index]["content"][0]["content"] = "".join(
            f"src/pkg/module_{j}_{index}.py: 3 warnings, 812 bytes\n" for j in range(lines)
        )
    return messages


def test_a_collection_keeps_the_latest_turns_whole_by_count_beyond_its_landings_share() -> None:
    # three listings of ~1,800 tokens each, far over 60% of a 10% landing's room: by count,
    # not by that share, they are still sent as they were (a small window keeps the agent's
    # last steps as a large one does); a count of two keeps one
    messages = listed(120)
    kept = {}
    for turns in (2, 6):
        gateway = pipeline(
            gateway_recent_turns=turns,
            gateway_recent_share=0.6,
            gateway_full_landing_percent=10.0,
        )
        prepared = send(gateway, messages)
        assert prepared.note.startswith("full collection"), prepared.note
        kept[turns] = unchanged_suffix(sent(prepared), messages)
    assert kept[2] < 6 <= kept[6]


def test_the_count_yields_where_the_latest_turns_would_not_fit_the_ceiling() -> None:
    # listings of ~6,000 tokens each: six turns whole would pass 60% of the room under
    # the 20,000 window, so the collection keeps fewer whole and still lands under it
    messages = listed(400)
    gateway = pipeline(gateway_recent_turns=6, gateway_recent_share=0.6)
    prepared = send(gateway, messages)
    assert prepared.outcome == Outcome.OPTIMIZED, prepared.note
    assert prepared.note.startswith("full collection"), prepared.note
    assert prepared.tokens_after <= WINDOW
    assert unchanged_suffix(sent(prepared), messages) < 6
