"""Savings per host (benchmarks/hosts): the models of each host alone, and
the rendering every leg is scored on, on a tiny hand-made trajectory. Sizes
are message counts here (`messages`), so every line crossing is visible."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from ctxopt.tokens import TokenCounter

from benchmarks.gateway.billing import CLEARED
from benchmarks.gateway.histories import trajectory_of
from benchmarks.hosts import headroom_proxy
from benchmarks.hosts.baselines import Compacting, compacting, context_editing, summary_text
from benchmarks.hosts.costs import Summaries, bill, input_billed, with_summary_tokens
from benchmarks.hosts.frames import FRAMES, Frame, _scrubbed, load_frame
from benchmarks.hosts.headroom_proxy import answer, turn_items
from benchmarks.hosts.legs import (
    CTXOPT,
    HEADROOM,
    HOST,
    Leg,
    gemini_summarising,
    summarising_billings,
)
from benchmarks.hosts.profiles import CLAUDE_CODE, CODEX, GEMINI_CLI
from benchmarks.hosts.prompts import Case, long_cases, rendered
from benchmarks.hosts.rows import rows_of, sensitivity
from benchmarks.hosts.schedule import Schedule
from benchmarks.quality.metrics import needed_recall
from benchmarks.replay.ledger import Billing, bill_calls
from benchmarks.replay.sessions import Prompt, session_of

NEEDED = "def parse_section(self, name): needed later"  # >= 25 characters: a needed line
SYSTEM = "you are a careful agent"
TASK = "fix the parser"
STEPS = 5
COUNTER = TokenCounter("cl100k")


def _messages() -> list[dict[str, Any]]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    for i in range(STEPS):
        output = f"<returncode>0</returncode>\n<output>\n{NEEDED if i == 0 else f'line {i}'}\n"
        messages += [
            {"role": "assistant", "content": f"THOUGHT: step {i}\n\n```bash\ncat f{i}.py\n```"},
            {"role": "user", "content": output + "</output>"},
        ]
    messages.append({"role": "assistant", "content": f"THOUGHT: the fix is in {NEEDED}"})
    return messages


def words(texts: Sequence[str]) -> list[int]:
    return [len(t.split()) for t in texts]


def _case(fmt: str = "anthropic", frame: Frame | None = None) -> Case:
    messages = _messages()
    record = {"instance_id": "hand-1", "submission": "diff", "messages": messages}
    session = session_of(record, words)
    return Case.of(session, trajectory_of("hand-1", list(messages))).hosted(fmt, frame, words)


def messages(prompt: Prompt) -> int:
    return len(prompt)


def joined(prompt: Prompt) -> str:
    return "\n".join(text for _, text in prompt)


@pytest.mark.parametrize("fmt", ["anthropic", "openai-responses", "gemini"])
def test_an_untouched_body_renders_as_the_session_history(fmt: str) -> None:
    case = _case(fmt)
    for k in range(case.calls):
        assert rendered(case, case.body(k)) == case.session.history(case.session.calls[k])


@pytest.mark.parametrize("fmt", ["anthropic", "openai-responses", "gemini"])
def test_a_real_frame_renders_as_one_system_message_with_its_tools(fmt: str) -> None:
    frame = load_frame(fmt)
    case = _case(fmt, frame)
    for k in range(case.calls):
        assert rendered(case, case.body(k)) == case.session.history(case.session.calls[k])
    system, task = case.session.messages[:2]
    assert task[0] == "user" and task[1].endswith(TASK)
    assert frame.prompt not in system[1] + task[1]
    # the tools as the CLI declares them are part of what is billed
    assert json.dumps(case.body(0)["tools"], sort_keys=True) in system[1]
    assert case.session.final_tokens > _case(fmt).session.final_tokens


def test_codex_asks_for_its_summary_without_tools_so_nothing_is_cached() -> None:
    frame = load_frame("openai-responses")
    assert frame.compaction is not None
    case = _case("openai-responses", frame)
    sent = compacting(case, Compacting(line=case_size(case, 2), keep_task=True), messages)
    (k,) = list(sent.summarising)[:1]
    asked = sent.summarising[k]
    assert asked[-1] == ("user", frame.compaction.prompt)
    assert asked[0] != sent.calls[k - 1][0]  # its frame: no tool declarations
    (billing,) = summarising_billings(sent.calls, {k: asked}, COUNTER)
    assert billing.cached_tokens == 0


def test_claude_code_asks_for_its_summary_in_its_newest_message_on_a_cached_prefix() -> None:
    frame = load_frame("anthropic")
    assert frame.compaction is not None
    case = _case("anthropic", frame)
    sent = compacting(case, Compacting(line=case_size(case, 2), keep_task=False), messages)
    k = next(iter(sent.summarising))
    asked = sent.summarising[k]
    assert asked[-1][1].endswith(frame.compaction.prompt)
    (billing,) = summarising_billings(sent.calls, {k: asked}, COUNTER)
    assert billing.cached_tokens == sum(COUNTER.count_many([t for _, t in sent.calls[k - 1]]))
    # after it, Claude Code keeps its frame items and the summary
    assert sent.calls[k][:1] == case.session.messages[:1]
    assert sent.calls[k][1:] == (("user", summary_text(1)),)


def case_size(case: Case, k: int) -> int:
    """The message count of call `k`'s prompt: a line the host reaches there."""
    return len(case.session.history(case.session.calls[k]))


