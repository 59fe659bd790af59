"""What each analyzer step is worth: BM25-only selection on the development data.

Every variant ranks a history's chunks by BM25 (ctxopt's index) over its own
terms and keeps them in score order while they fit the budget (ties: newest
first); nothing else (no recency, no structure) takes part, so the differences
are the analyzer's alone.

- LoCoMo: one chunk per turn (`[date] speaker: text`), query = the question
  (categories 1-4); evidence-turn recall and the share of questions with all
  evidence kept.
- SWE-agent: history before the final assistant message, query = the task
  plus the last two messages (those, and the system prompt, are always kept);
  patch-hunk coverage, and the hunk MRR (per hunk, 1 / rank of the first
  optional message that holds one of its lines), which sees ranking changes
  that a budget cut hides.

Single budgets are noisy on 55 trajectories (one hunk is ~1.5 points), so the
mean over budgets 10%, 20%, ..., 90% is reported too.

Variants: plain (lowercase `\\w+`), then identifier splitting, stopwords and
stemming added one at a time; then the analyzer's default (stopwords and
stemming: identifier splitting did not pay here, see the module docstring of
ctxopt.text.analyzer) and the default minus each of its steps.

    .venv/bin/python -m benchmarks.analyzer_ablation [--data ../shared/datasets] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from ctxopt.text.analyzer import Analyzer
from ctxopt.text.bm25 import BM25Index
from ctxopt.tokens import TokenCounter

from benchmarks.quality.datasets import (
    LOCOMO_FILE,
    SWE_FILE,
    Case,
    Conversation,
    SweData,
    load_locomo,
    load_swe,
)
from benchmarks.quality.metrics import (
    all_evidence_kept,
    evidence_recall,
    hunk_coverage,
    hunk_covered,
    mean,
)

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
RESULTS = Path(__file__).resolve().parent / "results"
BUDGETS = (0.5, 0.3, 0.2)  # reported one by one (the datasets README's budgets)
SWEEP = tuple(b / 10 for b in range(1, 10))  # averaged: steadier than any single budget
ALL_BUDGETS = tuple(sorted({*BUDGETS, *SWEEP}))
SMOKE = {"conversations": 1, "questions": 20, "trajectories": 4}


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    split_identifiers: bool
    stopwords: bool
    stem: bool

    def analyzer(self) -> Analyzer:
        return Analyzer(
            split_identifiers=self.split_identifiers, stopwords=self.stopwords, stem=self.stem
        )


VARIANTS = (
    Variant("plain", False, False, False),
    Variant("+identifier split", True, False, False),
    Variant("+stopwords", True, True, False),
    Variant("+stemming", True, True, True),
    Variant("default (stop+stem)", False, True, True),
    Variant("default - stopwords", False, False, True),
    Variant("default - stemming", False, True, False),
)


def keep_in_order(case: Case, order: Sequence[str], budget: float) -> set[str]:
    """The mandatory chunks, then each chunk in `order` that still fits
    `budget` x the history's tokens (one that does not fit is skipped)."""
    tokens = {c.id: c.tokens for c in case.chunks}
    kept = set(case.mandatory)
    room = int(case.prompt_tokens * budget) - sum(tokens[i] for i in kept)
    for chunk_id in order:
        if chunk_id not in kept and tokens[chunk_id] <= room:
            kept.add(chunk_id)
            room -= tokens[chunk_id]
    return kept


class Ranker:
    """One history's BM25 index under one analyzer (rebuilt when the history changes)."""

    def __init__(self, analyzer: Analyzer) -> None:
        self.analyzer = analyzer
        self.key = ""
        self.index = BM25Index()

    def order(self, case: Case) -> list[str]:
        if case.key != self.key:
            self.key, self.index = case.key, BM25Index()
            for slot, chunk in enumerate(case.chunks):
                self.index.set_doc(slot, self.analyzer.terms(chunk.text))
        n = len(case.chunks)
        scores = self.index.scores(self.analyzer.terms(case.query), n)
        ranked = np.lexsort((-np.arange(n), -scores))  # by score, ties: newest first
        return [case.chunks[i].id for i in ranked]


