"""Savings per host: each host alone, through ctxopt's gateway, and behind headroom.

    python -m benchmarks.hosts [--long K] [--limit N] [--sweep 95/35,95/20]
        [--summary-tokens 2000] [--decode-tokens-per-s 63] [--install-headroom]
        [--skip-headroom] [--skip-default] [--host NAME] [--gemini-threshold T]
        [--smoke] [--out PATH] [--data PATH]

The development SWE trajectories are replayed call by call in each host's
wire format (Claude Code: Anthropic Messages, Codex CLI: OpenAI Responses,
Gemini CLI: Gemini generateContent) under a window W of 40% of each
trajectory's final size (as the session replay), each host's compaction line
scaled to W by its own rule's proportion (benchmarks/hosts/profiles.py).
`--long K` replays sessions of K trajectories worked one after the other:
the headline section, sent in each host's real frame (its system prompt,
tools and leading items as the real CLI sends them,
benchmarks/hosts/frames/); the short trajectories keep their own system
prompt and one bash tool (a real frame alone would pass their W).

- host: the host alone (benchmarks/hosts/baselines.py): Claude Code and Codex
  send the whole history until their line, then summarise it with their own
  compaction request; Gemini CLI runs its own compression and tool-output
  masking (gemini-cli-core 0.61.0); Claude Code also with Anthropic context
  editing on.
- ctxopt: the same host's requests through a real `ctxopt serve
  --gateway-addr` to a fake provider (benchmarks/hosts/through.py), at the
  server's default schedule and, for the Pareto plot, each `--sweep` setting.
- host + headroom: the host behind headroom's proxy, still compacting at its
  line on the sizes headroom forwards (benchmarks/hosts/headroom_proxy.py);
  skipped when its venv is missing (`--install-headroom` makes it).

Headroom runs on the headline section (the long sessions, or the short
trajectories without --long), the sweep on both; every row and point keeps
its per-session figures (`by_session`) for the out-of-fold choice of
benchmarks/hosts/cv.py. Billed tokens are in base-input-token
units: input at the provider's cache prices plus every summary's output
(`--summary-tokens`) at the output price over the input price
(benchmarks/hosts/costs.py). The stall is the time the user waits: summaries
at `--decode-tokens-per-s`, or the ms a proxy added. Prints the tables;
writes JSON and a Pareto PNG beside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ctxopt.tokens import TokenCounter

from benchmarks.gateway.histories import DEFAULT_SWE, MODELS, load
from benchmarks.hosts import headroom_proxy
from benchmarks.hosts.costs import DECODE_TOKENS_PER_S, SUMMARY_TOKENS, Summaries
from benchmarks.hosts.frames import load_frame
from benchmarks.hosts.plot import plot
from benchmarks.hosts.profiles import PROFILES
from benchmarks.hosts.prompts import Case, long_cases
from benchmarks.hosts.rows import Options, section
from benchmarks.hosts.schedule import Schedule
from benchmarks.replay.sessions import WINDOW_SHARE, load_sessions

RESULTS = Path(__file__).resolve().parents[1] / "results"
SMOKE_TRAJECTORIES = 2
DEFAULT_SWEEP = "95/35,95/20"


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    count = TokenCounter("cl100k")
    sessions = load_sessions(args.data, count.count_many, limit=args.limit)
    trajectories = load(args.data, limit=args.limit)
    cases = [Case.of(s, t) for s, t in zip(sessions, trajectories, strict=True)]
    summaries = Summaries(args.summary_tokens, args.decode_tokens_per_s)
    profiles = [p for p in PROFILES if not args.host or p.name in args.host]
    headline = Options(
        summaries, tuple(args.sweep), args.headroom, not args.skip_default, args.gemini_threshold
    )
    short = {p: [c.hosted(p.fmt, None, count.count_many) for c in cases] for p in profiles}
    results: dict[str, Any] = {
        "command": "python -m benchmarks.hosts " + " ".join(sys.argv[1:]),
        "smoke": args.smoke,
        "trajectories": len(cases),
        "window_share": WINDOW_SHARE,
        "line_share": {p.name: round(p.line_share, 4) for p in PROFILES},
        "models": {p.name: MODELS[p.fmt] for p in PROFILES},
        "output_share": {p.name: p.price.output_share for p in PROFILES},
        "summary_tokens": args.summary_tokens,
        "decode_tokens_per_s": args.decode_tokens_per_s,
        "headroom": headroom_proxy.PIN if args.headroom else None,
        "gemini_threshold": args.gemini_threshold,
        "window_median": statistics.median(c.window for c in short[profiles[0]]),
    }
    if not args.long:
        return {**results, **section(short, count, headline), "seconds": _since(started)}
    plain = long_cases(cases, args.long, count.count_many)
    framed = {
        p: [c.hosted(p.fmt, load_frame(p.fmt), count.count_many) for c in plain] for p in profiles
    }
    # The two sections share nothing but the data (each has its own servers, fakes, Node and
    # counter), so they run side by side: most of their time is spent in those processes.
    with ThreadPoolExecutor(2) as pool:
        # the sweep runs on the short trajectories too: cv.py picks a setting on both
        shorts = pool.submit(
            section,
            short,
            TokenCounter("cl100k"),
            Options(
                summaries,
                tuple(args.sweep),
                default=not args.skip_default,
                gemini_threshold=args.gemini_threshold,
            ),
        )
        longs = pool.submit(section, framed, TokenCounter("cl100k"), headline)
        results.update(shorts.result())
        results["long"] = {
            "trajectories_per_session": args.long,
            "sessions": len(plain),
            "window_median": {
                p.name: statistics.median(c.window for c in framed[p]) for p in profiles
            },
            **longs.result(),
        }
    return {**results, "seconds": _since(started)}


def _since(started: float) -> float:
    return round(time.perf_counter() - started, 1)


def report(results: dict[str, Any]) -> None:
    if "long" in results:
        long = results["long"]
        medians = ", ".join(f"{h} {w:,.0f}" for h, w in long["window_median"].items())
        print(
            f"{long['sessions']} sessions of {long['trajectories_per_session']} trajectories "
            f"each, in each host's real frame; W median {medians} tokens"
        )
        table(long["rows"])
        frontier(long["frontier"])
        print()
    print(
        f"{results['trajectories']} trajectories, window W = {int(results['window_share'] * 100)}% "
        f"of each one's final size (median {results['window_median']:,.0f} tokens)"
    )
    table(results["rows"])
    if len({p["schedule"] for p in results["frontier"]}) > 1:
        frontier(results["frontier"])
    print(
        f"\nbilled: base-input-token units, input at cache prices + each summary's "
        f"{results['summary_tokens']:,} output tokens x the output/input price ratio "
        f"({', '.join(f'{h} {r:g}' for h, r in results['output_share'].items())}); "
        f"stall: summaries at {results['decode_tokens_per_s']:g} tokens/s, or a proxy's added ms"
    )
    if results["headroom"] is None:
        print(
            f"host + headroom skipped: --skip-headroom, or {headroom_proxy.VENV} missing "
            "(--install-headroom)"
        )


def table(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'host':12} {'method':23} {'calls':>6} {'summ.':>5} {'billed':>11} {'vs host':>8} "
        f"{'recall':>7} {'over W':>6} {'stall s':>8} {'p50 ms':>7}"
    )
    for r in rows:
        p50 = "-" if r["added_p50_ms"] is None else f"{r['added_p50_ms']:.2f}"
        print(
            f"{r['host']:12} {r['method']:23} {r['calls']:6} {r['summaries']:5} "
            f"{r['billed_tokens']:11,} {r['billed_vs_host']:8.3f} {r['needed_later_recall']:7.3f} "
            f"{r['over_window_calls']:6} {r['stall_s']:8.1f} {p50:>7}"
            + (f"  ({r['note']})" if "note" in r else "")
        )


def frontier(points: list[dict[str, Any]]) -> None:
    print(
        "ctxopt over its schedule (T/L[/F][+R]: trigger % of the ceiling, landings % of the room):"
    )
    for p in points:
        print(
            f"  {p['host']:12} {p['schedule']:8} billed {p['billed_vs_host']:.3f} x host, "
            f"recall {p['needed_later_recall']:.3f}, over W {p['over_window_calls']}"
        )


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
        "--sweep",
        type=lambda text: [Schedule.parse(t) for t in text.split(",") if t],
        default=None,
        help=f"ctxopt's other schedule settings, THRESHOLD/TARGET,... (default {DEFAULT_SWEEP}; "
        "--smoke: none)",
    )
    parser.add_argument(
        "--summary-tokens",
        type=int,
        default=SUMMARY_TOKENS,
        help="output tokens of each summary a host writes (benchmarks/hosts/costs.py)",
    )
    parser.add_argument(
        "--decode-tokens-per-s",
        type=float,
        default=DECODE_TOKENS_PER_S,
        help="the model's output speed, for the stall",
    )
    parser.add_argument(
        "--install-headroom",
        action="store_true",
        help=f"install {headroom_proxy.PIN} into {headroom_proxy.VENV} first",
    )
    parser.add_argument(
        "--skip-headroom",
        action="store_true",
        help="leave out the host + headroom legs even when its venv exists (a run of variants)",
    )
    parser.add_argument(
        "--skip-default",
        action="store_true",
        help="leave out ctxopt at the server's defaults (a run of more sweep points or peers "
        "beside one that has it; benchmarks/hosts/cv.py reads both)",
    )
    parser.add_argument(
        "--host",
        action="append",
        default=[],
        choices=[p.name for p in PROFILES],
        help="replay only this host (repeatable; default: every host)",
    )
    parser.add_argument(
        "--gemini-threshold",
        type=float,
        default=None,
        help="Gemini CLI's compression threshold through ctxopt, as `ctxopt run gemini` sets it "
        "(ctxopt.cli.launch.LAUNCH_COMPRESSION_THRESHOLD, 0.9): its line in the ctxopt legs is "
        "that share of W (default: its own 0.5)",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny run, for CI")
    parser.add_argument("--out", type=Path, default=RESULTS / "hosts.json")
    args = parser.parse_args()
    if args.smoke and not args.limit:
        args.limit = SMOKE_TRAJECTORIES
    if args.sweep is None:
        args.sweep = [] if args.smoke else [Schedule.parse(t) for t in DEFAULT_SWEEP.split(",")]
    if args.install_headroom:
        headroom_proxy.install()
    args.headroom = not args.skip_headroom and headroom_proxy.headroom_bin() is not None
    results = run(args)
    report(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    plot(results, args.out.with_suffix(".png"))
    print(f"\nwrote {args.out} and {args.out.with_suffix('.png')} in {results['seconds']} s")


if __name__ == "__main__":
    main()
