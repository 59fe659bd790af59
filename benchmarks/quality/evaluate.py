"""Run every method over both data sets at every budget and tally the metrics.

A peer that fails (cannot be installed, crashes) is dropped with its reason and
the run goes on; a failure of ctxopt's own engine or of a baseline stops it.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from benchmarks.quality.datasets import Case, Conversation, Step, Trajectory
from benchmarks.quality.methods import (
    CAUSE_GROUP,
    CAUSE_MASK,
    CAUSE_NOT_CHOSEN,
    CAUSE_REPAIR,
    CAUSE_TRIM,
    CAUSE_VALUE,
    Kept,
    Method,
    PeerUnavailable,
)
from benchmarks.quality.metrics import (
    all_evidence_kept,
    evidence_recall,
    hunk_covered,
    needed_recall,
)


@dataclass(slots=True)
class Tally:
    """One method at one budget on one data set: a score per item (question
    or trajectory), and the share of the prompt's tokens it kept."""

    scores: list[float] = field(default_factory=list)
    complete: list[bool] = field(default_factory=list)  # all evidence / all hunks kept
    kept_share: list[float] = field(default_factory=list)
    covered: int = 0  # SWE: hunks covered, pooled over trajectories
    hunks: int = 0
    needed: dict[float, list[float]] = field(default_factory=dict)  # SWE: point -> per step
    losses: Counter[str] = field(default_factory=Counter)  # lost item -> cause
    refused: int = 0  # cases the engine refused (scored as the client's fallback)

    def count(self, kept: Kept, case: str) -> None:
        """Note a refusal (once per case and budget) and say so on stderr."""
        if kept.refused:
            self.refused += 1
            print(f"[refused] {case}: {kept.refused}", file=sys.stderr)

    def all_needed(self) -> list[float]:
        return [r for point in sorted(self.needed) for r in self.needed[point]]


@dataclass(slots=True)
class Series:
    """One method on one data set."""

    tallies: dict[float, Tally]
    ms: list[float] = field(default_factory=list)  # per plan actually computed


RANKED_CAUSES = (
    CAUSE_TRIM,
    CAUSE_MASK,
    CAUSE_REPAIR,
    CAUSE_GROUP,
    CAUSE_VALUE,
    CAUSE_NOT_CHOSEN,
)


class Run:
    """The methods still running, their results, and why any peer dropped out."""

    def __init__(self, methods: Sequence[Method], budgets: Sequence[float]) -> None:
        self.methods = list(methods)
        self.budgets = list(budgets)
        self.unavailable: dict[str, str] = {}
        self.locomo: dict[str, Series] = {m.name: self._series() for m in methods}
        self.swe: dict[str, Series] = {m.name: self._series() for m in methods}
        self._memo: dict[tuple[str, str, float], Kept] = {}

    def _series(self) -> Series:
        return Series({b: Tally() for b in self.budgets})

    def drop(self, method: Method, reason: str) -> None:
        print(f"[{method.name}] unavailable: {reason}", file=sys.stderr)
        self.unavailable[method.name] = reason
        self.methods = [m for m in self.methods if m is not method]
        self.locomo.pop(method.name, None)
        self.swe.pop(method.name, None)

    def prepare(self, cases: Sequence[Case]) -> None:
        for method in list(self.methods):
            try:
                method.prepare(cases, self.budgets)
            except PeerUnavailable as err:
                self.drop(method, str(err))

    def choices(self, case: Case, series: dict[str, Series]) -> Iterable[tuple[float, Kept, Tally]]:
        """Each running method's prompt at each budget, with where to tally it."""
        for method in list(self.methods):
            for budget in self.budgets:
                kept = self._choose(method, case, budget, series[method.name])
                if kept is None:
                    break
                yield budget, kept, series[method.name].tallies[budget]

    def _choose(self, method: Method, case: Case, budget: float, series: Series) -> Kept | None:
        memo_key = (method.name, case.key, budget)
        if not method.query_dependent and memo_key in self._memo:
            return self._memo[memo_key]
        started = time.perf_counter()
        try:
            kept = method.select(case, budget)
        except Exception as err:
            if not method.peer:
                raise
            self.drop(method, f"failed on {case.key}: {type(err).__name__}: {err}")
            return None
        elapsed = (time.perf_counter() - started) * 1000
        series.ms.append(elapsed if kept.ms is None else kept.ms)
        if not method.query_dependent:
            self._memo[memo_key] = kept
        return kept

    def forget_history(self) -> None:
        """Query-independent choices of the previous history are not needed again."""
        self._memo.clear()


def cause(kept: Kept, holders: Iterable[str]) -> str:
    """Why a lost item is lost: the decision on the chunk that held it that
    came closest to keeping it (an excerpt, then a placeholder, then removal)."""
    causes = {kept.causes.get(i, CAUSE_NOT_CHOSEN) for i in holders}
    for label in RANKED_CAUSES:
        if label in causes:
            return label
    return CAUSE_NOT_CHOSEN


def run_locomo(run: Run, conversations: Sequence[Conversation]) -> None:
    for conversation in conversations:
        for question in conversation.questions:
            case = conversation.case(question)
            for _, kept, tally in run.choices(case, run.locomo):
                tally.count(kept, case.key)
                present = kept.content_ids()
                tally.scores.append(evidence_recall(question.evidence, present))
                tally.complete.append(all_evidence_kept(question.evidence, present))
                tally.kept_share.append(kept.tokens / case.prompt_tokens)
                for turn in question.evidence - present:
                    tally.losses[cause(kept, [turn])] += 1
        run.forget_history()


def run_swe(run: Run, trajectories: Sequence[Trajectory]) -> None:
    for trajectory in trajectories:
        case = trajectory.case
        for _, kept, tally in run.choices(case, run.swe):
            tally.count(kept, case.key)
            text = kept.text(case)
            covered = sum(hunk_covered(lines, text) for lines in trajectory.hunks)
            tally.scores.append(covered / len(trajectory.hunks))
            tally.complete.append(covered == len(trajectory.hunks))
            tally.kept_share.append(kept.tokens / case.prompt_tokens)
            tally.covered += covered
            tally.hunks += len(trajectory.hunks)
            for lines in trajectory.hunks:
                if not hunk_covered(lines, text):
                    holders = [c.id for c in case.chunks if hunk_covered(lines, c.text)]
                    tally.losses[cause(kept, holders)] += 1
        run.forget_history()
        run_needed(run, trajectory)


def run_needed(run: Run, trajectory: Trajectory) -> None:
    """Needed-later recall: the trajectory's steps in order, each method fed
    step by step; a step's recall goes to the tally of its budget, under its
    point of the trajectory."""
    for method in list(run.methods):
        recalls: list[tuple[float, Step, Kept]] = []
        try:
            for budget in run.budgets:
                for step in trajectory.steps:
                    kept = method.select_step(trajectory.instance_id, step.case, budget)
                    recalls.append((budget, step, kept))
            method.end_trajectory(trajectory.instance_id)
        except Exception as err:
            if not method.peer:
                raise
            run.drop(method, f"failed on {trajectory.instance_id}: {type(err).__name__}: {err}")
            continue
        for budget, step, kept in recalls:
            tally = run.swe[method.name].tallies[budget]
            tally.count(kept, step.case.key)
            recall = needed_recall(step.needed, kept.text(step.case))
            tally.needed.setdefault(step.point, []).append(recall)
