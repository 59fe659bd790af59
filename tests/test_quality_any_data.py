"""The quality benchmark runs on data it was never shown: queries are built as
clients build them, and a case the engine refuses is counted, not a crash."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from ctxopt.engine import Engine
from ctxopt.model import Strategy

from benchmarks.quality.datasets import (
    MAX_QUERY_CHARS,
    Conversation,
    Question,
    Trajectory,
    client_query,
    trajectory_steps,
)
from benchmarks.quality.evaluate import Run, run_locomo, run_needed
from benchmarks.quality.methods import EngineMethod
from benchmarks.quality.report import needed_table, results_json
from tests import factory

NEEDED = "def compute_total(values, scale_factor):"


def words(texts: Sequence[str]) -> list[int]:
    return [len(t.split()) for t in texts]


@pytest.fixture
def engine() -> Iterator[Engine]:
    made = factory.engine()
    yield made
    made.close()


def huge_output_trajectory() -> list[dict[str, Any]]:
    """A session whose latest message (a tool output) alone passes the
    service's query limit, as a 215,839-character output did on real data."""
    huge = "\n".join(f"log line {i} of a very long build" for i in range(8000))
    assert len(huge) > MAX_QUERY_CHARS
    return [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix compute_total."},
        {"role": "assistant", "content": "THOUGHT: read\n```bash\ncat a.py\n```"},
        {"role": "user", "content": f"<returncode>0</returncode><output>\n{NEEDED}\n</output>"},
        {"role": "assistant", "content": "THOUGHT: build\n```bash\nmake\n```"},
        {"role": "user", "content": f"<returncode>2</returncode><output>{huge}</output>"},
        {"role": "assistant", "content": f"THOUGHT: the bug is in {NEEDED}"},
    ]


def test_a_step_whose_latest_message_passes_the_limit_is_optimized_not_refused(
    engine: Engine,
) -> None:
    steps = trajectory_steps("t", huge_output_trajectory(), "", words)
    step = steps[-1]
    assert len(step.case.query) <= MAX_QUERY_CHARS
    assert step.case.query.startswith("Fix compute_total.")
    assert step.case.query.endswith("</output>")  # the output's tail, where it ended
    kept = EngineMethod("default", engine, Strategy.HYBRID).select(step.case, 0.5)
    assert kept.refused == ""


def test_client_query_is_whole_when_it_fits_and_within_the_limit_otherwise() -> None:
    assert client_query("task", ["a", "b"], limit=100) == "task\na\nb"
    clipped = client_query("T" * 50, ["short", "L" * 200], limit=60)
    assert len(clipped) == 60
    task, short, latest = clipped.split("\n")
    assert short == "short"  # a piece under its share stays whole
    assert task == "T" * 26 and latest == "L" * 27  # the rest shared equally


def test_a_refused_case_is_scored_as_the_client_fallback_and_counted(engine: Engine) -> None:
    chunks = trajectory_steps("t", huge_output_trajectory(), "", words)[-1].case.chunks
    refused_question = Question("x" * (MAX_QUERY_CHARS + 1), 1, frozenset({chunks[3].id}))
    answered = Question("compute_total", 1, frozenset({chunks[3].id}))
    conversation = Conversation("c", chunks, (refused_question, answered))
    run = Run([EngineMethod("default", engine, Strategy.HYBRID)], [0.5])
    run_locomo(run, [conversation])
    tally = run.locomo["default"].tallies[0.5]
    assert tally.refused == 1
    assert len(tally.scores) == 2  # the refused question is scored, not skipped
    results = results_json(run, ["default"], {})
    assert results["methods"]["default"]["locomo"]["budgets"]["50%"]["refused"] == 1


def test_needed_later_recall_is_reported_per_point_of_the_trajectory(engine: Engine) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix the bug."},
    ]
    for i in range(7):
        messages.append({"role": "assistant", "content": f"THOUGHT: step {i}\n```bash\nls\n```"})
        messages.append(
            {"role": "user", "content": f"<returncode>0</returncode>\nline of step {i} {NEEDED}"}
        )
    messages.append({"role": "assistant", "content": f"quoting line of step 0 {NEEDED}"})
    steps = trajectory_steps("t", messages, "", words)
    assert [s.point for s in steps] == [0.25, 0.5, 0.75, 1.0]
    trajectory = Trajectory("t", steps[-1].case, (), steps)
    run = Run([EngineMethod("default", engine, Strategy.HYBRID)], [0.9])
    run_needed(run, trajectory)
    by_point = run.swe["default"].tallies[0.9].needed
    assert sorted(by_point) == [0.25, 0.5, 0.75, 1.0]
    table = needed_table(results_json(run, ["default"], {}))
    assert "@25%" in table and "@100%" in table