def test_claude_code_compacts_exactly_when_the_next_prompt_reaches_its_line() -> None:
    case = _case()
    # call k sends the system prompt, the task and k steps: 2 + 2k messages
    system = case.session.messages[0]
    sent = compacting(case, Compacting(line=6, keep_task=False), messages)
    assert sent.calls[:2] == [case.session.history(case.session.calls[k]) for k in range(2)]
    assert list(sent.summarising) == [2, 4]
    assert sent.summarising[2] == case.session.history(case.session.calls[2])
    assert sent.calls[2] == (system, ("user", summary_text(1)))
    assert sent.calls[3] == (system, ("user", summary_text(1)), *case.session.messages[6:8])


def test_below_its_line_the_host_never_summarises() -> None:
    case = _case()
    sent = compacting(case, Compacting(line=100, keep_task=False), messages)
    assert sent.summarising == {}
    assert sent.calls == [case.session.history(c) for c in case.session.calls]


def test_codex_keeps_the_task_beside_the_summary() -> None:
    case = _case("openai-responses")
    sent = compacting(case, Compacting(line=6, keep_task=True), messages)
    assert sent.calls[2] == (*case.session.messages[:2], ("user", summary_text(1)))


def test_the_summarising_call_is_billed_as_the_history_it_summarises() -> None:
    case = _case()
    sent = compacting(case, Compacting(line=6, keep_task=False), messages)
    billings = summarising_billings(sent.calls, sent.summarising, COUNTER)

    def tokens(prompt: Prompt) -> int:
        return sum(COUNTER.count_many([text for _, text in prompt]))

    # the summarised history extends the previous call's prompt, which the provider cached
    assert billings[0] == Billing(tokens(sent.summarising[2]), tokens(sent.calls[1]))
    assert len(billings) == 2


def test_recall_is_zero_for_lines_only_in_summarised_history() -> None:
    case = _case()
    sent = compacting(case, Compacting(line=6, keep_task=False), messages)
    session = case.session
    assert session.needed(session.calls[1]) == (NEEDED,)
    assert needed_recall(session.needed(session.calls[1]), joined(sent.calls[1])) == 1.0
    assert needed_recall(session.needed(session.calls[3]), joined(sent.calls[3])) == 0.0


def uncleared(prompt: Prompt) -> int:
    return sum(text != CLEARED for _, text in prompt)


ALWAYS_EDITED = context_editing(window=1, claude_window=200_000)  # trigger 0 tokens


def test_with_context_editing_claude_code_judges_its_line_on_the_reported_size_plus_growth() -> (
    None
):
    case = _case()
    alone = compacting(case, Compacting(line=12, keep_task=False), uncleared)
    edited = Compacting(line=12, keep_task=False, edit=ALWAYS_EDITED)
    sent = compacting(case, edited, uncleared)
    # call 5 holds 12 messages; the provider reported call 4 (10 messages) with one result
    # cleared, so Claude Code estimates call 5 at 9 + 2 = 11, under its line
    assert list(alone.summarising) == [5]
    assert list(sent.summarising) == []


def test_context_editing_clears_all_but_the_latest_three_results() -> None:
    case = _case()
    edited = Compacting(line=100, keep_task=False, edit=ALWAYS_EDITED)
    sent = compacting(case, edited, messages)
    assert [text for _, text in sent.calls[5]].count(CLEARED) == 2
    assert needed_recall((NEEDED,), joined(sent.calls[5])) == 0.0


