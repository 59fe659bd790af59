"""How much needed-later recall any line-level choice could reach, and how much
the signals a history holds can predict.

    .venv/bin/python -m benchmarks.quality.headroom [--data ../shared/datasets]
        [--smoke] [--out benchmarks/results/headroom.json]

At every needed-later step (benchmarks.quality.datasets.trajectory_steps) and
budget, the mandatory chunks (system prompt, task, the last two messages) are
kept and every other line of the history, as a unit of its own, competes for
the rest of the budget (cl100k tokens). Four orders fill it:

- `oracle`: the needed lines first: the most any line-level choice can keep
  (mandatory chunks can hold the budget by themselves);
- `learned`: a logistic model of "this line holds a needed line" over the
  line's features below, fitted on the other folds' steps (5 folds by
  trajectory, as benchmarks.quality.cv), lines taken by probability per token;
- `learned with pairs`: the same over the features and every product of two
  of them (a file view's code lines, a quoted error line ...);
- `recency`: newest lines first;
- and the shipped default's plan (whole chunks and excerpts), for reference.

The learned model is an estimate of what the signals can predict, not a
method the service runs: it sees the whole history's lines at once and no
coherence rule. Features of a line: written by the model (else a tool
output), quoted by a later model message, repeated in another chunk, a
statement of code, printed by a file-viewing command, its output's age
(log of steps), shorter than the needed-line minimum, its share of query
words, an error line.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from ctxopt.engine import Engine
from ctxopt.model import ChunkKind, Role, Strategy
from ctxopt.scoring.line_value import is_error

from benchmarks.quality.cv import FOLDS, MEMORY
from benchmarks.quality.datasets import BUDGETS, DEFAULT_DATA, RESULTS, SWE_FILE, Step, load_swe
from benchmarks.quality.methods import EngineMethod, budget_tokens
from benchmarks.quality.metrics import MIN_NEEDED_CHARS, needed_recall

DEFAULT_OUT = RESULTS / "headroom.json"
FEATURES = (
    "bias",
    "model_written",
    "quoted_later",
    "repeated",
    "code",
    "file_view",
    "age",
    "short",
    "query_words",
    "error",
)
_VIEW = re.compile(r"\bsed -n\b|\bcat |\bnl |\bhead\b|\btail\b|\bgrep\b")
# A statement of source code, after a listing's line number: a definition, a return, a
# branch or loop, a decorator, or an assignment to a (dotted, subscripted) name.
_CODE = re.compile(
    r"^\s*(?:\d+[\t:|]\s*)?(?:(?:async\s+)?def |class |return\b|if |elif |else:|for |while "
    r"|try:|except\b|with |raise |@\w|[A-Za-z_][\w.]*(?:\[[^\]]*\])?\s*(?:[-+*/|&]|//)?=[^=])"
)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
L2 = 1e-3  # ridge on the logistic weights: a few thousand positives, ten features
NEWTON_STEPS = 25


@dataclass(frozen=True, slots=True)
class Line:
    text: str
    tokens: int
    features: tuple[float, ...]
    age: float
    needed: bool


@dataclass(frozen=True, slots=True)
class StepLines:
    fold: int
    step: Step
    room: dict[float, int]  # budget -> tokens left after the mandatory chunks
    mandatory_text: str
    lines: tuple[Line, ...]


def step_lines(step: Step, fold: int, count: Callable[[Sequence[str]], list[int]]) -> StepLines:
    chunks = step.case.chunks
    mandatory = [c for c in chunks if c.id in step.case.mandatory]
    used = sum(c.tokens for c in mandatory)
    held = Counter(line.strip() for c in chunks for line in set(c.text.splitlines()))
    query_words = {w.lower() for w in _WORD.findall(step.case.query)}
    found: list[tuple[str, tuple[float, ...], float]] = []
    for index, chunk in enumerate(chunks):
        if chunk.id in step.case.mandatory:
            continue
        written = chunk.role == Role.MODEL
        command = chunks[index - 1].text if chunk.kind == ChunkKind.TOOL_RESULT else ""
        later = "\n".join(c.text for c in chunks[index + 1 :] if c.role == Role.MODEL)
        age = (len(chunks) - index) / 2
        for raw in chunk.text.splitlines():
            text = raw.strip()
            if not text:
                continue
            words = {w.lower() for w in _WORD.findall(text)}
            long = len(text) >= MIN_NEEDED_CHARS
            features = (
                1.0,
                float(written),
                float(not written and long and text in later),
                float(long and held[text] > 1),
                float(bool(_CODE.match(raw))),
                float(bool(_VIEW.search(command))),
                math.log1p(age) / 3,
                float(not long),
                len(words & query_words) / max(1, len(words)),
                float(is_error(raw)),
            )
            found.append((text, features, age))
    tokens = count([text for text, _, _ in found])
    lines = tuple(
        Line(text, n, features, age, any(needed in text for needed in step.needed))
        for (text, features, age), n in zip(found, tokens, strict=True)
    )
    room = {b: budget_tokens(step.case, b) - used for b in BUDGETS}
    return StepLines(fold, step, room, "\n".join(c.text for c in mandatory), lines)


def with_pairs(features: tuple[float, ...]) -> list[float]:
    """The features (bias first) and the product of every two of the others."""
    rest = features[1:]
    return [*features, *(a * b for i, a in enumerate(rest) for b in rest[i:])]


def fit(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Logistic regression by Newton's method with a small ridge."""
    w = np.zeros(x.shape[1])
    ridge = L2 * np.eye(x.shape[1])
    for _ in range(NEWTON_STEPS):
        p = 1 / (1 + np.exp(-x @ w))
        gradient = x.T @ (p - y) / len(y) + L2 * w
        hessian = (x.T * (p * (1 - p))) @ x / len(y) + ridge
        w -= np.linalg.solve(hessian, gradient)
    return w


