"""Session replay (benchmarks/replay): billing, cached prefixes, needed-later
recall and windows on a tiny hand-made trajectory whose figures are computed
by hand. Token counts are words here, so every figure can be checked on paper."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from ctxopt.tokens import TokenCounter

from benchmarks.latency.typescript import TS_CLIENT
from benchmarks.replay.crossval import Setting, choose, cross_validate, fold_of
from benchmarks.replay.ledger import Billing, bill_calls, billed_tokens, shared_prefix
from benchmarks.replay.methods import FullHistory, python_methods
from benchmarks.replay.node import Job, check_node, ctxopt_server, run_jobs
from benchmarks.replay.report import SessionFigures, Tally, loss_cause
from benchmarks.replay.sessions import Prompt, Session, concatenated, session_of

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


def tally_of(session: Session, billed: Sequence[int], recall: float, over: int = 0) -> Tally:
    """A tally of one session whose calls bill `billed` (nothing cached) at `recall`."""
    tally = Tally()
    tally.by_session[session.instance_id] = SessionFigures(
        [Billing(b, 0) for b in billed], [recall], [0.0] * len(billed), over
    )
    return Tally.of(tally.by_session)


def test_folds_deal_sessions_round_robin() -> None:
    assert fold_of(["a", "b", "c", "d", "e", "f", "g"], 3) == [
        ["a", "d", "g"],
        ["b", "e"],
        ["c", "f"],
    ]


def test_choose_prefers_the_best_recall_billing_under_every_baseline(session: Session) -> None:
    ids = [session.instance_id]
    grid: dict[Setting, Tally] = {
        Setting(90.0, 60.0, None, "hybrid"): tally_of(session, [50], 0.8),
        # best recall, cheaper than both
        Setting(90.0, 80.0, None, "hybrid"): tally_of(session, [90], 0.9),
        # dearer than a baseline
        Setting(95.0, 90.0, None, "hybrid"): tally_of(session, [120], 0.93),
        # over the window
        Setting(99.0, 90.0, None, "hybrid"): tally_of(session, [10], 1.0, over=1),
    }
    baselines = [tally_of(session, [100], 0.85), tally_of(session, [130], 0.86)]
    assert choose(grid, baselines, ids, 0.25) == Setting(90.0, 80.0, None, "hybrid")
    reaching: dict[Setting, Tally] = {
        **grid,
        Setting(80.0, 60.0, 2, "hybrid"): tally_of(session, [95], 0.96),
        Setting(85.0, 60.0, 2, "hybrid"): tally_of(session, [99], 0.97),
    }
    # the cheapest reaching 0.95
    assert choose(reaching, baselines, ids, 0.25) == Setting(80.0, 60.0, 2, "hybrid")
    # none cheaper
    assert choose(grid, [tally_of(session, [5], 0.5)], ids, 0.25) == Setting(
        90.0, 60.0, None, "hybrid"
    )


def test_cross_validation_reports_each_fold_on_sessions_it_did_not_choose_on() -> None:
    sessions = [session_of({**RECORD, "instance_id": f"s{i}"}, words) for i in range(4)]
    cheap, rich = Tally(), Tally()
    for i, s in enumerate(sessions):
        # `rich` keeps more, but bills over the baseline's 100 a session on s0
        cheap.by_session[s.instance_id] = SessionFigures([Billing(10, 0)], [0.5], [0.0], 0)
        rich.by_session[s.instance_id] = SessionFigures(
            [Billing(500 if i == 0 else 20, 0)], [0.9], [0.0], 0
        )
    base = Tally.of(
        {s.instance_id: SessionFigures([Billing(100, 0)], [0.8], [0.0], 0) for s in sessions}
    )
    grid: dict[Setting, Tally] = {
        Setting(90.0, 60.0, None, "hybrid"): Tally.of(cheap.by_session),
        Setting(90.0, 80.0, None, "hybrid"): Tally.of(rich.by_session),
    }
    cv = cross_validate(
        grid, {"langchain": base}, [s.instance_id for s in sessions], 0.25, (0.25,), k=4
    )
    # fold 1 (s0) is chosen on s1..s3, where rich bills 60 < 300; every other fold sees s0
    assert [f["chosen"]["target_percent"] for f in cv["per_fold"]] == [80.0, 60.0, 60.0, 60.0]
    assert (
        cv["per_fold"][0]["billed_tokens"] == 500
        and cv["per_fold"][0]["langchain_billed_tokens"] == 100
    )
    assert cv["out_of_fold"]["billed_tokens"] == 500 + 10 + 10 + 10
    assert cv["out_of_fold"]["needed_later_recall"] == round((0.9 + 0.5 * 3) / 4, 4)
    assert cv["chosen_on_all_sessions"]["target_percent"] == 60.0  # rich bills 560 > 400 overall


def test_a_missing_needed_line_is_blamed_on_what_became_of_its_tool_output(
    session: Session,
) -> None:
    # at call 4 the needed line comes from OUTPUT_1 (message 3)
    assert loss_cause(session, 4, NEEDED, {3: "r"}, "optimized") == "stashed whole"
    assert loss_cause(session, 4, NEEDED, {3: "t"}, "optimized") == "trimmed excerpt"
    assert loss_cause(session, 4, NEEDED, {3: "m"}, "optimized") == "masked"
    assert loss_cause(session, 4, NEEDED, {3: "r"}, "fallback") == "dropped by local truncation"
    assert loss_cause(session, 4, NEEDED, {}, "optimized") == "other"


def test_tally_counts_lost_needed_lines_by_cause(session: Session) -> None:
    prompts = full_prompts(session)
    dropped = [prompts[0], prompts[1][:3], prompts[2]]  # call 4 without OUTPUT_1
    tally = Tally()
    tally.add(session, 100, dropped, [0.0] * 3, words, ["", "optimized", ""], [{}, {3: "r"}, {}])
    summary = tally.summary(0.25, (0.25,))
    assert summary["needed_lines"] == 1
    assert summary["lost_needed_lines"] == {"stashed whole": 1}
    assert tally.restricted([session.instance_id]).billed(0.25) == tally.billed(0.25)


def test_gemini_turns_render_back_as_the_original_messages(session: Session) -> None:
    """The Node legs hold each answered assistant message as its prose plus a
    functionCall carrying the command once; a prompt neither leg touched
    renders back byte for byte as the history (a real server, real
    gemini-cli-core)."""
    check_node(TS_CLIENT)
    jobs = [Job(m, m, "40%", session, 10**6) for m in ("gemini-cli-native", "ctxopt")]
    with ctxopt_server() as address:
        results = list(run_jobs(jobs, address))
    assert [job.method for job, _ in results] == ["gemini-cli-native", "ctxopt"]
    for _, result in results:
        assert result.prompts == [session.history(call) for call in session.calls]


def test_long_sessions_chain_trajectories_under_the_first_task(session: Session) -> None:
    other = session_of({**RECORD, "instance_id": "hand-2", "submission": "diff b"}, words)
    third = session_of({**RECORD, "instance_id": "hand-3"}, words)
    [long] = concatenated([session, other, third], 2, words)  # the third has no partner
    assert long.instance_id == "hand-1..hand-2" and long.submission == "diff b"
    # the first final answer is left out, so a model turn follows every tool output
    roles = [role for role, _ in long.messages]
    assert roles == ["system", "user"] + ["model", "user"] * 4 + ["model"]
    assert long.messages[6] == ("model", CALL_1) and long.calls == (2, 4, 6, 8, 10)
    assert long.final_tokens == sum(words([t for _, t in long.messages[:-1]]))
