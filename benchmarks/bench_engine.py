"""In-process engine latency: append throughput, Score and Optimize against
session size. Prints a table, writes JSON and a log-log PNG.

    .venv/bin/python -m benchmarks.bench_engine [--sizes 100,1000,10000,100000] [--smoke]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import time
from dataclasses import replace
from pathlib import Path

from ctxopt.cli.commands import GC_THRESHOLDS
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import Budget, OptimizeOptions, Roots, Weights

from benchmarks.corpus import DEFAULT_DATA, QUERY, chunks, swe_texts

RESULTS = Path(__file__).resolve().parent / "results"


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed(fn: object, repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append((time.perf_counter() - start) * 1000)
    return samples


ROOTS = Roots(recent_turns=10)


def forced_plan(tokens: int) -> OptimizeOptions:
    """A forced collection from 100% to 60% of the window, as a dry run: the
    plan is cold every time."""
    return OptimizeOptions(
        budget=Budget(context_limit_tokens=tokens, target_percent=60.0),
        query=QUERY,
        roots=ROOTS,
        dry_run=True,
        force=True,
    )


def measure(size: int, texts: list[str], repeats: int) -> dict[str, float]:
    engine = Engine(Config(data_dir=":memory:"))
    batch = list(chunks(size, texts))
    start = time.perf_counter()
    for i in range(0, size, 500):
        engine.append("", "bench", batch[i : i + 500])
    append_s = time.perf_counter() - start
    tokens = engine.stats("", "bench").tokens
    roots = ROOTS
    score_ms = timed(lambda: engine.score("", "bench", QUERY, (), roots, Weights()), repeats)
    full = forced_plan(tokens)
    optimize_ms = timed(lambda: engine.optimize("", "bench", full), repeats)
    lean = replace(full, lean=True)
    lean_ms = timed(lambda: engine.optimize("", "bench", lean), repeats)
    step_ms = tool_loop_steps(engine, texts, tokens, roots, repeats)
    engine.close()
    return {
        "chunks": size,
        "tokens": tokens,
        "append_tokens_per_s": tokens / append_s,
        "score_p50_ms": statistics.median(score_ms),
        "score_p99_ms": percentile(score_ms, 0.99),
        "optimize_p50_ms": statistics.median(optimize_ms),
        "optimize_p99_ms": percentile(optimize_ms, 0.99),
        "optimize_lean_p50_ms": statistics.median(lean_ms),
        "optimize_lean_p99_ms": percentile(lean_ms, 0.99),
        "tool_loop_step_p50_ms": statistics.median(step_ms),
        "tool_loop_step_p99_ms": percentile(step_ms, 0.99),
    }


def tool_loop_steps(
    engine: Engine, texts: list[str], tokens: int, roots: Roots, repeats: int
) -> list[float]:
    """One agent step each: a tool call, its output and the model's reply
    appended, then a lean Optimize in a window the session fills to 70%
    (below the threshold, as between two collections)."""
    options = OptimizeOptions(
        budget=Budget(context_limit_tokens=int(tokens / 0.7)), query=QUERY, roots=roots, lean=True
    )
    samples = []
    for step in range(repeats):
        turn = list(chunks(3, texts[step % len(texts) :], prefix=f"step{step}-"))
        started = time.perf_counter()
        engine.append("", "bench", turn)
        engine.optimize("", "bench", options)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def plot(rows: list[dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["chunks"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(sizes, [r["score_p50_ms"] for r in rows], "o-", label="Score p50")
    ax.loglog(sizes, [r["optimize_p50_ms"] for r in rows], "s-", label="Optimize p50 (cold plan)")
    ax.loglog(sizes, [r["optimize_lean_p50_ms"] for r in rows], "^-", label="Optimize lean p50")
    ax.loglog(sizes, [r["tool_loop_step_p50_ms"] for r in rows], "d-", label="tool-loop step p50")
    goal = [1.0 * (s / 1000) * max(1.0, math.log10(s) / 3) for s in sizes]
    ax.loglog(sizes, goal, "k--", label="goal: 1 ms at 1k, n log n")
    ax.set_xlabel("chunks in session")
    ax.set_ylabel("milliseconds (in-process)")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--sizes", default="100,1000,10000,100000")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_engine.json")
    args = parser.parse_args()
    gc.set_threshold(*GC_THRESHOLDS)  # as `ctxopt serve` runs the engine
    sizes = [100, 300] if args.smoke else [int(s) for s in args.sizes.split(",")]
    repeats = 3 if args.smoke else args.repeats
    texts = swe_texts(args.data)
    rows = [
        measure(size, texts, repeats if size < 100_000 else max(5, repeats // 3)) for size in sizes
    ]
    columns = (
        ("chunks", "chunks", "{:,.0f}"),
        ("tokens", "tokens", "{:,.0f}"),
        ("append tok/s", "append_tokens_per_s", "{:,.0f}"),
        ("score p50", "score_p50_ms", "{:.2f}"),
        ("opt p50", "optimize_p50_ms", "{:.2f}"),
        ("opt p99", "optimize_p99_ms", "{:.2f}"),
        ("lean p50", "optimize_lean_p50_ms", "{:.2f}"),
        ("lean p99", "optimize_lean_p99_ms", "{:.2f}"),
        ("step p50", "tool_loop_step_p50_ms", "{:.2f}"),
        ("step p99", "tool_loop_step_p99_ms", "{:.2f}"),
    )
    print(" ".join(f"{title:>13}" for title, _, _ in columns), "(ms)")
    for r in rows:
        print(" ".join(f"{fmt.format(r[key]):>13}" for _, key, fmt in columns))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rows": rows}, indent=2))
    plot(rows, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
