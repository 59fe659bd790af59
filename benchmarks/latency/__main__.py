"""Latency and scaling from 100 to 100,000 chunks.

For each session size, on real agent text (`benchmarks.corpus`): append
throughput in-process and through gRPC; `Score` and `Optimize` (a forced dry
run to 60% of a window the size of the session) p50/p99 in-process, through
the Python gRPC client and through the TypeScript client (`CtxoptClient`);
`SearchStash` after a tenth of the session is stashed; server RSS per million
tokens held; cold start and restart to SERVING. Prints the tables, the fitted
growth exponent against n log n and the issue's targets (met or not), writes
JSON and a log-log PNG with the design target (50 ms per 1,000 chunks).

    .venv/bin/python -m benchmarks.latency [--sizes 100,1000,10000,100000] [--smoke] [--out PATH]

The TypeScript leg runs `ts-client/dist/bench/latency.js`; the command runs
`npm run build` in ts-client/ first when that file is missing or stale.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from benchmarks.bench_engine import measure
from benchmarks.corpus import DEFAULT_DATA, chunks, swe_texts
from benchmarks.latency.report import Row, growth, plot, print_tables, targets
from benchmarks.latency.server import measure_server

RESULTS = Path(__file__).resolve().parents[1] / "results"
SMOKE_SIZES, SMOKE_REPEATS = (50, 200), 3
MIN_REPEATS = 20


def repeats_at(size: int, repeats: int) -> int:
    """`repeats` up to 1,000 chunks, then fewer as calls get slower, never under MIN_REPEATS."""
    return max(MIN_REPEATS, min(repeats, repeats * 1_000 // size))


def measure_size(size: int, texts: list[str], repeats: int, work: Path) -> Row:
    batch = list(chunks(size, texts))
    server = measure_server(size, batch, repeats, work)
    del batch  # the in-process leg builds its own; keep this process's heap small
    engine = measure(size, texts, repeats)
    in_process = {
        call: {"p50_ms": engine[f"{call}_p50_ms"], "p99_ms": engine[f"{call}_p99_ms"]}
        for call in ("score", "optimize")
    }
    return Row(size, repeats, engine["append_tokens_per_s"], in_process, server)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--sizes", default="100,1000,10000,100000")
    parser.add_argument(
        "--repeats", type=int, default=200, help="per call up to 1,000 chunks; fewer above"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", type=Path, default=RESULTS / "latency.json")
    args = parser.parse_args()
    sizes = list(SMOKE_SIZES) if args.smoke else [int(s) for s in args.sizes.split(",")]
    texts = swe_texts(args.data)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        for size in sorted(sizes):
            repeats = SMOKE_REPEATS if args.smoke else repeats_at(size, args.repeats)
            rows.append(measure_size(size, texts, repeats, Path(tmp)))
    fitted = growth(rows)
    checked = targets(rows)
    print_tables(rows, fitted, checked)
    result = {
        "command": " ".join([".venv/bin/python -m benchmarks.latency", *sys.argv[1:]]),
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "rows": [
            {
                **asdict(r),
                "tokens": r.tokens,
                "rss_mb_per_million_tokens": r.rss_mb_per_million_tokens,
                "held_mb_per_million_tokens": r.held_mb_per_million_tokens,
            }
            for r in rows
        ],
        "growth_exponent": {k: None if math.isnan(v) else v for k, v in fitted.items()},
        "targets": [{**asdict(t), "met": t.met} for t in checked],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    plot(rows, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
