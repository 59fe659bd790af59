"""Savings per host: each host alone against the same host behind the gateway.

    python -m benchmarks.hosts [--smoke] [--limit N] [--long K] [--out PATH] [--data PATH]

The development SWE trajectories are replayed call by call in each host's
wire format (Claude Code: Anthropic Messages, Codex CLI: OpenAI Responses,
Gemini CLI: Gemini generateContent) under a window W of 40% of each
trajectory's final size (as the session replay), each host's compaction line
scaled to W by its own rule's proportion (benchmarks/hosts/profiles.py).

- host: the host alone (benchmarks/hosts/baselines.py): Claude Code and Codex
  send the whole history until their line, then summarise it (the
  summarising call billed); Gemini CLI runs its own compression and
  tool-output masking (gemini-cli-core 0.61.0, the masking thresholds scaled
  to W as its compression line); Claude Code also with Anthropic context
  editing on.
- ctxopt: the same host's requests through a real `ctxopt serve
  --gateway-addr` to a fake provider (benchmarks/hosts/through.py); what the
  provider received is what is billed and scored.

Per row: calls, billed input tokens at the provider's cache prices (with the
host's summarising calls), the ratio to the host alone, needed-later recall
(mean over the calls with needed lines, on the text the provider received),
calls over W, and what the gateway added per call (p50, p95). `--long K`
also replays sessions of K trajectories worked one after the other, where
the fixed system prompt is a small share of W. Prints a table; writes JSON
and a PNG beside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ctxopt.tokens import TokenCounter

from benchmarks.gateway.histories import DEFAULT_SWE, MODELS, load
from benchmarks.hosts.legs import CONTEXT_EDITING, CTXOPT, HOST, rows_of
from benchmarks.hosts.profiles import PROFILES
from benchmarks.hosts.prompts import Case, long_cases
from benchmarks.replay.node import SUMMARY_CHARS
from benchmarks.replay.sessions import WINDOW_SHARE, load_sessions

RESULTS = Path(__file__).resolve().parents[1] / "results"
SMOKE_TRAJECTORIES = 2


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    count = TokenCounter("cl100k")
    sessions = load_sessions(args.data, count.count_many, limit=args.limit)
    trajectories = load(args.data, limit=args.limit)
    cases = [Case.of(s, t) for s, t in zip(sessions, trajectories, strict=True)]
    results: dict[str, Any] = {
        "command": "python -m benchmarks.hosts " + " ".join(sys.argv[1:]),
        "smoke": args.smoke,
        "trajectories": len(cases),
        "window_share": WINDOW_SHARE,
        "line_share": {p.name: round(p.line_share, 4) for p in PROFILES},
        "models": {p.name: MODELS[p.fmt] for p in PROFILES},
        "summary_chars": SUMMARY_CHARS,
        "window_median": statistics.median(c.window for c in cases),
        "variants": args.variant,
        "rows": rows_of(cases, count, args.variant, default=not args.variants_only),
    }
    if args.long:
        long = long_cases(cases, args.long, count.count_many)
        results["long"] = {
            "trajectories_per_session": args.long,
            "sessions": len(long),
            "window_median": statistics.median(c.window for c in long),
            "rows": rows_of(long, count, args.variant, default=not args.variants_only),
        }
    results["seconds"] = round(time.perf_counter() - started, 1)
    return results


def report(results: dict[str, Any]) -> None:
    print(
        f"{results['trajectories']} trajectories, window W = {int(results['window_share'] * 100)}% "
        f"of each one's final size (median {results['window_median']:,.0f} tokens); "
        "billed input at each provider's cache prices"
    )
    table(results["rows"])
    if "long" in results:
        long = results["long"]
        print(
            f"\n{long['sessions']} sessions of {long['trajectories_per_session']} trajectories "
            f"each, W median {long['window_median']:,.0f} tokens"
        )
        table(long["rows"])


def table(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'host':12} {'method':23} {'calls':>6} {'summ.':>5} {'billed':>11} {'vs host':>8} "
        f"{'recall':>7} {'over W':>6} {'p50 ms':>7} {'p95 ms':>7}"
    )
    for r in rows:
        p50 = "-" if r["added_p50_ms"] is None else f"{r['added_p50_ms']:.2f}"
        p95 = "-" if r["added_p95_ms"] is None else f"{r['added_p95_ms']:.2f}"
        print(
            f"{r['host']:12} {r['method']:23} {r['calls']:6} {r['summarising_calls']:5} "
            f"{r['billed_tokens']:11,} {r['billed_vs_host']:8.3f} {r['needed_later_recall']:7.3f} "
            f"{r['over_window_calls']:6} {p50:>7} {p95:>7}"
        )


def plot(results: dict[str, Any], path: Path) -> None:
    """Billed vs the host alone and recall per host; a second row for --long.
    A bar's label counts its calls over the window."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sections = [(f"{results['trajectories']} trajectories", results["rows"])]
    if "long" in results:
        long = results["long"]
        title = f"{long['sessions']} sessions of {long['trajectories_per_session']} trajectories"
        sections.append((title, long["rows"]))
    fig, axes = plt.subplots(len(sections), 2, figsize=(11, 4 * len(sections)), squeeze=False)
    hosts = [p.name for p in PROFILES]
    width = 0.27
    for (title, section), (left, right) in zip(sections, axes, strict=True):
        rows = {(r["host"], r["method"]): r for r in section}
        for k, method in enumerate((HOST, CONTEXT_EDITING, CTXOPT)):
            shown = [h for h in hosts if (h, method) in rows]
            xs = [hosts.index(h) + k * width for h in shown]
            over = [f"{rows[(h, method)]['over_window_calls']} over" for h in shown]
            for axis, key in ((left, "billed_vs_host"), (right, "needed_later_recall")):
                bars = axis.bar(xs, [rows[(h, method)][key] for h in shown], width, label=method)
                axis.bar_label(bars, over, fontsize=6)
        for axis, label in (
            (left, "billed input vs the host alone"),
            (right, "needed-later recall"),
        ):
            axis.set_xticks([i + width for i in range(len(hosts))], hosts)
            axis.set_ylabel(label)
            axis.set_title(title, fontsize=9)
            axis.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def variant(text: str) -> tuple[str, dict[str, str]]:
    """`deep:GATEWAY_TRIGGER_PERCENT=95,GATEWAY_LANDING_PERCENT=20` -> its name and
    server environment."""
    name, _, settings = text.partition(":")
    env = {}
    for setting in filter(None, settings.split(",")):
        key, sep, value = setting.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"{setting!r}: expected KEY=VALUE")
        env[f"CTXOPT_{key.strip().upper()}"] = value.strip()
    return name, env


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_SWE, help="the SWE trajectories (.jsonl.gz)"
    )
    parser.add_argument("--limit", type=int, default=0, help="trajectories to replay (0: all)")
    parser.add_argument(
        "--long", type=int, default=0, help="also sessions of K trajectories in a row (0: none)"
    )
    parser.add_argument(
        "--variant",
        type=variant,
        action="append",
        default=[],
        help="NAME:KEY=VALUE,...: also ctxopt with these CTXOPT_* settings (repeatable)",
    )
    parser.add_argument(
        "--variants-only", action="store_true", help="no ctxopt row with the server's defaults"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny run, for CI")
    parser.add_argument("--out", type=Path, default=RESULTS / "hosts.json")
    args = parser.parse_args()
    args.variant = dict(args.variant)
    if args.smoke and not args.limit:
        args.limit = SMOKE_TRAJECTORIES
    results = run(args)
    report(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    plot(results, args.out.with_suffix(".png"))
    print(f"\nwrote {args.out} and {args.out.with_suffix('.png')} in {results['seconds']} s")


if __name__ == "__main__":
    main()
