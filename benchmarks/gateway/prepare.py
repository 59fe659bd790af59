"""The pipeline's share of what the gateway adds: `Pipeline.prepare` in process.

    python -m benchmarks.gateway.prepare [--against REF] [--calls N] [--rounds N] [--smoke]

The sessions of latency.py (each format, 100 and 1,000 messages, the model's
window and half the history; one exchange more per call), without HTTP: the
time from a request's bytes to the bytes that go upstream, the engine's
database on disk as a server's. Each round runs
every case in a fresh process; with `--against REF` the tree of REF (exported
with `git archive`, on PYTHONPATH) runs the same rounds, alternating with this
tree's, so both see the same load. Prints a table; writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from benchmarks.gateway import latency
from benchmarks.gateway.histories import FORMATS, load, request

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
SIZES = (100, 1000)
REGIMES = ("model-window", "half-window")
ROUTES = {
    "anthropic": ("anthropic", "v1/messages"),
    "openai-chat": ("openai", "v1/chat/completions"),
    "openai-responses": ("openai", "v1/responses"),
    "gemini": ("gemini", "v1beta/models/gemini-2.5-pro:generateContent"),
}


def worker(sizes: tuple[int, ...], calls: int) -> dict[str, list[float]]:
    """Milliseconds per call, by case, in the ctxopt this process imports."""
    from ctxopt.api.gateway.app import wire_format
    from ctxopt.api.gateway.pipeline import Pipeline
    from ctxopt.config import Config
    from ctxopt.engine import Engine

    from tests.gateway.checks import tokens_of

    trajectories = load()
    out: dict[str, list[float]] = {}
    for fmt_name in FORMATS:
        prefix, path = ROUTES[fmt_name]
        fmt = wire_format(prefix, path)
        assert fmt is not None
        for size in sizes:
            session = latency.synthetic(trajectories, size // 2 + calls + 1)
            for regime in REGIMES:
                # on disk, as a server's: the engine's append commits to its database
                data = tempfile.mkdtemp()
                pipeline = Pipeline(Engine(Config(data_dir=data)), Config())
                base = request(fmt_name, session, size // 2)
                headers = {"x-ctxopt-session": "bench"}
                if regime == "half-window":
                    headers["x-ctxopt-window-tokens"] = str(tokens_of(base) // 2)
                pipeline.prepare(fmt, path, orjson.dumps(base), headers, "")
                bodies = [
                    orjson.dumps(request(fmt_name, session, size // 2 + call))
                    for call in range(1, calls + 1)
                ]
                times: list[float] = []
                for raw in bodies:
                    started = time.perf_counter()
                    pipeline.prepare(fmt, path, raw, headers, "")
                    times.append((time.perf_counter() - started) * 1000)
                out[f"{fmt_name}/{size}/{regime}"] = times
                pipeline.engine.close()
                shutil.rmtree(data)
    return out


def export_tree(ref: str, into: Path) -> Path:
    """The Python package of `ref` under `into` (git archive: no worktree, no
    checkout), for PYTHONPATH."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "pyserver"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "pyserver"


def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = (20, 100) if args.smoke else SIZES
    with tempfile.TemporaryDirectory() as tmp:
        trees: dict[str, str] = {"this": ""}
        if args.against:
            trees = {args.against: str(export_tree(args.against, Path(tmp))), **trees}
        times: dict[str, dict[str, list[float]]] = {tree: {} for tree in trees}
        for _ in range(args.rounds):
            for tree, pythonpath in trees.items():
                env = {**os.environ, **({"PYTHONPATH": pythonpath} if pythonpath else {})}
                command = [sys.executable, "-m", "benchmarks.gateway.prepare", "--worker"]
                command += ["--calls", str(args.calls), "--sizes", ",".join(map(str, sizes))]
                done = subprocess.run(
                    command, cwd=REPO, env=env, check=True, capture_output=True, text=True
                )
                for case, values in json.loads(done.stdout).items():
                    times[tree].setdefault(case, []).extend(values)
    rows = [
        {
            "tree": tree,
            "format": case.split("/")[0],
            "messages": int(case.split("/")[1]),
            "regime": case.split("/")[2],
            "calls": len(values),
            "p50_ms": statistics.median(values),
            "p99_ms": statistics.quantiles(values, n=100, method="inclusive")[98],
            "min_ms": min(values),
        }
        for tree, cases in times.items()
        for case, values in cases.items()
    ]
    rows.sort(key=lambda r: (r["format"], r["messages"], r["regime"], r["tree"] != "this"))
    return {"rows": rows, "rounds": args.rounds, "calls": args.calls, "smoke": args.smoke}


def report(results: dict[str, Any]) -> None:
    print("Pipeline.prepare in process, ms per call (no HTTP)")
    print(f"{'tree':10} {'format':17} {'msgs':>5} {'regime':13} {'p50':>7} {'p99':>7} {'min':>7}")
    for r in results["rows"]:
        print(
            f"{r['tree']:10} {r['format']:17} {r['messages']:>5} {r['regime']:13} "
            f"{r['p50_ms']:7.2f} {r['p99_ms']:7.2f} {r['min_ms']:7.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--against", default="", help="a git ref whose tree runs alternately")
    parser.add_argument("--calls", type=int, default=30, help="measured calls per case and round")
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per tree")
    parser.add_argument("--smoke", action="store_true", help="tiny run, for CI")
    parser.add_argument("--out", type=Path, default=RESULTS / "gateway_prepare.json")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        sizes = tuple(int(s) for s in args.sizes.split(","))
        print(json.dumps(worker(sizes, args.calls)))
        return
    if args.smoke:
        args.calls, args.rounds = 3, 1
    results = run(args)
    report(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
