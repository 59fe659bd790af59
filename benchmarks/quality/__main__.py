"""Quality of what survives pruning, ctxopt against baselines and peers.

    .venv/bin/python -m benchmarks.quality [--data ../shared/datasets]
        [--methods default,truncate,...] [--budgets 0.5,0.3,0.2] [--smoke]
        [--out benchmarks/results/quality.json]

Prints a table, writes JSON and a PNG (same name, .png) of recall against
budget. The data path defaults to ../shared/datasets beside the repository;
the data is read in place, never copied. `--smoke` runs a tiny slice (one
conversation, a few questions, three trajectories, one budget, the methods
that need nothing outside Python) in seconds. The Gemini CLI peer needs Node
and npm; it installs itself into benchmarks/peers/ on first use. The LangChain
peer needs `pip install -e '.[quality]'`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import Strategy, Weights
from ctxopt.planner.knobs import Tuning

from benchmarks.quality.datasets import (
    BUDGETS,
    DEFAULT_DATA,
    EVALUATED_CATEGORIES,
    LOCOMO_FILE,
    RESULTS,
    SWE_FILE,
    Conversation,
    CountTokens,
    SweData,
    load_locomo,
    load_swe,
)
from benchmarks.quality.evaluate import Run, run_locomo, run_swe
from benchmarks.quality.methods import (
    DEFAULT_WEIGHTS,
    Bm25,
    EngineMethod,
    GeminiCli,
    LangChainTrim,
    Method,
    ObsMask,
    PeerUnavailable,
    RandomChoice,
    Recent,
)
from benchmarks.quality.plot import plot_recall
from benchmarks.quality.report import (
    KEPT_COLUMNS,
    QUALITY_COLUMNS,
    loss_table,
    needed_table,
    results_json,
    table,
)

DEFAULT_OUT = RESULTS / "quality.json"
SMOKE_BUDGETS = (0.3,)
SMOKE_CONVERSATIONS, SMOKE_QUESTIONS, SMOKE_TRAJECTORIES = 1, 5, 3


def method_factories(engine: Engine) -> dict[str, Callable[[], Method]]:
    """Every method by name, in table order."""
    return {
        "default": lambda: EngineMethod("default", engine, Strategy.HYBRID),
        "truncate": lambda: EngineMethod("truncate", engine, Strategy.TRUNCATE),
        "budget": lambda: EngineMethod("budget", engine, Strategy.BUDGET),
        "recent": Recent,
        "random": RandomChoice,
        "bm25": lambda: Bm25(engine.analyzer.terms),
        "gemini-cli": GeminiCli,
        "langchain": LangChainTrim,
        "obs-mask": lambda: ObsMask(engine.counter.count),
        # ablations: the default without one component each (+: with one more)
        "-reachability": lambda: ablation("-reachability", tuning=Tuning(reachability_first=False)),
        "-neighbours": lambda: ablation("-neighbours", config=replace(MEMORY, neighbour_share=0.0)),
        "-trim": lambda: ablation("-trim", tuning=Tuning(trim_min_tokens=2**31)),
        "-anchors": lambda: ablation("-anchors", tuning=Tuning(anchored_excerpts=False)),
        "-line-excerpts": lambda: ablation("-line-excerpts", tuning=Tuning(line_excerpts=False)),
        "-tight-excerpts": lambda: ablation("-tight-excerpts", tuning=Tuning(line_tight_share=0.0)),
        "-step-exponent": lambda: ablation(
            "-step-exponent", tuning=Tuning(step_density_exponent=0.0)
        ),
        "-quoted-last": lambda: ablation("-quoted-last", tuning=Tuning(quoted_last=False)),
        "-anchors-last": lambda: ablation("-anchors-last", tuning=Tuning(anchors_last=False)),
        "-repeated": lambda: ablation("-repeated", tuning=Tuning(discount_repeated=False)),
        "+links": lambda: ablation("+links", tuning=Tuning(link_df_share=0.02)),
        "+value/token": lambda: ablation("+value/token", tuning=Tuning(density_exponent=0.4)),
        "-recency": lambda: ablation("-recency", weights=replace(DEFAULT_WEIGHTS, recency=0.0)),
        "-expansion": lambda: ablation("-expansion", tuning=Tuning(feedback_weight=0.0)),
    }


MEMORY = Config(data_dir=":memory:")


def ablation(
    name: str,
    *,
    tuning: Tuning | None = None,
    config: Config = MEMORY,
    weights: Weights = DEFAULT_WEIGHTS,
) -> Method:
    """The default method on an engine of its own with one component off."""
    return EngineMethod(name, Engine(config, tuning), Strategy.HYBRID, weights)


def fractions(text: str) -> list[float]:
    values = [float(v) for v in text.split(",") if v.strip()]
    bad = [v for v in values if not 0 < v < 1]
    if bad or not values:
        raise argparse.ArgumentTypeError(f"budgets must be fractions in (0, 1), got {text!r}")
    return values


def parse_args(argv: Sequence[str], names: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.quality",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="directory holding locomo-dev.json and the SWE trajectories",
    )
    parser.add_argument(
        "--methods",
        type=lambda s: [m for m in s.split(",") if m],
        help=f"comma-separated subset of: {', '.join(names)}",
    )
    parser.add_argument(
        "--budgets", type=fractions, help="token budget fractions, e.g. 0.5,0.3,0.2"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny, fast run (CI)")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="JSON path; the PNG goes beside it"
    )
    args = parser.parse_args(argv)
    unknown = [m for m in args.methods or [] if m not in names]
    if unknown:
        parser.error(f"unknown methods {unknown}; choose from {', '.join(names)}")
    for name in (LOCOMO_FILE, SWE_FILE):
        if not (args.data / name).is_file():
            parser.error(f"--data {args.data}: no {name} there")
    return args


def build_methods(
    factories: dict[str, Callable[[], Method]],
    names: Sequence[str],
    smoke: bool,
    unavailable: dict[str, str],
) -> list[Method]:
    methods = []
    for name in names:
        try:
            method = factories[name]()
        except PeerUnavailable as err:
            print(f"[{name}] unavailable: {err}", file=sys.stderr)
            unavailable[name] = str(err)
            continue
        if smoke and not method.fast:
            continue
        methods.append(method)
    return methods


def load(args: argparse.Namespace, count: CountTokens) -> tuple[list[Conversation], SweData]:
    conversations = load_locomo(
        args.data / LOCOMO_FILE,
        count,
        conversations=SMOKE_CONVERSATIONS if args.smoke else 0,
        questions=SMOKE_QUESTIONS if args.smoke else 0,
    )
    swe = load_swe(args.data / SWE_FILE, count, limit=SMOKE_TRAJECTORIES if args.smoke else 0)
    return conversations, swe


def data_summary(conversations: Sequence[Conversation], swe: SweData) -> dict[str, Any]:
    return {
        "locomo": {
            "conversations": len(conversations),
            "questions": sum(len(c.questions) for c in conversations),
            "categories": sorted(EVALUATED_CATEGORIES),
        },
        "swe": {
            "trajectories": len(swe.trajectories),
            "hunks": sum(len(t.hunks) for t in swe.trajectories),
            "skipped_ungrounded": list(swe.skipped),
        },
    }


def print_results(results: dict[str, Any], out: Path) -> None:
    locomo, swe = results["locomo"], results["swe"]
    print(f"LoCoMo: {locomo['questions']} questions in {locomo['conversations']} conversations")
    print(
        f"SWE: {swe['trajectories']} trajectories, {swe['hunks']} hunks "
        f"({len(swe['skipped_ungrounded'])} skipped: a hunk no message grounds)"
    )
    print(table(results, QUALITY_COLUMNS, timing=True))
    print()
    print("SWE needed-later recall at 25/50/75/100% of each trajectory")
    print(needed_table(results))
    print()
    print("share of the prompt's tokens kept")
    print(table(results, KEPT_COLUMNS, timing=False))
    print()
    print("default: lost evidence turns (LoCoMo) and hunks (SWE) by cause")
    print(loss_table(results, "default"))
    for note in results["notes"]:
        print(f"- {note}")
    for name, reason in results["unavailable"].items():
        print(f"- {name} not measured: {reason}")
    print(f"wrote {out} and {out.with_suffix('.png')} in {results['seconds']} s")


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    engine = Engine(MEMORY)
    factories = method_factories(engine)
    args = parse_args(argv, list(factories))
    names = args.methods or list(factories)
    budgets = args.budgets or list(SMOKE_BUDGETS if args.smoke else BUDGETS)
    started = time.perf_counter()
    conversations, swe = load(args, engine.counter.count_many)

    unavailable: dict[str, str] = {}
    run = Run(build_methods(factories, names, args.smoke, unavailable), budgets)
    run.unavailable.update(unavailable)
    one_per_history = [c.case(q) for c in conversations for q in c.questions[:1]]
    steps = [s.case for t in swe.trajectories for s in t.steps]
    run.prepare(one_per_history + [t.case for t in swe.trajectories] + steps)
    run_locomo(run, conversations)
    run_swe(run, swe.trajectories)
    engine.close()

    meta = {
        "command": " ".join(["python -m benchmarks.quality", *argv]),
        "data": str(args.data),
        "smoke": args.smoke,
        **data_summary(conversations, swe),
        "seconds": round(time.perf_counter() - started, 2),
    }
    results = results_json(run, [n for n in names if n in run.locomo], meta)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    plot_recall(results, args.out.with_suffix(".png"))
    print_results(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