def locomo_scores(variant: Variant, conversations: Sequence[Conversation]) -> dict[str, float]:
    ranker = Ranker(variant.analyzer())
    recall: dict[float, list[float]] = {b: [] for b in ALL_BUDGETS}
    complete: dict[float, list[float]] = {b: [] for b in BUDGETS}
    for conversation in conversations:
        for question in conversation.questions:
            case = conversation.case(question)
            order = ranker.order(case)
            for budget in ALL_BUDGETS:
                kept = keep_in_order(case, order, budget)
                recall[budget].append(evidence_recall(question.evidence, kept))
                if budget in complete:
                    complete[budget].append(float(all_evidence_kept(question.evidence, kept)))
    out = {f"recall@{b:.0%}": mean(recall[b]) for b in BUDGETS}
    out |= {f"all_kept@{b:.0%}": mean(complete[b]) for b in BUDGETS}
    out["recall_mean"] = mean([mean(recall[b]) for b in SWEEP])
    return out


def hunk_reciprocal_ranks(
    case: Case, order: Sequence[str], hunks: Sequence[Sequence[str]]
) -> list[float]:
    """Per hunk, 1 / the rank (among optional chunks) of the best-ranked chunk
    holding one of its lines; 0 when only a mandatory chunk holds it."""
    texts = {c.id: c.text for c in case.chunks}
    optional = [i for i in order if i not in case.mandatory]
    ranks = []
    for lines in hunks:
        rank = next((r for r, i in enumerate(optional, 1) if hunk_covered(lines, texts[i])), 0)
        ranks.append(1 / rank if rank else 0.0)
    return ranks


def swe_scores(variant: Variant, swe: SweData) -> dict[str, float]:
    ranker = Ranker(variant.analyzer())
    coverage: dict[float, list[float]] = {b: [] for b in ALL_BUDGETS}
    reciprocal_ranks: list[float] = []
    for trajectory in swe.trajectories:
        case = trajectory.case
        order = ranker.order(case)
        texts = {c.id: c.text for c in case.chunks}
        for budget in ALL_BUDGETS:
            kept = keep_in_order(case, order, budget)
            prompt = "\n".join(texts[c.id] for c in case.chunks if c.id in kept)
            coverage[budget].append(hunk_coverage(trajectory.hunks, prompt))
        reciprocal_ranks += hunk_reciprocal_ranks(case, order, trajectory.hunks)
    out = {f"coverage@{b:.0%}": mean(coverage[b]) for b in BUDGETS}
    out["coverage_mean"] = mean([mean(coverage[b]) for b in SWEEP])
    out["hunk_mrr"] = mean(reciprocal_ranks)
    return out


COLUMNS = (
    ("LoCoMo recall@30%", "recall@30%"),
    ("recall@20%", "recall@20%"),
    ("all kept@30%", "all_kept@30%"),
    ("recall 10-90%", "recall_mean"),
    ("SWE cover@30%", "coverage@30%"),
    ("cover@20%", "coverage@20%"),
    ("cover 10-90%", "coverage_mean"),
    ("hunk MRR", "hunk_mrr"),
)


def print_table(rows: Sequence[dict[str, Any]]) -> None:
    print(f"{'variant':<24} " + " ".join(f"{title:>17}" for title, _ in COLUMNS))
    for row in rows:
        print(f"{row['variant']:<24} " + " ".join(f"{row[key]:>17.4f}" for _, key in COLUMNS))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="datasets dir (../shared/datasets)"
    )
    parser.add_argument("--smoke", action="store_true", help="a few questions, for CI")
    parser.add_argument("--out", type=Path, default=RESULTS / "analyzer_ablation.json")
    args = parser.parse_args(argv)
    limits = SMOKE if args.smoke else dict.fromkeys(SMOKE, 0)
    count = TokenCounter().count_many
    conversations = load_locomo(
        args.data / LOCOMO_FILE, count, limits["conversations"], limits["questions"]
    )
    swe = load_swe(args.data / SWE_FILE, count, limits["trajectories"])
    rows = []
    for variant in VARIANTS:
        start = time.perf_counter()
        row: dict[str, Any] = {"variant": variant.name}
        row |= locomo_scores(variant, conversations)
        row |= swe_scores(variant, swe)
        row["seconds"] = time.perf_counter() - start
        rows.append(row)
    questions = sum(len(c.questions) for c in conversations)
    print(
        f"LoCoMo: {len(conversations)} conversations, {questions} questions (categories 1-4); "
        f"SWE: {len(swe.trajectories)} trajectories ({len(swe.skipped)} skipped, ungrounded)"
    )
    print_table(rows)
    meta = {
        "locomo_conversations": len(conversations),
        "locomo_questions": questions,
        "swe_trajectories": len(swe.trajectories),
        "swe_skipped": list(swe.skipped),
        "budgets": list(BUDGETS),
        "mean_over_budgets": list(SWEEP),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
