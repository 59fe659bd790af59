"""Gateway benchmark: added latency per format and the bill of the replayed trajectories.

    python -m benchmarks.gateway [--smoke] [--out PATH] [--data PATH] [--limit N]
                                 [--calls N] [--part all|latency|billing] [--against REF]
                                 [--gateway-mode on|shadow|off] [--sizes 100,1000]

A real `ctxopt serve --gateway-addr` process forwards to a fake provider on
loopback (tests/gateway/upstream.py). Part one (latency.py): what the gateway
adds to a call at 100 and 1,000 messages per format, p50/p99, and to the first
streamed byte, against a direct call to the fake (goal: <= 5 ms p50 added at
1,000 messages). Part two (billing.py): the development SWE trajectories
replayed through each format, billed at cache prices, against no pruning and
Anthropic context editing. Prints tables; writes JSON and a PNG beside it.
With `--against REF` (a git ref of this repository) a second server runs the
tree of REF (exported with `git archive`, on PYTHONPATH) beside this one, and
every latency call goes through both in turn: before and after, side by side
under the same load. `--gateway-mode off` measures the relay alone (no
parsing at all): the floor of what a call through the gateway adds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
from pathlib import Path
from typing import Any

import httpx
from ctxopt.config import GATEWAY_MODES

from benchmarks.gateway import billing, latency
from benchmarks.gateway.histories import DEFAULT_SWE, FORMATS, Trajectory, load
from benchmarks.gateway.prepare import export_tree
from tests.gateway.conftest import upstream_env
from tests.gateway.upstream import FakeUpstream, fake_upstream
from tests.serverproc import ServerProcess, serving

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
SIZES = (100, 1000)
REGIMES = ("model-window", "half-window")
GOAL_ADDED_P50_MS = 5.0


def run(args: argparse.Namespace) -> dict[str, Any]:
    trajectories = load(args.data, limit=args.limit)
    results: dict[str, Any] = {"latency": [], "billing": {}, "smoke": args.smoke}
    with (
        fake_upstream() as upstream,
        tempfile.TemporaryDirectory() as tmp,
        contextlib.ExitStack() as stack,
        httpx.Client(timeout=120) as client,
    ):
        env = {**upstream_env(upstream), "CTXOPT_GATEWAY_MODE": args.gateway_mode}
        for name in ("this", "against"):
            (Path(tmp) / name).mkdir()
        this = stack.enter_context(
            serving(Path(tmp) / "this", "--gateway-addr", "127.0.0.1:0", env=env)
        )
        gateways = {"this": this.gateway_url}
        if args.against:
            env = {**env, "PYTHONPATH": str(export_tree(args.against, Path(tmp) / "tree"))}
            other = stack.enter_context(
                serving(Path(tmp) / "against", "--gateway-addr", "127.0.0.1:0", env=env)
            )
            # the baseline first on every call, so neither is always second
            gateways = {args.against: other.gateway_url, **gateways}
            results["against"] = args.against
        if args.part in ("all", "latency"):
            servers = {"this": this, **({args.against: other} if args.against else {})}
            results["latency"] = _latency(args, client, gateways, servers, upstream, trajectories)
        if args.part in ("all", "billing"):
            results["billing"] = _billing(args, client, this.gateway_url, upstream, trajectories)
    results["gateway_mode"] = args.gateway_mode
    results["trajectories"] = len(trajectories)
    results["window_share"] = billing.WINDOW_SHARE
    return results


def _latency(
    args: argparse.Namespace,
    client: httpx.Client,
    gateways: dict[str, str],
    servers: dict[str, ServerProcess],
    upstream: FakeUpstream,
    trajectories: list[Trajectory],
) -> list[dict[str, Any]]:
    sizes = (20, 100) if args.smoke else tuple(int(s) for s in args.sizes.split(","))
    calls = 3 if args.smoke else args.calls
    rows: list[dict[str, Any]] = []
    for fmt in FORMATS:
        for size in sizes:
            session = latency.synthetic(trajectories, size // 2 + calls + 1)
            for regime in REGIMES:
                case = latency.Case(fmt, size, regime)
                pids = {tree: server.process.pid for tree, server in servers.items()}
                measured = latency.measure(
                    client, gateways, upstream.url, case, session, calls, pids
                )
                for tree, row in measured.items():
                    stages = latency.stages(servers[tree].log_text(), case)
                    rows.append(
                        {
                            "tree": tree,
                            "format": fmt,
                            "messages": size,
                            "regime": regime,
                            **row,
                            **stages,
                        }
                    )
                with upstream.lock:
                    upstream.requests.clear()
    return rows


def _billing(
    args: argparse.Namespace,
    client: httpx.Client,
    gateway: str,
    upstream: FakeUpstream,
    trajectories: list[Trajectory],
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fmt in FORMATS:
        totals: dict[str, billing.Ledger] = {}
        for trajectory in trajectories:
            steps = min(len(trajectory.steps), 12) if args.smoke else len(trajectory.steps)
            ledgers = billing.replay(client, gateway, upstream, fmt, trajectory, steps)
            for method, ledger in ledgers.items():
                total = totals.setdefault(method, billing.Ledger())
                total.calls += ledger.calls
                total.input_tokens += ledger.input_tokens
                total.billed += ledger.billed
                total.over_window += ledger.over_window
                for outcome, n in ledger.outcomes.items():
                    total.outcomes[outcome] = total.outcomes.get(outcome, 0) + n
        out[fmt] = {
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
    return out


def report(results: dict[str, Any]) -> None:
    mode = results.get("gateway_mode", "on")
    print(
        f"added latency (ms), gateway mode {mode}: gateway minus direct call to the fake"
        " provider; paired = median of each call's own difference; cold = first call;"
        " cpu/call = the gateway process's CPU ms per call"
    )
    print(
        f"{'tree':10} {'format':17} {'msgs':>5} {'regime':13} {'p50':>7} {'paired':>7} "
        f"{'p99':>7} {'ttfb p50':>9} {'cold':>7} {'cpu/call':>8}"
    )
    for row in results["latency"]:
        print(
            f"{row['tree']:10} {row['format']:17} {row['messages']:>5} {row['regime']:13} "
            f"{row['added_p50_ms']:7.2f} {row.get('added_paired_p50_ms', 0.0):7.2f} "
            f"{row['added_p99_ms']:7.2f} "
            f"{row['ttfb_added_p50_ms']:9.2f} {row['cold_ms']:7.1f} "
            f"{row.get('server_cpu_ms_per_call', 0.0):8.2f}"
        )
    staged = [r for r in results["latency"] if "stage_ms_p50" in r]
    if staged:
        print(
            "\nwhere a call's time goes in the gateway, p50 ms from its log (upstream: sending"
            " up to the provider's head, the fake's own time included; direct: a whole call"
            " straight to the fake)"
        )
        print(
            f"{'tree':10} {'format':17} {'msgs':>5} {'regime':13} {'read':>6} {'pipeline':>8} "
            f"{'upstream':>8} {'relay':>6} {'direct':>7}"
        )
        for row in staged:
            print(
                f"{row['tree']:10} {row['format']:17} {row['messages']:>5} {row['regime']:13} "
                f"{row.get('stage_read_ms_p50', 0.0):6.2f} {row['stage_ms_p50']:8.2f} "
                f"{row.get('stage_upstream_ms_p50', 0.0):8.2f} "
                f"{row.get('stage_relay_ms_p50', 0.0):6.2f} {row['direct_p50_ms']:7.2f}"
            )
    for tree in dict.fromkeys(r["tree"] for r in results["latency"]):
        worst = max(
            r["added_p50_ms"]
            for r in results["latency"]
            if r["tree"] == tree and r["messages"] == max(r["messages"] for r in results["latency"])
        )
        print(
            f"{tree}: worst p50 added at the largest size: {worst:.2f} ms "
            f"(goal <= {GOAL_ADDED_P50_MS} ms)"
        )
    if not results["billing"]:
        return
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

    billed = bool(results["billing"])
    fig, axes = plt.subplots(1, 2 if billed else 1, figsize=(12 if billed else 8, 4), squeeze=False)
    left = axes[0][0]
    trees = list(dict.fromkeys(r["tree"] for r in results["latency"]))
    cases = list(
        dict.fromkeys((r["format"], r["messages"], r["regime"]) for r in results["latency"])
    )
    width = 0.8 / max(1, len(trees))
    for k, tree in enumerate(trees):
        added = {
            (r["format"], r["messages"], r["regime"]): r["added_p50_ms"]
            for r in results["latency"]
            if r["tree"] == tree
        }
        left.bar(
            [i + k * width for i in range(len(cases))],
            [added.get(c, 0.0) for c in cases],
            width,
            label=f"{tree}: p50 added",
        )
    left.axhline(GOAL_ADDED_P50_MS, color="k", linestyle="--")
    labels = [f"{f}\n{m} {'half' if r == 'half-window' else 'model'}" for f, m, r in cases]
    left.set_xticks([i + 0.4 - width / 2 for i in range(len(cases))], labels, fontsize=5)
    left.set_ylabel("ms added per call (dashed: goal)")
    left.legend(fontsize=7)
    if billed:
        _plot_billing(axes[0][1], results["billing"])
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _plot_billing(right: Any, billing_rows: dict[str, Any]) -> None:
    methods = ["none", "gateway", "context-editing"]
    formats = list(billing_rows)
    for k, method in enumerate(methods):
        values = [billing_rows[f].get(method, {}).get("billed_vs_none", 0.0) for f in formats]
        right.bar([i + k * 0.27 for i in range(len(formats))], values, 0.27, label=method)
    right.set_xticks([i + 0.27 for i in range(len(formats))], formats, fontsize=7)
    right.set_ylabel("billed input tokens vs no pruning")
    right.legend(fontsize=7)


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
    parser.add_argument(
        "--sizes", default=",".join(map(str, SIZES)), help="history sizes in messages (latency)"
    )
    parser.add_argument("--part", choices=("all", "latency", "billing"), default="all")
    parser.add_argument(
        "--against", default="", help="a git ref whose tree runs beside this one (latency)"
    )
    parser.add_argument(
        "--gateway-mode", choices=GATEWAY_MODES, default="on", help="off: the relay alone"
    )
    parser.add_argument("--out", type=Path, help="default: results/gateway[_PART].json")
    args = parser.parse_args()
    if args.out is None:
        suffix = "" if args.part == "all" else f"_{args.part}"
        args.out = RESULTS / f"gateway{suffix}.json"
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
