"""Session replay (benchmarks/replay): billing, cached prefixes, needed-later
recall and windows on a tiny hand-made trajectory whose figures are computed
by hand. Token counts are words here, so every figure can be checked on paper."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from ctxopt.tokens import TokenCounter

from benchmarks.replay.ledger import Billing, bill_calls, billed_tokens, shared_prefix
from benchmarks.replay.methods import FullHistory, python_methods
from benchmarks.replay.report import Tally
from benchmarks.replay.sessions import Prompt, Session, session_of

NEEDED = "def parse_section(self, name): needed later"  # >= 25 characters
SYSTEM = "you are a careful agent"  # 5 words
TASK = "fix the parser"  # 3
CALL_1 = "THOUGHT ```bash\ncat a.py\n```"  # 5
OUTPUT_1 = f"<returncode>0</returncode>\n{NEEDED}\n<output>x</output>"  # 7
CALL_2 = f"THOUGHT edit {NEEDED}"  # 7
OUTPUT_2 = "<returncode>0</returncode> ok"  # 2
SUBMIT = "THOUGHT done"  # 2
RECORD = {
    "instance_id": "hand-1",
    "submission": "diff --git a/a.py b/a.py",
    "messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": TASK},
        {"role": "assistant", "content": CALL_1},
        {"role": "user", "content": OUTPUT_1},
        {"role": "assistant", "content": CALL_2},
        {"role": "user", "content": OUTPUT_2},
        {"role": "assistant", "content": SUBMIT},
    ],
}


def words(texts: Sequence[str]) -> list[int]:
    return [len(t.split()) for t in texts]


@pytest.fixture
def session() -> Session:
    return session_of(RECORD, words)


def full_prompts(session: Session) -> list[Prompt]:
    return [FullHistory().prompt(session, call, 10**6)[0] for call in session.calls]


def test_calls_are_the_assistant_messages_after_the_task(session: Session) -> None:
    assert session.calls == (2, 4, 6)
    assert session.history(4) == (
        ("system", SYSTEM),
        ("user", TASK),
        ("model", CALL_1),
        ("user", OUTPUT_1),
    )


def test_final_size_is_the_history_at_the_last_call(session: Session) -> None:
    assert session.final_tokens == 5 + 3 + 5 + 7 + 7 + 2


def test_windows_are_40_percent_and_128k_only_past_it(session: Session) -> None:
    assert session.windows() == {"40%": int(29 * 0.4)}
    long = session_of(RECORD, lambda texts: [50_000 for _ in texts])
    assert long.windows() == {"40%": 120_000, "128k": 128_000}


def test_full_history_bills_each_call_against_the_one_before(session: Session) -> None:
    billings = bill_calls(full_prompts(session), words)
    # prompts: 5+3 = 8; 8+5+7 = 20; 20+7+2 = 29; each call's prefix is the previous prompt
    assert billings == [Billing(8, 0), Billing(20, 8), Billing(29, 20)]
    assert sum(b.billed(0.25) for b in billings) == pytest.approx(8 + (12 + 2) + (9 + 5))
    assert sum(b.billed(0.1) for b in billings) == pytest.approx(8 + (12 + 0.8) + (9 + 2))


def test_a_rewritten_message_ends_the_cached_prefix() -> None:
    first: Prompt = (("system", SYSTEM), ("user", TASK), ("model", CALL_1), ("user", OUTPUT_1))
    masked: Prompt = (("system", SYSTEM), ("user", TASK), ("model", CALL_1), ("user", "[gone]"))
    grown: Prompt = (*masked, ("model", CALL_2), ("user", OUTPUT_2))
    billings = bill_calls([first, grown], words)
    # system, task and the call before the masked output are shared: 5+3+5 of 5+3+5+1+7+2
    assert billings[1] == Billing(23, 13)
    assert billings[1].billed(0.25) == 10 + 3.25


def test_shared_prefix_compares_role_and_text_in_order() -> None:
    a: Prompt = (("system", "s"), ("user", "t"), ("model", "m"))
    assert shared_prefix(a, a) == 3
    assert shared_prefix(a, a[:2]) == 2
    assert shared_prefix(a, (("system", "s"), ("model", "t"), ("model", "m"))) == 1
    assert shared_prefix((), a) == 0


def test_billed_tokens_price_the_cached_part_at_the_ratio() -> None:
    assert billed_tokens(100, 0, 0.25) == 100
    assert billed_tokens(100, 100, 0.1) == pytest.approx(10)
    assert billed_tokens(100, 60, 0.25) == 40 + 15


def test_needed_later_lines_are_earlier_outputs_a_later_answer_quotes(session: Session) -> None:
    assert session.needed(2) == ()  # no tool output yet
    assert session.needed(4) == (NEEDED,)  # CALL_2 (this call's answer) quotes OUTPUT_1
    assert session.needed(6) == ()  # nothing after the last call quotes it


def test_tally_recall_cache_share_and_over_window(session: Session) -> None:
    prompts = full_prompts(session)
    dropped = [prompts[0], prompts[1][:3], prompts[2]]  # call 4 without OUTPUT_1
    kept, lost = Tally(), Tally()
    kept.add(session, 25, prompts, [0.0, 0.0, 0.0], words)
    lost.add(session, 25, dropped, [0.0, 0.0, 0.0], words)
    full = kept.summary(0.25, (0.25, 0.1))
    assert full["needed_later_recall"] == 1.0 and full["recall_calls"] == 1
    assert full["over_window_calls"] == 1  # 29 > 25
    assert full["prompt_tokens"] == 57 and full["cached_tokens"] == 28
    assert full["billed_tokens"] == 8 + 14 + 14
    assert full["billed_tokens_by_ratio"]["0.1"] == round(8 + 12.8 + 11)
    assert full["cache_hit_share"] == round(28 / 57, 4)
    assert lost.summary(0.25, (0.25,))["needed_later_recall"] == 0.0


def test_tally_refuses_a_prompt_count_that_is_not_the_call_count(session: Session) -> None:
    with pytest.raises(ValueError, match="hand-1: 2 prompts"):
        Tally().add(session, 25, full_prompts(session)[:2], [0.0, 0.0], words)


def test_quality_methods_give_prompts_of_roles_and_texts(session: Session) -> None:
    counter = TokenCounter()
    methods = python_methods(counter)
    history = session.history(6)
    roomy, _ = methods["obs-mask"].prompt(session, 6, 10**6)
    assert roomy == history  # everything fits: nothing masked
    tight, ms = methods["obs-mask"].prompt(
        session, 6, sum(counter.count_many([t for _, t in history])) - 1
    )
    assert [role for role, _ in tight] == [role for role, _ in history]
    assert tight[3] != history[3] and tight[5] == history[5]  # the older output masked
    assert ms >= 0
