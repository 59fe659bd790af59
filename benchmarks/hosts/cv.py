"""The gateway's schedule constants chosen out of fold, from a run of `benchmarks.hosts`.

    python -m benchmarks.hosts --long K --sweep 95/30,80/60,... [...] --out RUN.json
    python -m benchmarks.hosts.cv RUN.json [RUN.json ...] [--before NAME] [--out PATH]

Fold k holds long session k and the K trajectories it is made of, so no
trajectory is scored in a fold it helped choose for. For each fold, the
ctxopt settings of RUN (its default, `ctxopt`, and every `--sweep` point,
`ctxopt 95/30`, from their per-session figures) are scored on the
other folds, per host: billed input over the host alone's and needed-later
recall against the host's, on the long sessions and on the single
trajectories. A candidate qualifies when its long sessions' recall is at
least the host's + LONG_RECALL_MARGIN on every host and its trajectories'
recall at least the host's on Claude Code and Codex CLI (the issue's bar;
Gemini CLI's own recall on the short ones is no bar: it sends requests over
the window). Among those the one with the lowest worst bill against its bar
(LONG_BILL_BAR on long sessions, SHORT_BILL_BAR on Claude Code's and Codex's
trajectories) is chosen; when none qualifies, the one missing all the bars by
the least: recall under its bar plus bill over its bar, summed over the
cells (`--per-host`: a setting per host, on that host's bars alone,
for per-host constants). Fold k is then scored with its choice; the pooled held-out
figures are printed beside each candidate's in-sample ones and the host's
recall. Several runs of the same trajectories (variants split over
processes) are read as one (a later run's default is named `ctxopt
default@<its file's stem>`, as it may differ); `--before` names the setting
that stands for the previous default, left out of the choice.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"
LONG_RECALL_MARGIN = 0.05
LONG_BILL_BAR = 0.9
SHORT_BILL_BAR = 1.0
RECALL_BAR_HOSTS = ("Claude Code", "Codex CLI")  # on the single trajectories
HOST, CTXOPT = "host", "ctxopt"
EVERY_HOST = "every host"  # one setting chosen for all hosts


@dataclass(frozen=True, slots=True)
class Figures:
    """Pooled over some sessions: billed tokens, and recall as sum and count."""

    billed: float = 0.0
    recall_sum: float = 0.0
    recall_calls: int = 0

    def __add__(self, other: Figures) -> Figures:
        return Figures(
            self.billed + other.billed,
            self.recall_sum + other.recall_sum,
            self.recall_calls + other.recall_calls,
        )

    @property
    def recall(self) -> float:
        return self.recall_sum / self.recall_calls if self.recall_calls else 1.0


Table = dict[tuple[str, str, str], dict[str, Figures]]  # (length, host, method) -> session


def table_of(
    results: dict[str, Any], default: str = CTXOPT, gemini_threshold: float | None = None
) -> tuple[Table, dict[str, int]]:
    """Every row's and sweep point's per-session figures (the server's default
    named `default`), and each session's fold: long session k, and the
    trajectories k*K to k*K+K-1 it is made of (prompts.long_cases). A run
    with Gemini CLI's threshold raised is other candidates (named with it),
    but at `gemini_threshold`: then it is the same settings' Gemini CLI cells
    (the threshold `ctxopt run gemini` sets).

    >>> row = {"host": "Codex CLI", "by_session": {"a": [10, 1.0, 2], "b": [5, 0.0, 0]}}
    >>> run = {"rows": [{**row, "method": "host"}, {**row, "method": "ctxopt"}],
    ...        "frontier": [{**row, "schedule": "default"}, {**row, "schedule": "80/60"}],
    ...        "long": {"trajectories_per_session": 2, "rows": [], "frontier": []}}
    >>> table, folds = table_of(run, default="ctxopt default@b")
    >>> sorted(method for _, _, method in table)
    ['ctxopt 80/60', 'ctxopt default@b', 'host']
    >>> table[("short", "Codex CLI", "host")]["a"].recall, folds
    (0.5, {'a': 0, 'b': 0})
    """
    table: Table = {}
    folds: dict[str, int] = {}
    per_long = results["long"]["trajectories_per_session"]
    # a run with Gemini CLI's threshold raised (`--gemini-threshold`) is other candidates
    threshold = results.get("gemini_threshold")
    tag = "" if threshold in (None, gemini_threshold) else f" gemini {threshold:g}"
    for length, section in (("short", results), ("long", results["long"])):
        named = [
            (default + tag if r["method"] == CTXOPT else r["method"], r) for r in section["rows"]
        ]
        named += [
            (f"{CTXOPT} {p['schedule']}{tag}", p)
            for p in section["frontier"]
            if p["schedule"] != "default"
        ]
        for method, row in named:
            sessions = row["by_session"]
            table[(length, row["host"], method)] = {
                name: Figures(*figures) for name, figures in sessions.items()
            }
            for index, name in enumerate(sessions):
                folds[name] = index // per_long if length == "short" else index
    return table, folds


def pooled(figures: dict[str, Figures], sessions: Iterable[str]) -> Figures:
    total = Figures()
    for name in sessions:
        total = total + figures[name]
    return total


@dataclass(frozen=True, slots=True)
class Score:
    """One method against the host on some sessions, per (length, host)."""

    ratio: dict[tuple[str, str], float]
    recall: dict[tuple[str, str], float]
    host_recall: dict[tuple[str, str], float]

    def shortfall(self) -> float:
        """How far the recall bars are missed, summed (0: all met)."""
        missed = 0.0
        for (length, host), recall in self.recall.items():
            if length == "long":
                missed += max(0.0, self.host_recall[(length, host)] + LONG_RECALL_MARGIN - recall)
            elif host in RECALL_BAR_HOSTS:
                missed += max(0.0, self.host_recall[(length, host)] - recall)
        return missed

    def excess(self) -> float:
        """How far the bill bars are passed, summed (0: all met)."""
        return sum(
            max(0.0, ratio - (LONG_BILL_BAR if length == "long" else SHORT_BILL_BAR))
            for (length, host), ratio in self.ratio.items()
            if length == "long" or host in RECALL_BAR_HOSTS
        )

    def rank(self) -> tuple[float, ...]:
        """Meeting the recall bars first, the lowest bill among those; else the least miss."""
        missed = self.shortfall()
        if missed == 0:
            return (0.0, self.worst_bill())
        return (1.0, missed + self.excess(), self.worst_bill())

    def worst_bill(self) -> float:
        """The highest bill over its bar (1: at the bar)."""
        return max(
            ratio / (LONG_BILL_BAR if length == "long" else SHORT_BILL_BAR)
            for (length, host), ratio in self.ratio.items()
            if length == "long" or host in RECALL_BAR_HOSTS
        )


def score(table: Table, method: str, sessions: set[str], only: str = EVERY_HOST) -> Score:
    """`method` on `sessions`, on every host or `only` one."""
    ratio, recall, host_recall = {}, {}, {}
    for length, host, name in table:
        if name != method or only not in (EVERY_HOST, host):
            continue
        mine = table[(length, host, method)]
        chosen = [s for s in mine if s in sessions]
        own = pooled(mine, chosen)
        alone = pooled(table[(length, host, HOST)], chosen)
        ratio[(length, host)] = own.billed / alone.billed
        recall[(length, host)] = own.recall
        host_recall[(length, host)] = alone.recall
    return Score(ratio, recall, host_recall)


def choose(table: Table, methods: list[str], sessions: set[str], only: str = EVERY_HOST) -> str:
    """The best of `methods` measured on every cell (length, host) of `only`."""
    cells = {(length, host) for length, host, _ in table if only in (EVERY_HOST, host)}
    measured = [m for m in methods if all((length, host, m) in table for length, host in cells)]
    scores = {m: score(table, m, sessions, only) for m in measured}
    return min(measured, key=lambda m: scores[m].rank())


def cross_validate(
    table: Table, folds: dict[str, int], before: str = "", *, per_host: bool = False
) -> dict[str, Any]:
    """Each fold's setting chosen on the other folds (one for every host, or
    with `per_host` one per host, each on its own bars) and the held-out figures."""
    # (a run of one host's variants competes in the per-host choice only: `choose`)
    methods = sorted({m for _, _, m in table if m.startswith(CTXOPT) and m != before})
    peers = {m for _, _, m in table if not m.startswith(CTXOPT) and m != HOST}
    groups = sorted({h for _, h, _ in table}) if per_host else [EVERY_HOST]
    every = set(folds)
    chosen: dict[int, dict[str, str]] = {}
    for fold in sorted(set(folds.values())):
        rest = {s for s in every if folds[s] != fold}
        chosen[fold] = {g: choose(table, methods, rest, g) for g in groups}
    # held out: each fold's sessions under its own choice, pooled
    held: Table = {}
    for length, host, method in table:
        if method != HOST:
            continue
        group = host if per_host else EVERY_HOST
        held[(length, host, "out of fold")] = {
            s: table[(length, host, chosen[folds[s]][group])][s]
            for s in table[(length, host, HOST)]
        }
        held[(length, host, HOST)] = table[(length, host, HOST)]
    return {
        "folds": len(chosen),
        "chosen_per_fold": chosen,
        "chosen_on_all": {g: choose(table, methods, every, g) for g in groups},
        "out_of_fold": _summary(score(held, "out of fold", every)),
        "in_sample": {m: _summary(score(table, m, every)) for m in methods},
        "peers": {m: _summary(score(table, m, every)) for m in sorted(peers)},
    }


def _summary(s: Score) -> dict[str, dict[str, float]]:
    return {
        f"{length} {host}": {
            "billed_vs_host": round(s.ratio[(length, host)], 3),
            "recall": round(s.recall[(length, host)], 4),
            "host_recall": round(s.host_recall[(length, host)], 4),
        }
        for length, host in sorted(s.ratio)
    }


def report(cv: dict[str, Any]) -> None:
    print(f"{cv['folds']} folds; chosen per fold: {cv['chosen_per_fold']}")
    print(f"chosen on all folds (the default): {cv['chosen_on_all']}\n")
    columns = {
        **cv.get("before", {}),
        "out of fold": cv["out_of_fold"],
        **cv["peers"],
        **cv["in_sample"],
    }
    cells = list(cv["out_of_fold"])
    print(f"{'':24} {'host recall':>11} " + " ".join(f"{name[:22]:>22}" for name in columns))
    for cell in cells:
        host_recall = cv["out_of_fold"][cell]["host_recall"]
        line = f"{cell:24} {host_recall:11.3f} "
        for figures in columns.values():
            f = figures.get(cell)
            shown = "-" if f is None else f"{f['billed_vs_host']:.3f}x {f['recall']:.3f}"
            line += f"{shown:>22} "
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "runs", type=Path, nargs="+", help="benchmarks.hosts JSON files with --long and variants"
    )
    parser.add_argument("--before", default="", help="the method of the previous default")
    parser.add_argument(
        "--per-host", action="store_true", help="choose a setting per host, each on its own bars"
    )
    parser.add_argument(
        "--gemini-threshold",
        type=float,
        default=None,
        help="read runs at this Gemini CLI threshold as the settings' own Gemini CLI cells "
        "(0.9: as `ctxopt run gemini` sets it)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "hosts_cv.json")
    args = parser.parse_args()
    table: Table = {}
    folds: dict[str, int] = {}
    for index, run in enumerate(args.runs):
        default = CTXOPT if index == 0 else f"{CTXOPT} default@{run.stem}"
        more, more_folds = table_of(json.loads(run.read_text()), default, args.gemini_threshold)
        table |= more
        folds |= more_folds
    cv = cross_validate(table, folds, args.before, per_host=args.per_host)
    if args.before:
        cv["before"] = {args.before: _summary(score(table, args.before, set(folds)))}
    report(cv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(cv, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
