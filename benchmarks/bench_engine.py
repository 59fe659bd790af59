"""In-process engine latency: append throughput, Score and Optimize against
session size. Prints a table, writes JSON and a log-log PNG.

    .venv/bin/python -m benchmarks.bench_engine [--sizes 100,1000,10000,100000] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

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


def measure(size: int, texts: list[str], repeats: int) -> dict[str, float]:
    engine = Engine(Config(data_dir=":memory:"))
    batch = list(chunks(size, texts))
    start = time.perf_counter()
    for i in range(0, size, 500):
        engine.append("", "bench", batch[i : i + 500])
    append_s = time.perf_counter() - start
    tokens = engine.stats("", "bench").tokens
    roots = Roots(recent_turns=10)
    score_ms = timed(lambda: engine.score("", "bench", QUERY, (), roots, Weights()), repeats)
    options = OptimizeOptions(
        budget=Budget(context_limit_tokens=tokens, target_percent=60.0),
        query=QUERY,
        roots=roots,
        dry_run=True,
        force=True,
    )
    optimize_ms = timed(lambda: engine.optimize("", "bench", options), repeats)
    engine.close()
    return {
        "chunks": size,
        "tokens": tokens,
        "append_tokens_per_s": tokens / append_s,
        "score_p50_ms": statistics.median(score_ms),
        "score_p99_ms": percentile(score_ms, 0.99),
        "optimize_p50_ms": statistics.median(optimize_ms),
        "optimize_p99_ms": percentile(optimize_ms, 0.99),
    }


def plot(rows: list[dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["chunks"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(sizes, [r["score_p50_ms"] for r in rows], "o-", label="Score p50")
    ax.loglog(sizes, [r["optimize_p50_ms"] for r in rows], "s-", label="Optimize p50 (dry run)")
    ax.loglog(sizes, [0.05 * s for s in sizes], "k--", label="design target: 50 ms / 1,000 chunks")
    ax.set_xlabel("chunks in session")
    ax.set_ylabel("milliseconds (in-process)")
    ax.legend()
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
    sizes = [100, 300] if args.smoke else [int(s) for s in args.sizes.split(",")]
    repeats = 3 if args.smoke else args.repeats
    texts = swe_texts(args.data)
    rows = [
        measure(size, texts, repeats if size < 100_000 else max(5, repeats // 3)) for size in sizes
    ]
    columns = ("chunks", "tokens", "append tok/s", "score p50", "score p99", "opt p50", "opt p99")
    widths = (8, 11, 13, 10, 10, 9, 9)
    print(" ".join(f"{c:>{w}}" for c, w in zip(columns, widths, strict=True)))
    for r in rows:
        print(
            f"{r['chunks']:>8} {r['tokens']:>11,.0f} {r['append_tokens_per_s']:>13,.0f} "
            f"{r['score_p50_ms']:>9.2f}ms {r['score_p99_ms']:>9.2f}ms "
            f"{r['optimize_p50_ms']:>8.2f}ms {r['optimize_p99_ms']:>8.2f}ms"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rows": rows}, indent=2))
    plot(rows, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
