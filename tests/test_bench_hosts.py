"""Savings per host (benchmarks/hosts): the models of each host alone, and
the rendering every leg is scored on, on a tiny hand-made trajectory. Sizes
are message counts here (`messages`), so every line crossing is visible."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from ctxopt.tokens import TokenCounter

from benchmarks.gateway.billing import CLEARED
from benchmarks.gateway.histories import request, trajectory_of
from benchmarks.hosts.baselines import Compacting, compacting, context_editing, summary_text
from benchmarks.hosts.legs import gemini_summarising, summarising_billings
from benchmarks.hosts.profiles import CLAUDE_CODE, CODEX, GEMINI_CLI, Prices
from benchmarks.hosts.prompts import Case, long_cases, rendered
from benchmarks.quality.metrics import needed_recall
from benchmarks.replay.ledger import Billing
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


def _case() -> Case:
    messages = _messages()
    record = {"instance_id": "hand-1", "submission": "diff", "messages": messages}
    session = session_of(record, lambda texts: [len(t.split()) for t in texts])
    return Case.of(session, trajectory_of("hand-1", list(messages)))


def messages(prompt: Prompt) -> int:
    return len(prompt)


def joined(prompt: Prompt) -> str:
    return "\n".join(text for _, text in prompt)


@pytest.mark.parametrize("fmt", ["anthropic", "openai-responses", "gemini"])
def test_an_untouched_body_renders_as_the_session_history(fmt: str) -> None:
    case = _case()
    for k in range(case.calls):
        body = request(fmt, case.trajectory, k)
        assert rendered(case, body) == case.session.history(case.session.calls[k])


def test_claude_code_compacts_exactly_when_the_next_prompt_reaches_its_line() -> None:
    case = _case()
    # call k sends the system prompt, the task and k steps: 2 + 2k messages
    sent = compacting(case, "anthropic", Compacting(line=6, keep_task=False), messages)
    assert sent.calls[:2] == [case.session.history(case.session.calls[k]) for k in range(2)]
    assert list(sent.summarising) == [2, 4]
    assert sent.summarising[2] == case.session.history(case.session.calls[2])
    assert sent.calls[2] == (("system", SYSTEM), ("user", summary_text(1)))
    assert sent.calls[3] == (
        ("system", SYSTEM),
        ("user", summary_text(1)),
        *case.session.messages[6:8],
    )


def test_below_its_line_the_host_never_summarises() -> None:
    case = _case()
    sent = compacting(case, "anthropic", Compacting(line=100, keep_task=False), messages)
    assert sent.summarising == {}
    assert sent.calls == [case.session.history(c) for c in case.session.calls]


def test_codex_keeps_the_task_beside_the_summary() -> None:
    case = _case()
    sent = compacting(case, "openai-responses", Compacting(line=6, keep_task=True), messages)
    assert sent.calls[2] == (("system", SYSTEM), ("user", TASK), ("user", summary_text(1)))


def test_the_summarising_call_is_billed_as_the_history_it_summarises() -> None:
    case = _case()
    sent = compacting(case, "anthropic", Compacting(line=6, keep_task=False), messages)
    billings = summarising_billings(sent.calls, sent.summarising, COUNTER)

    def tokens(prompt: Prompt) -> int:
        return sum(COUNTER.count_many([text for _, text in prompt]))

    # the summarised history extends the previous call's prompt, which the provider cached
    assert billings[0] == Billing(tokens(sent.summarising[2]), tokens(sent.calls[1]))
    assert len(billings) == 2


def test_recall_is_zero_for_lines_only_in_summarised_history() -> None:
    case = _case()
    sent = compacting(case, "anthropic", Compacting(line=6, keep_task=False), messages)
    session = case.session
    assert session.needed(session.calls[1]) == (NEEDED,)
    assert needed_recall(session.needed(session.calls[1]), joined(sent.calls[1])) == 1.0
    assert needed_recall(session.needed(session.calls[3]), joined(sent.calls[3])) == 0.0


def uncleared(prompt: Prompt) -> int:
    return sum(text != CLEARED for _, text in prompt)


ALWAYS_EDITED = context_editing(window=1, claude_window=200_000)  # trigger 0 tokens


def test_with_context_editing_claude_code_judges_its_line_on_the_edited_prompt() -> None:
    case = _case()
    alone = compacting(case, "anthropic", Compacting(line=10, keep_task=False), uncleared)
    edited = Compacting(line=10, keep_task=False, edit=ALWAYS_EDITED)
    sent = compacting(case, "anthropic", edited, uncleared)
    # call 4 holds 10 messages, one of them a cleared result; call 5 12, two cleared
    assert list(alone.summarising) == [4]
    assert list(sent.summarising) == [5]


def test_context_editing_clears_all_but_the_latest_three_results() -> None:
    case = _case()
    edited = Compacting(line=100, keep_task=False, edit=ALWAYS_EDITED)
    sent = compacting(case, "anthropic", edited, messages)
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
    assert CLAUDE_CODE.prices.billed(Billing(100, 60)) == pytest.approx(40 * 1.25 + 60 * 0.1)
    assert Prices(cached=0.25).billed(Billing(100, 60)) == pytest.approx(40 + 15)


def test_a_long_session_is_its_trajectories_steps_up_to_each_last_call() -> None:
    case = _case()
    (long,) = long_cases([case, case], 2, lambda texts: [len(t.split()) for t in texts])
    assert long.calls == 2 * case.calls - 1
    body = request("gemini", long.trajectory, long.calls - 1)
    assert rendered(long, body) == long.session.history(long.session.calls[-1])