def recall_by_order(
    steps: Sequence[StepLines], budget: float, key: Callable[[StepLines, Line], float]
) -> float:
    """Mean needed-later recall when each step's lines fill its room by `key`,
    highest first (a line that does not fit is skipped)."""
    recalls = []
    for s in steps:
        room, kept = s.room[budget], [s.mandatory_text]
        for line in sorted(s.lines, key=lambda line: -key(s, line)):
            if line.tokens <= room:
                room -= line.tokens
                kept.append(line.text)
        recalls.append(needed_recall(s.step.needed, "\n".join(kept)))
    return float(np.mean(recalls))


def run(data: Path, smoke: bool) -> dict[str, Any]:
    engine = Engine(MEMORY)
    count = engine.counter.count_many
    trajectories = load_swe(data / SWE_FILE, count, limit=FOLDS if smoke else 0).trajectories
    steps = [
        step_lines(step, number % FOLDS, count)
        for number, trajectory in enumerate(trajectories)
        for step in trajectory.steps
    ]
    weights: dict[int, npt.NDArray[np.float64]] = {}
    pair_weights: dict[int, npt.NDArray[np.float64]] = {}
    for fold in range(FOLDS):
        train = [line for s in steps if s.fold != fold for line in s.lines]
        y = np.array([float(line.needed) for line in train])
        weights[fold] = fit(np.array([line.features for line in train]), y)
        pair_weights[fold] = fit(np.array([with_pairs(line.features) for line in train]), y)

    def learned(s: StepLines, line: Line) -> float:
        z = float(np.dot(weights[s.fold], line.features))
        return 1 / (1 + math.exp(-z)) / line.tokens

    def learned_with_pairs(s: StepLines, line: Line) -> float:
        z = float(np.dot(pair_weights[s.fold], with_pairs(line.features)))
        return 1 / (1 + math.exp(-z)) / line.tokens

    default = EngineMethod("default", engine, Strategy.HYBRID)
    rows: dict[str, dict[str, float]] = {
        "oracle": {},
        "learned": {},
        "learned with pairs": {},
        "recency": {},
        "default": {},
    }
    for budget in BUDGETS:
        label = f"{budget:.0%}"
        rows["oracle"][label] = recall_by_order(
            steps, budget, lambda _, line: line.needed - line.tokens * 1e-9
        )
        rows["learned"][label] = recall_by_order(steps, budget, learned)
        rows["learned with pairs"][label] = recall_by_order(steps, budget, learned_with_pairs)
        rows["recency"][label] = recall_by_order(steps, budget, lambda _, line: -line.age)
        rows["default"][label] = float(
            np.mean(
                [
                    needed_recall(
                        s.step.needed, default.select(s.step.case, budget).text(s.step.case)
                    )
                    for s in steps
                ]
            )
        )
    return {
        "steps": len(steps),
        "trajectories": len(trajectories),
        "recall": rows,
        "learned_weights": {
            f"fold {fold}": dict(zip(FEATURES, np.round(w, 3).tolist(), strict=True))
            for fold, w in weights.items()
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.quality.headroom",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--smoke", action="store_true", help="five trajectories")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if not (args.data / SWE_FILE).is_file():
        parser.error(f"--data {args.data}: no {SWE_FILE} there")
    started = time.perf_counter()
    results = run(args.data, args.smoke)
    results["command"] = " ".join(
        ["python -m benchmarks.quality.headroom", *(argv or sys.argv[1:])]
    )
    results["seconds"] = round(time.perf_counter() - started, 1)
    print(
        f"needed-later recall, {results['steps']} steps of {results['trajectories']} trajectories"
    )
    print(f"{'order':20}" + "".join(f"{f'{b:.0%}':>8}" for b in BUDGETS))
    for name, row in results["recall"].items():
        print(f"{name:20}" + "".join(f"{v:8.3f}" for v in row.values()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out} in {results['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
