"""What line excerpts of tool outputs cost a plan, side by side in one process.

Three engines hold the same session of agent text (`benchmarks.corpus`):
without line excerpts, with them at one size, and the default (two sizes).
Each runs bench_engine's lean forced dry-run `Optimize` to 60% of the
session (with the server's GC thresholds), the calls interleaved so that a
noisy machine slows all three alike. The first plan
of each is reported apart: it profiles every output's lines, and the text
caches it fills are the process's, so the one-size variant pays them in full
and the default, which runs after it, mostly does not. Prints a table,
writes JSON.

    .venv/bin/python -m benchmarks.bench_excerpts [--sizes 1000,10000] [--repeats 40]
        [--smoke] [--out benchmarks/results/bench_excerpts.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

from ctxopt.cli.commands import GC_THRESHOLDS
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.planner.knobs import Tuning

from benchmarks.bench_engine import forced_plan
from benchmarks.corpus import DEFAULT_DATA, chunks, swe_texts

RESULTS = Path(__file__).resolve().parent / "results"
VARIANTS = {
    "without line excerpts": Tuning(line_excerpts=False, line_tight_share=0.0),
    "line excerpts, one size": Tuning(line_tight_share=0.0),
    "default (two sizes)": Tuning(),
}


def measure(size: int, texts: list[str], repeats: int) -> dict[str, dict[str, float]]:
    """Per variant: its first plan's ms and the p50 of the next `repeats`."""
    session = list(chunks(size, texts))
    engines = {}
    for name, tuning in VARIANTS.items():
        engine = Engine(Config(data_dir=":memory:"), tuning)
        engine.append("", "s", session)
        engines[name] = engine
    total = next(iter(engines.values())).stats("", "s").tokens
    options = replace(forced_plan(total), lean=True)
    ms: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(repeats + 1):
        for name, engine in engines.items():
            started = time.perf_counter()
            engine.optimize("", "s", options)
            ms[name].append((time.perf_counter() - started) * 1000)
    for engine in engines.values():
        engine.close()
    return {
        name: {"first_ms": times[0], "p50_ms": statistics.median(times[1:])}
        for name, times in ms.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--smoke", action="store_true", help="100 chunks, 3 repeats")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_excerpts.json")
    args = parser.parse_args()
    gc.set_threshold(*GC_THRESHOLDS)  # as `ctxopt serve` runs the engine
    sizes = [100] if args.smoke else [int(s) for s in args.sizes.split(",")]
    repeats = 3 if args.smoke else args.repeats
    texts = swe_texts(args.data)
    rows = {size: measure(size, texts, repeats) for size in sizes}
    print(f"{'chunks':>7}  {'variant':24}  {'first plan ms':>13}  {'p50 ms':>8}")
    for size, variants in rows.items():
        for name, figures in variants.items():
            print(f"{size:7,}  {name:24}  {figures['first_ms']:13.0f}  {figures['p50_ms']:8.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"repeats": repeats, "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