def test_gemini_cli_bills_a_summary_and_its_verification_per_compression() -> None:
    prompts: Sequence[Prompt] = [(("system", "a b"),), (("system", "a b"), ("user", "c"))]
    outcomes = ["NOOP", "COMPRESSED + masked"]
    tokens = sum(COUNTER.count_many(["a b"]))
    assert gemini_summarising(list(prompts), outcomes, COUNTER) == [
        Billing(tokens, 0),
        Billing(tokens, tokens),
    ]
    assert gemini_summarising(list(prompts), ["NOOP", "CONTENT_TRUNCATED"], COUNTER) == []


def test_each_line_is_its_hosts_rule_proportion_of_the_window() -> None:
    assert CLAUDE_CODE.line(200_000) == 167_000
    assert CODEX.line(100_000) == 90_000
    assert GEMINI_CLI.line(100_000) == 50_000


def test_anthropic_bills_cache_writes_and_reads() -> None:
    assert input_billed(Billing(100, 60), CLAUDE_CODE.price) == pytest.approx(40 * 1.25 + 60 * 0.1)
    assert input_billed(Billing(100, 60), CODEX.price) == pytest.approx(40 + 6)


def test_a_long_session_is_its_trajectories_steps_up_to_each_last_call() -> None:
    case = _case()
    (long,) = long_cases([case, case], 2, lambda texts: [len(t.split()) for t in texts])
    assert long.calls == 2 * case.calls - 1
    hosted = long.hosted("gemini", None, words)
    body = hosted.body(long.calls - 1)
    assert rendered(hosted, body) == hosted.session.history(hosted.session.calls[-1])


def test_a_summary_is_billed_at_the_output_price_in_input_tokens() -> None:
    cost = Summaries(output_tokens=1_000)
    claude = bill([Billing(10_000, 8_000)], 2, cost, CLAUDE_CODE.price)
    codex = bill([Billing(10_000, 8_000)], 2, cost, CODEX.price)
    assert claude.input_tokens == pytest.approx(2_000 * 1.25 + 8_000 * 0.1)
    assert claude.output_tokens == pytest.approx(2 * 1_000 * 5)  # Claude Sonnet: $15 over $3
    assert codex.output_tokens == pytest.approx(2 * 1_000 * 8)  # GPT-5: $10 over $1.25
    assert claude.total == claude.input_tokens + claude.output_tokens


def test_the_stall_is_each_summary_at_the_decode_rate() -> None:
    assert Summaries(output_tokens=2_000, decode_tokens_per_s=50).stall_s(3) == pytest.approx(120)
    assert Summaries().stall_s(0) == 0


def _leg(case: Case, prompts: list[Prompt], *, summarising: int, ms: float | None = None) -> Leg:
    leg = Leg(timed=ms is not None)
    leg.add(case, prompts, COUNTER, ms=None if ms is None else [ms] * len(prompts))
    leg.summarised(case.session.instance_id, [Billing(1_000, 0)] * summarising, summarising)
    return leg


def test_a_rows_bill_holds_its_summarising_calls_input_and_output() -> None:
    case = _case()
    full = [case.session.history(c) for c in case.session.calls]
    cost = Summaries(output_tokens=100, decode_tokens_per_s=10)
    legs = {
        (CLAUDE_CODE, HOST): _leg(case, full, summarising=2),
        (CLAUDE_CODE, CTXOPT): _leg(case, full, summarising=0, ms=5.0),
    }
    host, ctxopt = rows_of(legs, cost)
    calls = sum(input_billed(b, CLAUDE_CODE.price) for b in bill_calls(full, COUNTER.count_many))
    assert host["method"] == "host" and ctxopt["method"] == "ctxopt"
    assert host["billed_tokens"] == round(calls + 2 * 1_000 * 1.25 + 2 * 100 * 5)
    assert host["summary_output_tokens"] == 200
    assert host["stall_s"] == pytest.approx(20.0)
    assert ctxopt["billed_tokens"] == round(calls)
    assert ctxopt["billed_vs_host"] == round(ctxopt["billed_tokens"] / host["billed_tokens"], 3)
    assert ctxopt["stall_s"] == pytest.approx(round(5.0 * case.calls / 1000, 1))
    assert {"host", "method", "billed_tokens", "billed_vs_host", "needed_later_recall"} <= set(host)


