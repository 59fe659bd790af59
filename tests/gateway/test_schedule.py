"""When and how deep the gateway collects: the schedule's rules, each pinned,
and tool outputs shrunk once as they arrive, through a real gateway."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from ctxopt.api.gateway.schedule import landing_that_pays, next_growth, schedule
from ctxopt.prices import ANTHROPIC_CACHE, OPENAI_CACHE

from tests.gateway.conftest import upstream_env
from tests.gateway.upstream import FakeUpstream
from tests.serverproc import serving


def test_a_collection_runs_when_the_next_call_would_cross_the_trigger() -> None:
    # 75,000 is under 95% of 80,000 (76,000), but the next call (one growth later) is not
    due = schedule(
        OPENAI_CACHE, size=75_000, growth=1_500, ceiling=80_000, trigger_share=0.95,
        landing_share=0.3,
    )  # fmt: skip
    assert due is not None and due.target == 24_000
    calm = schedule(
        OPENAI_CACHE, size=75_000, growth=500, ceiling=80_000, trigger_share=0.95,
        landing_share=0.3,
    )  # fmt: skip
    assert calm is None


def test_a_collection_lands_no_higher_than_its_rewrite_pays_for() -> None:
    # growing 4,000 a call, the prompt is back at the trigger in a few calls: landing at
    # 90% would rewrite 72,000 tokens to save reads on a few calls
    due = schedule(
        ANTHROPIC_CACHE, size=76_000, growth=4_000, ceiling=80_000, trigger_share=0.95,
        landing_share=0.9,
    )  # fmt: skip
    assert due is not None
    assert due.target == landing_that_pays(
        ANTHROPIC_CACHE, size=76_000, trigger=76_000, growth=4_000
    )
    assert due.target < 72_000 and "pays" in due.reason


def test_the_break_even_landing_is_where_rewrite_and_saved_reads_meet() -> None:
    size, trigger, growth = 90_000, 90_000, 900
    landing = landing_that_pays(ANTHROPIC_CACHE, size=size, trigger=trigger, growth=growth)

    def pays(at: int) -> bool:
        saved = ANTHROPIC_CACHE.cache_read * (size - at) * (trigger - at) / growth
        return saved >= ANTHROPIC_CACHE.cache_write * at

    assert pays(landing) and not pays(landing + 1)
    # a cheaper write (OpenAI: no premium) pays for a higher landing
    assert landing_that_pays(OPENAI_CACHE, size=size, trigger=trigger, growth=growth) > landing


def test_a_landing_is_a_share_of_the_room_the_frame_and_task_leave() -> None:
    # a 40,000-token frame and task under an 80,000-token ceiling: landing at 50% keeps
    # half of the other 40,000, not half of the ceiling (which would keep none of them)
    due = schedule(
        OPENAI_CACHE, size=76_000, growth=500, ceiling=80_000, trigger_share=0.95,
        landing_share=0.5, full_landing_share=0.25, fixed=40_000,
    )  # fmt: skip
    assert due is not None and (due.target, due.full_target) == (60_000, 50_000)
    assert "50% of the room" in due.reason


def test_a_rewrite_is_priced_from_the_first_byte_it_changes() -> None:
    # growing 3,000 a call, a rewrite of the whole prompt pays only for a low landing; a
    # minor collection rewrites what follows the old generation (here 30,000 tokens with
    # the frame) and the frame alone (5,000) is never rewritten: each lands higher
    rules: dict[str, Any] = dict(
        size=76_000, growth=3_000, ceiling=80_000, trigger_share=0.95, landing_share=0.8,
        full_landing_share=0.8,
    )  # fmt: skip
    whole = schedule(ANTHROPIC_CACHE, **rules)
    framed = schedule(ANTHROPIC_CACHE, **rules, fixed=5_000)
    minor = schedule(ANTHROPIC_CACHE, **rules, fixed=5_000, old_prefix=30_000)
    assert whole is not None and framed is not None and minor is not None
    assert whole.target < framed.target < minor.target < 64_000
    assert framed.full_target == framed.target < minor.target
    assert minor.full_target == framed.target  # a full one still rewrites after the frame
    assert minor.target == landing_that_pays(
        ANTHROPIC_CACHE, size=76_000, trigger=76_000, growth=3_000, kept=30_000
    )


def test_the_break_even_with_a_kept_prefix_charges_only_what_is_written() -> None:
    size, trigger, growth, kept = 90_000, 90_000, 2_000, 40_000
    landing = landing_that_pays(
        ANTHROPIC_CACHE, size=size, trigger=trigger, growth=growth, kept=kept
    )

    def pays(at: int) -> bool:
        saved = ANTHROPIC_CACHE.cache_read * (size - at) * (trigger - at) / growth
        return saved >= ANTHROPIC_CACHE.cache_write * (at - kept)

    assert pays(landing) and not pays(landing + 1)
    assert (
        landing_that_pays(ANTHROPIC_CACHE, size=size, trigger=trigger, growth=growth, kept=size)
        == size
    )


def test_growth_is_a_running_mean_that_a_shrinking_call_leaves_alone() -> None:
    growth = next_growth(0.0, last_size=10_000, size=11_000)
    assert growth == 1_000
    assert next_growth(growth, last_size=11_000, size=2_000) == growth  # a collection
    assert next_growth(growth, last_size=11_000, size=13_000) == 1_100


def _lines(tag: str, n: int) -> str:
    return "\n".join(
        f"{tag} line {i}: value={i * 7} status=ok path=/src/{tag}/{i}.py" for i in range(n)
    )


def _body(steps: int) -> dict[str, Any]:
    """A task and `steps` tool steps; step 0's output is large, the rest small."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test in app."}]
    for k in range(steps):
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"toolu_{k}", "name": "bash",
                             "input": {"command": f"cat file{k}.py"}}],
            }
        )  # fmt: skip
        output = _lines(f"out{k}", 400 if k == 0 else 5)
        result = {"type": "tool_result", "tool_use_id": f"toolu_{k}", "content": output}
        messages.append({"role": "user", "content": [result]})
    return {"model": "claude-sonnet-4-6", "max_tokens": 100, "messages": messages}


