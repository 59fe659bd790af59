"""Gateway benchmark: added latency per format and the bill of the replayed trajectories.

    python -m benchmarks.gateway [--smoke] [--out PATH] [--data PATH] [--limit N]

A real `ctxopt serve --gateway-addr` process forwards to a fake provider on
loopback (tests/gateway/upstream.py). Part one (latency.py): what the gateway
adds to a call at 100 and 1,000 messages per format, p50/p99, and to the first
streamed byte, against a direct call to the fake (goal: <= 5 ms p50 added at
1,000 messages). Part two (billing.py): the development SWE trajectories
replayed through each format, billed at cache prices, against no pruning and
Anthropic context editing. Prints tables; writes JSON and a PNG beside it.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import httpx

from benchmarks.gateway import billing, latency
from benchmarks.gateway.histories import DEFAULT_SWE, FORMATS, load
from tests.gateway.conftest import upstream_env
from tests.gateway.upstream import fake_upstream
from tests.serverproc import serving

RESULTS = Path(__file__).resolve().parents[1] / "results"
SIZES = (100, 1000)
REGIMES = ("model-window", "half-window")
GOAL_ADDED_P50_MS = 5.0


def run(args: argparse.Namespace) -> dict[str, Any]:
    trajectories = load(args.data, limit=args.limit)
    sizes = (20, 100) if args.smoke else SIZES
    calls = 3 if args.smoke else args.calls
    results: dict[str, Any] = {"latency": [], "billing": {}, "smoke": args.smoke}
    with (
        fake_upstream() as upstream,
        tempfile.TemporaryDirectory() as tmp,
        serving(Path(tmp), "--gateway-addr", "127.0.0.1:0", env=upstream_env(upstream)) as server,
        httpx.Client(timeout=120) as client,
    ):
        for fmt in FORMATS:
            for size in sizes:
                session = latency.synthetic(trajectories, size // 2 + calls + 1)
                for regime in REGIMES:
                    case = latency.Case(fmt, size, regime)
                    row = latency.measure(
                        client, server.gateway_url, upstream.url, case, session, calls
                    )
                    results["latency"].append(
                        {"format": fmt, "messages": size, "regime": regime, **row}
                    )
                    with upstream.lock:
                        upstream.requests.clear()
        for fmt in FORMATS:
            totals: dict[str, billing.Ledger] = {}
            for trajectory in trajectories:
                steps = min(len(trajectory.steps), 12) if args.smoke else len(trajectory.steps)
                ledgers = billing.replay(
                    client, server.gateway_url, upstream, fmt, trajectory, steps
                )
                for method, ledger in ledgers.items():
                    total = totals.setdefault(method, billing.Ledger())
                    total.calls += ledger.calls
                    total.input_tokens += ledger.input_tokens
                    total.billed += ledger.billed
                    total.over_window += ledger.over_window
                    for outcome, n in ledger.outcomes.items():
                        total.outcomes[outcome] = total.outcomes.get(outcome, 0) + n
            results["billing"][fmt] = {
                method: {
                    "calls": t.calls,
                    "input_tokens": t.input_tokens,
                    "billed_tokens": round(t.billed),
                    "billed_vs_none": round(t.billed / totals["none"].billed, 3),
                    "over_window_calls": t.over_window,
                    **({"outcomes": t.outcomes} if t.outcomes else {}),
                }
                for method, t in totals.items()
            }
    results["trajectories"] = len(trajectories)
    results["window_share"] = billing.WINDOW_SHARE
    return results


def report(results: dict[str, Any]) -> None:
    print("added latency (ms): gateway minus direct call to the fake provider; cold = first call")
    print(
        f"{'format':17} {'msgs':>5} {'regime':16} {'p50':>7} {'p99':>7} {'ttfb p50':>9} {'cold':>7}"
    )
    for row in results["latency"]:
        print(
            f"{row['format']:17} {row['messages']:>5} {row['regime']:16} "
            f"{row['added_p50_ms']:7.2f} {row['added_p99_ms']:7.2f} "
            f"{row['ttfb_added_p50_ms']:9.2f} {row['cold_ms']:7.1f}"
        )
    worst = max(
        (r["added_p50_ms"] for r in results["latency"] if r["messages"] == max(SIZES)), default=0.0
    )
    if worst:
        print(
            f"worst p50 added at {max(SIZES):,} messages: {worst:.2f} ms "
            f"(goal <= {GOAL_ADDED_P50_MS} ms)"
        )
    share = int(results["window_share"] * 100)
    print(
        f"\nbilled input tokens, {results['trajectories']} trajectories, "
        f"window {share}% of the final size"
    )
    print(
        f"{'format':17} {'method':16} {'calls':>6} {'input':>11} {'billed':>11} "
        f"{'vs none':>8} {'over':>5}"
    )
    for fmt, methods in results["billing"].items():
        for method, row in methods.items():
            print(
                f"{fmt:17} {method:16} {row['calls']:6} {row['input_tokens']:11,} "
                f"{row['billed_tokens']:11,} {row['billed_vs_none']:8.3f} "
                f"{row['over_window_calls']:5}"
            )


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    rows = [r for r in results["latency"] if r["regime"] == "half-window"]
    labels = [f"{r['format']}\n{r['messages']}" for r in rows]
    left.bar(range(len(rows)), [r["added_p50_ms"] for r in rows], label="p50 added")
    left.bar(
        range(len(rows)),
        [r["ttfb_added_p50_ms"] for r in rows],
        alpha=0.5,
        label="first byte, p50 added",
    )
    left.axhline(GOAL_ADDED_P50_MS, color="k", linestyle="--")
    left.set_xticks(range(len(rows)), labels, fontsize=7)
    left.set_ylabel("ms added (half-window regime; dashed: goal)")
    left.legend(fontsize=7)
    methods = ["none", "gateway", "context-editing"]
    formats = list(results["billing"])
    for k, method in enumerate(methods):
        values = [results["billing"][f].get(method, {}).get("billed_vs_none", 0.0) for f in formats]
        right.bar([i + k * 0.27 for i in range(len(formats))], values, 0.27, label=method)
    right.set_xticks([i + 0.27 for i in range(len(formats))], formats, fontsize=7)
    right.set_ylabel("billed input tokens vs no pruning")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_SWE, help="the SWE trajectories (.jsonl.gz)"
    )
    parser.add_argument("--limit", type=int, default=0, help="trajectories to replay (0: all)")
    parser.add_argument("--calls", type=int, default=40, help="measured calls per latency case")
    parser.add_argument("--smoke", action="store_true", help="tiny run, for CI")
    parser.add_argument("--out", type=Path, default=RESULTS / "gateway.json")
    args = parser.parse_args()
    if args.smoke and not args.limit:
        args.limit = 2
    results = run(args)
    report(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    plot(results, args.out.with_suffix(".png"))
    print(f"\nwrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
