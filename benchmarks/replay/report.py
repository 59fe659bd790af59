"""Per-call figures of a replay, their totals per method and window, the
tables and the JSON."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks.quality.datasets import CountTokens
from benchmarks.quality.metrics import needed_recall
from benchmarks.replay.ledger import Billing, bill_calls
from benchmarks.replay.sessions import Prompt, Session

# What became of the tool output a lost needed line came from (replay.mjs's fate codes)
LOSS_CAUSES = {
    "r": "stashed whole",
    "t": "trimmed excerpt",
    "m": "masked",
    "c": "clipped to fit",
}


@dataclass(frozen=True, slots=True)
class SessionFigures:
    """One session's calls under one method and window."""

    billings: list[Billing]
    recalls: list[float]
    ms: list[float]
    over_window: int


def loss_cause(
    session: Session, call: int, line: str, fates: Mapping[int, str], outcome: str
) -> str:
    """Why a needed line is missing from the prompt of `call`: the fate of the
    latest tool output that held it (removed by local truncation when the
    call fell back)."""
    history = session.history(call)
    sources = [
        index
        for index, (role, text) in enumerate(history)
        if index >= 2 and role == "user" and line in text
    ]
    fate = fates.get(sources[-1], "") if sources else ""
    if fate == "r" and outcome == "fallback":
        return "dropped by local truncation"
    return LOSS_CAUSES.get(fate, "other")


@dataclass(slots=True)
class Tally:
    """One method under one window, over every replayed session."""

    billings: list[Billing] = field(default_factory=list)
    recalls: list[float] = field(default_factory=list)  # calls with a needed line
    ms: list[float] = field(default_factory=list)
    over_window: int = 0
    sessions: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)  # what the method did, per call
    over_window_outcomes: dict[str, int] = field(default_factory=dict)
    setting: dict[str, float] = field(default_factory=dict)  # ctxopt: threshold, target
    # per session: billed tokens at each call, for the plot
    billed_by_session: dict[str, list[Billing]] = field(default_factory=dict)
    by_session: dict[str, SessionFigures] = field(default_factory=dict)
    needed_lines: int = 0  # needed lines over the calls with fates (ctxopt)
    lost: dict[str, int] = field(default_factory=dict)  # missing needed lines by cause

    def add(
        self,
        session: Session,
        window: int,
        prompts: Sequence[Prompt],
        ms: Sequence[float],
        count: CountTokens,
        outcomes: Sequence[str] = (),
        fates: Sequence[Mapping[int, str]] = (),
    ) -> None:
        if len(prompts) != len(session.calls) or len(ms) != len(session.calls):
            raise ValueError(
                f"{session.instance_id}: {len(prompts)} prompts, {len(ms)} times "
                f"for {len(session.calls)} calls"
            )
        billings = bill_calls(prompts, count)
        done = outcomes or [""] * len(prompts)
        recalls: list[float] = []
        over_window = 0
        for index, (call, prompt, billing, outcome) in enumerate(
            zip(session.calls, prompts, billings, done, strict=True)
        ):
            needed = session.needed(call)
            if needed:
                text = "\n".join(text for _, text in prompt)
                recalls.append(needed_recall(needed, text))
                if fates:
                    self.needed_lines += len(needed)
                    for line in needed:
                        if line not in text:
                            cause = loss_cause(session, call, line, fates[index], outcome)
                            self.lost[cause] = self.lost.get(cause, 0) + 1
            over = billing.prompt_tokens > window
            over_window += over
            if outcome:
                self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
                if over:
                    self.over_window_outcomes[outcome] = (
                        self.over_window_outcomes.get(outcome, 0) + 1
                    )
        self.billings += billings
        self.recalls += recalls
        self.over_window += over_window
        self.ms += ms
        self.sessions += 1
        self.billed_by_session[session.instance_id] = billings
        self.by_session[session.instance_id] = SessionFigures(
            billings, recalls, list(ms), over_window
        )

    @classmethod
    def of(cls, figures: Mapping[str, SessionFigures]) -> Tally:
        """A tally of sessions' figures (billing, recall, latency, over-window)."""
        tally = cls()
        for instance_id, figure in figures.items():
            tally.billings += figure.billings
            tally.recalls += figure.recalls
            tally.ms += figure.ms
            tally.over_window += figure.over_window
            tally.sessions += 1
            tally.by_session[instance_id] = figure
        return tally

    def restricted(self, sessions: Collection[str]) -> Tally:
        """The figures of `sessions` only."""
        return Tally.of({i: self.by_session[i] for i in sessions})

    def billed(self, ratio: float) -> float:
        return sum(b.billed(ratio) for b in self.billings)

    def mean_recall(self) -> float:
        return float(np.mean(self.recalls)) if self.recalls else 1.0

    def summary(self, ratio: float, ratios: Sequence[float]) -> dict[str, Any]:
        prompt = sum(b.prompt_tokens for b in self.billings)
        cached = sum(b.cached_tokens for b in self.billings)
        calls = len(self.billings)
        return {
            "billed_tokens": round(sum(b.billed(ratio) for b in self.billings)),
            "billed_tokens_by_ratio": {
                str(r): round(sum(b.billed(r) for b in self.billings)) for r in ratios
            },
            "prompt_tokens": prompt,
            "mean_prompt_tokens": round(prompt / calls, 1) if calls else None,
            "cached_tokens": cached,
            "cache_hit_share": round(cached / prompt, 4) if prompt else None,
            "needed_later_recall": round(float(np.mean(self.recalls)), 4) if self.recalls else None,
            "needed_later_recall_min": round(min(self.recalls), 4) if self.recalls else None,
            "recall_calls": len(self.recalls),
            "over_window_calls": self.over_window,
            "calls": calls,
            "sessions": self.sessions,
            **{f"{k.removesuffix('Percent')}_percent": v for k, v in self.setting.items()},
            "p50_ms": percentile(self.ms, 50),
            "p99_ms": percentile(self.ms, 99),
            **(
                {
                    "outcomes": dict(sorted(self.outcomes.items())),
                    "over_window_outcomes": dict(sorted(self.over_window_outcomes.items())),
                }
                if self.outcomes
                else {}
            ),
            **(
                {
                    "needed_lines": self.needed_lines,
                    "lost_needed_lines": dict(sorted(self.lost.items(), key=lambda kv: -kv[1])),
                }
                if self.needed_lines
                else {}
            ),
        }


def percentile(values: Sequence[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None


COLUMNS = (
    "method",
    "billed (r={ratio})",
    "billed (r={other})",
    "mean prompt",
    "cache hits",
    "recall mean",
    "recall min",
    "p50 ms",
    "p99 ms",
    "over-window calls",
)


def table(
    entries: dict[str, dict[str, Any]], ratio: float, other: float, first: str = "method"
) -> str:
    """A Markdown table of one window's methods (or settings); a missing
    figure (no call, no needed line) is a dash."""
    header = [first, *(c.format(ratio=ratio, other=other) for c in COLUMNS[1:])]
    rows = [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
    ]
    for name, e in entries.items():
        cells = [
            name,
            cell(e["billed_tokens"], ",d"),
            cell(e["billed_tokens_by_ratio"][str(other)], ",d"),
            cell(e["mean_prompt_tokens"], ",.0f"),
            cell(e["cache_hit_share"], ".1%"),
            cell(e["needed_later_recall"], ".3f"),
            cell(e["needed_later_recall_min"], ".3f"),
            cell(e["p50_ms"], ".2f"),
            cell(e["p99_ms"], ".2f"),
            f"{e['over_window_calls']} / {e['calls']}",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)