def _sent_steps(tmp_path: Path, upstream: FakeUpstream, env: dict[str, str]) -> list[list[Any]]:
    headers = {
        "x-api-key": "k",
        "x-ctxopt-session": "arrivals",
        "x-ctxopt-window-tokens": "200000",  # far from any collection
        "user-agent": "claude-cli/2.1.332 (external, sdk-cli)",
    }
    sent = []
    with serving(
        tmp_path, "--gateway-addr", "127.0.0.1:0", env={**upstream_env(upstream), **env}
    ) as server:
        for steps in (1, 2, 3):
            answer = httpx.post(
                f"{server.gateway_url}/anthropic/v1/messages", json=_body(steps), headers=headers
            )
            answer.raise_for_status()
            sent.append(upstream.calls("/v1/messages")[-1].body["messages"])
    return sent


def test_an_answered_tool_output_shrinks_once_and_only_the_tail_changes(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    first, second, third = _sent_steps(tmp_path, upstream, {"CTXOPT_GATEWAY_ARRIVAL_SHARE": "0.3"})
    whole = _body(1)["messages"][2]
    assert first[2] == whole  # the model works on it whole
    shrunk = second[2]["content"][0]["content"]
    assert "stash" in str(shrunk) and len(str(shrunk)) < 0.3 * len(
        str(whole["content"][0]["content"])
    )
    # the prefix before its step (the call may lose its arguments) is byte-identical
    assert second[:1] == first[:1]
    assert third[:4] == second[:4]  # and it never changes again


def test_without_an_arrival_share_answered_outputs_stay_whole(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    _, second, third = _sent_steps(tmp_path, upstream, {})
    assert second[2] == third[2] == _body(1)["messages"][2]


def test_the_gateway_collects_at_its_trigger_and_lands_at_its_landing(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    env = {
        "CTXOPT_GATEWAY_TRIGGER_PERCENT": "95",
        "CTXOPT_GATEWAY_LANDING_PERCENT": "30",
    }
    window = 20_000
    headers = {"x-api-key": "k", "x-ctxopt-session": "deep", "x-ctxopt-window-tokens": str(window)}
    sizes = []
    with serving(
        tmp_path, "--gateway-addr", "127.0.0.1:0", env={**upstream_env(upstream), **env}
    ) as server:
        for steps in range(1, 40):
            body = _body(steps)
            for message in body["messages"][2::2]:  # every output the size of the first
                message["content"][0]["content"] = _lines(message["content"][0]["tool_use_id"], 40)
            answer = httpx.post(
                f"{server.gateway_url}/anthropic/v1/messages", json=body, headers=headers
            )
            answer.raise_for_status()
            sizes.append(
                (
                    int(answer.headers["x-ctxopt-tokens-before"]),
                    int(answer.headers["x-ctxopt-tokens-after"]),
                )
            )
    collected = [k for k in range(1, len(sizes)) if sizes[k][1] < sizes[k - 1][1]]
    assert collected, sizes
    first = collected[0]
    assert 0.8 * window <= sizes[first - 1][1] < 0.95 * window  # not before the trigger
    assert sizes[first][1] <= 0.3 * window  # and down to the landing, not to 60%