def test_gemini_cli_behind_headroom_is_the_host_row_with_what_headroom_forwarded() -> None:
    case = _case("gemini")
    full = [case.session.history(c) for c in case.session.calls]
    sampled = Leg(sampled=(3, 3))
    legs = {(GEMINI_CLI, HOST): _leg(case, full, summarising=1), (GEMINI_CLI, HEADROOM): sampled}
    host, peer = rows_of(legs, Summaries())
    assert peer["method"] == "host + headroom"
    assert peer["billed_tokens"] == host["billed_tokens"]
    assert peer["note"] == "3 of 3 sampled calls forwarded unchanged"


def test_the_sensitivity_line_rebills_only_the_summaries_output() -> None:
    row = {"input_billed_tokens": 1_000, "summaries": 2, "host": CODEX.name}
    rows = [{**row, "method": "host"}, {**row, "method": "ctxopt", "summaries": 0}]
    by_length = {(s["summary_tokens"], s["method"]): s["billed_vs_host"] for s in sensitivity(rows)}
    assert by_length[(500, "ctxopt")] == round(1_000 / (1_000 + 2 * 500 * 8), 3)
    assert by_length[(20_000, "host")] == 1.0
    assert with_summary_tokens(1_000, 2, 500, CODEX.price) == 9_000


def test_a_schedule_setting_is_the_servers_threshold_and_target() -> None:
    assert Schedule.parse("95/20").env() == {
        "CTXOPT_GATEWAY_TRIGGER_PERCENT": "95",
        "CTXOPT_GATEWAY_LANDING_PERCENT": "20",
        "CTXOPT_GATEWAY_GENERATIONS": "off",
    }
    assert Schedule().env() == {} and Schedule().label == "default"
    with pytest.raises(ValueError, match="target < threshold"):
        Schedule.parse("60/80")


def test_a_third_number_turns_generations_on_with_full_collections_landing_there() -> None:
    generational = Schedule.parse("95/80/50")
    assert generational.label == "95/80/50"
    assert generational.env() == {
        "CTXOPT_GATEWAY_TRIGGER_PERCENT": "95",
        "CTXOPT_GATEWAY_LANDING_PERCENT": "80",
        "CTXOPT_GATEWAY_GENERATIONS": "on",
        "CTXOPT_GATEWAY_FULL_LANDING_PERCENT": "50",
    }
    with pytest.raises(ValueError, match="full <= target"):
        Schedule.parse("95/50/60")


@pytest.mark.parametrize("fmt", ["anthropic", "openai-responses", "gemini"])
def test_the_fake_answers_each_call_with_the_trajectorys_next_assistant_turn(fmt: str) -> None:
    case = _case(fmt)
    key = {"anthropic": "messages", "openai-responses": "input", "gemini": "contents"}[fmt]
    for k in range(case.calls - 1):
        said = turn_items(fmt, case.trajectory, k)
        after = case.body(k + 1)[key]
        assert after[len(case.body(k)[key]) : len(case.body(k)[key]) + len(said)] == said
    reply = json.dumps(answer(fmt, turn_items(fmt, case.trajectory, 0), "", 7))
    assert "call_0000" in reply and "THOUGHT: step 0" in reply


def test_behind_a_proxy_the_host_judges_its_line_on_what_the_proxy_forwards() -> None:
    case = _case()
    line = Compacting(line=10, keep_task=False)

    def halves(body: dict[str, Any], _call: int) -> Prompt:
        prompt = rendered(case, body)
        return prompt[: max(2, len(prompt) // 2)]

    assert list(compacting(case, line, messages).summarising) == [4]
    assert list(compacting(case, line, messages, halves).summarising) == []


def test_without_its_venv_the_headroom_peer_is_skipped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(headroom_proxy, "VENV", tmp_path / "missing")
    assert headroom_proxy.headroom_bin() is None
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "headroom").touch()
    monkeypatch.setattr(headroom_proxy, "VENV", tmp_path / "venv")
    assert headroom_proxy.headroom_bin() == tmp_path / "venv" / "bin" / "headroom"


def test_recorded_frames_name_no_scratch_path_and_carry_no_key() -> None:
    assert _scrubbed([{"id": "m1", "text": "/tmp/ab_1/w -tmp-ab-1-w"}], "/tmp/ab_1") == [
        {"text": "/home/user/w -home-user-w"}
    ]
    for path in sorted(FRAMES.glob("*.json")):
        text = path.read_text()
        for secret in (
            "sk-ant-test",
            "sk-test",
            "gemini-test",
            "/tmp/ctxopt",
            "ctxopt-compaction",
            "device_id",
        ):
            assert secret not in text, (path.name, secret)
