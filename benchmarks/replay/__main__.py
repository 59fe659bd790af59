"""Session replay: what a whole agent session costs with prompt caching, and
what the agent still has at every step.

    scripts/replay.sh [--swe FILE] [--limit N] [--out PATH]
        [--cache-price-ratio R] [--smoke] [--long K]

Replays each SWE-agent trajectory call by call. At every model call each
method builds the prompt from the history so far under the window W (40% of
the session's final size; and 128k for sessions that grow past it). Per call:
prompt tokens (cl100k), the tokens of the prefix shared byte for byte with the
same method's previous prompt (cacheable), billed input tokens = uncached +
R x cached, needed-later recall (../shared/datasets/README.md), and the
latency the method adds. Methods: `none`, `gemini-cli-native`, `obs-mask`,
`langchain`, `ctxopt` (the Gemini CLI adapter's `optimizeContents` against a
real server); then ctxopt's threshold, target, recent-turn roots, strategy and
step-text policy over a grid at 40%, chosen by 5-fold cross-validation
(benchmarks/replay/crossval.py).
Prints a table per window, writes JSON to --out and the cumulative billed
tokens of a typical session beside it (.png).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctxopt.tokens import TokenCounter

from benchmarks.latency.typescript import TS_CLIENT
from benchmarks.replay.crossval import FOLDS, Setting, cross_validate
from benchmarks.replay.methods import python_methods
from benchmarks.replay.node import (
    SUMMARY_CHARS,
    Job,
    NodeUnavailable,
    check_node,
    ctxopt_server,
    run_jobs,
)
from benchmarks.replay.plot import plot_cumulative
from benchmarks.replay.report import Tally, percentile, table
from benchmarks.replay.sessions import (
    FIXED_WINDOW,
    SHARE_WINDOW,
    Session,
    concatenated,
    load_sessions,
)

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SWE = REPO.parent / "shared" / "datasets" / "swe-agent-gemini3-dev.jsonl.gz"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "replay.json"
DEFAULT_RATIO = 0.25  # Gemini 2.5 and later: cached input at 25% (or less) of the input price
OTHER_RATIO = 0.1  # Anthropic: cache reads at 10% of the input price
METHODS = ("none", "gemini-cli-native", "obs-mask", "langchain", "ctxopt")
NODE_METHODS = ("gemini-cli-native", "ctxopt")
# ctxopt's settings cross-validated at 40%: threshold and target (percent of the window), the
# most recent turns kept as roots at most (10: the server's default), the service's strategy
# (hybrid: relevance, trims and masks; budget: policy tiers and age), and the policy of a
# tool-calling turn's text (EPHEMERAL: it goes before the outputs; its kind's: with them); the
# `ctxopt` rows run the adapter's defaults
GRID: tuple[Setting, ...] = tuple(
    Setting(threshold, threshold - gap, recent, strategy, step_text)
    for strategy in ("hybrid", "budget")
    for step_text in ("ephemeral", "kind")
    for threshold in (90.0, 100.0)
    for gap in (0.0, 5.0, 10.0, 20.0)
    for recent in (10, 2)
)
SMOKE_GRID: tuple[Setting, ...] = (
    Setting(100.0, 95.0, 2, "budget", "ephemeral"),
    Setting(90.0, 60.0, 10, "hybrid", "kind"),
)
BASELINES = ("obs-mask", "langchain")  # the methods that stay inside the window
SMOKE_SESSIONS = 2
LONG_CHUNKS = 1_000  # the latency goal holds per call at this many chunks
NOTES = (
    "Tokens are cl100k. A message is cached when it and every message before it equal the "
    "previous prompt's of the same method and session (cache-write surcharges, TTL and minimum "
    "cacheable sizes not modelled).",
    "gemini-cli-native runs @google/gemini-cli-core 0.61.0's ChatCompressionService and "
    "ToolOutputMaskingService at their defaults, in GeminiClient's order; the LLM summary is "
    f"replaced by a fixed placeholder of {SUMMARY_CHARS:,} characters (a typical "
    "<state_snapshot>'s length), which holds none of the needed lines a real summary might keep.",
    "none sends the full history: a call over the window would be refused by the provider and "
    "counts as an over-window call; its tokens are still summed.",
    "ctxopt runs the Gemini CLI adapter's code through its @google/genai entry "
    "(optimizeContents from ctxopt-client/genai) against a real ctxopt serve on 127.0.0.1:0, "
    "given the full history every call, window = windowTokens, the adapter's defaults otherwise "
    "(its ceiling there is the window; inside Gemini CLI it is the CLI's 50% compression line); "
    "the grid rows set threshold, target, the most recent turns kept as roots, the strategy and "
    "the policy of a tool-calling turn's text. The adapter judges sizes with the server's cl100k "
    "counts (UTF-8 bytes before the server has counted a part). An answered assistant message "
    "is a model turn of its prose and a functionCall carrying its command; a call renders as "
    "its bash block, so an untouched turn renders as the original message.",
    "Cross-validation: sessions dealt round-robin into 5 folds; each fold's setting is chosen "
    "on the other four by the rule printed with it and measured on the fold; the out-of-fold "
    "row pools those measurements. The `ctxopt` row runs the defaults, which the same rule "
    "chose on all sessions (in-sample).",
    "Latency is what the method adds per call (ctxopt: the adapter, gRPC and the server).",
)


def ratio_arg(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"--cache-price-ratio must be in [0, 1], got {text!r}")
    return value


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/replay.sh",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--swe", type=Path, default=DEFAULT_SWE, help="trajectories (.jsonl.gz)")
    parser.add_argument("--limit", type=int, default=0, help="replay the first N sessions (0: all)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON path; PNG beside it")
    parser.add_argument(
        "--cache-price-ratio",
        type=ratio_arg,
        default=DEFAULT_RATIO,
        help=f"price of a cached input token / an uncached one (default {DEFAULT_RATIO}; "
        f"{OTHER_RATIO} is reported too)",
    )
    parser.add_argument(
        "--ts-client",
        type=Path,
        default=TS_CLIENT,
        help="a built ctxopt-client checkout to replay through (default: ts-client/)",
    )
    parser.add_argument("--smoke", action="store_true", help="two sessions, small grid (CI)")
    parser.add_argument(
        "--long",
        type=int,
        default=0,
        metavar="K",
        help=f"also time ctxopt on long sessions of K consecutive trajectories each, at "
        f"{LONG_CHUNKS:,}+ chunks (0: not)",
    )
    args = parser.parse_args(argv)
    if not args.swe.is_file():
        parser.error(f"--swe {args.swe}: no such file")
    if args.limit < 0:
        parser.error(f"--limit must be >= 0, got {args.limit}")
    if args.long < 0 or args.long == 1:
        parser.error(f"--long must be 0 (off) or at least 2, got {args.long}")
    return args


def setting_name(setting: Setting) -> str:
    roots = "" if setting.recent_turns is None else f", {setting.recent_turns} recent turns"
    how = "" if setting.strategy is None else f", {setting.strategy}"
    text = "" if setting.step_text is None else f", step text {setting.step_text}"
    return f"{setting.threshold:g}/{setting.target:g}{roots}{how}{text}"


def setting_of(entry: dict[str, Any]) -> Setting:
    return Setting(
        entry["threshold_percent"],
        entry["target_percent"],
        entry["recent_turns"],
        entry.get("strategy"),
        entry.get("step_text"),
    )


def node_jobs(sessions: Sequence[Session], grid: Sequence[Setting]) -> list[Job]:
    jobs = []
    for session in sessions:
        for window_label, window in session.windows().items():
            jobs.append(
                Job("gemini-cli-native", "gemini-cli-native", window_label, session, window)
            )
            jobs.append(Job("ctxopt", "ctxopt", window_label, session, window))
        for setting in grid:
            label = f"ctxopt {setting_name(setting)}"
            window = session.windows()[SHARE_WINDOW]
            jobs.append(Job("ctxopt", label, SHARE_WINDOW, session, window, *setting))
    return jobs


Tallies = dict[str, dict[str, Tally]]  # window label -> method or setting label -> tally


def replay(
    sessions: Sequence[Session],
    grid: Sequence[Setting],
    counter: TokenCounter,
    ts_client: Path,
    unavailable: dict[str, str],
) -> Tallies:
    tallies: Tallies = {SHARE_WINDOW: {}, FIXED_WINDOW: {}}
    for method in python_methods(counter).values():
        for session in sessions:
            for window_label, window in session.windows().items():
                built = [method.prompt(session, call, window) for call in session.calls]
                tally = tallies[window_label].setdefault(method.name, Tally())
                tally.add(
                    session,
                    window,
                    [p for p, _ in built],
                    [ms for _, ms in built],
                    counter.count_many,
                )
        print(f"[{method.name}] replayed", file=sys.stderr)
    try:
        check_node(ts_client)
    except NodeUnavailable as err:
        for name in NODE_METHODS:
            unavailable[name] = str(err)
        return tallies
    with ctxopt_server() as address:
        for job, result in run_jobs(node_jobs(sessions, grid), address, ts_client):
            tally = tallies[job.window_label].setdefault(job.label, Tally())
            tally.add(
                job.session,
                job.window,
                result.prompts,
                result.ms,
                counter.count_many,
                result.outcomes,
                result.fates,
            )
            tally.setting = result.setting
    print("[node] replayed", file=sys.stderr)
    return tallies


def long_latency(
    sessions: Sequence[Session],
    k: int,
    counter: TokenCounter,
    ts_client: Path,
) -> dict[str, Any]:
    """ctxopt's added latency (the adapter's defaults) on long sessions of `k`
    consecutive trajectories, over the calls made with LONG_CHUNKS or more
    chunks in the history."""
    long = concatenated(sessions, k, counter.count_many)
    jobs = [Job("ctxopt", "ctxopt", SHARE_WINDOW, s, s.windows()[SHARE_WINDOW]) for s in long]
    calls = 0
    ms: list[float] = []
    outcomes: dict[str, int] = {}
    with ctxopt_server() as address:
        for _, result in run_jobs(jobs, address, ts_client):
            calls += len(result.ms)
            for t, n, outcome in zip(result.ms, result.chunks, result.outcomes, strict=True):
                if n >= LONG_CHUNKS:
                    ms.append(t)
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return {
        "trajectories_per_session": k,
        "sessions": len(long),
        "calls": calls,
        "min_chunks": LONG_CHUNKS,
        "calls_at_min_chunks": len(ms),
        "outcomes": dict(sorted(outcomes.items())),
        "p50_ms": percentile(ms, 50),
        "p90_ms": percentile(ms, 90),
        "p99_ms": percentile(ms, 99),
    }


def typical(sessions: Sequence[Session]) -> Session:
    """The session of median final size."""
    ordered = sorted(sessions, key=lambda s: s.final_tokens)
    return ordered[(len(ordered) - 1) // 2]


def results_json(
    tallies: Tallies,
    grid: Sequence[Setting],
    ratio: float,
    meta: dict[str, Any],
) -> dict[str, Any]:
    ratios = sorted({ratio, DEFAULT_RATIO, OTHER_RATIO}, reverse=True)
    ran = [name for name in METHODS if any(name in by_name for by_name in tallies.values())]
    # every method that ran appears under both windows, with zero calls where no session reached it
    windows = {
        label: {name: tallies[label].get(name, Tally()).summary(ratio, ratios) for name in ran}
        for label in (SHARE_WINDOW, FIXED_WINDOW)
    }
    gaps = []
    measured: dict[Setting, Tally] = {}
    for setting in grid:
        tally = tallies[SHARE_WINDOW].get(f"ctxopt {setting_name(setting)}")
        if tally is not None:
            measured[setting] = tally
            gaps.append(
                {
                    "gap": setting.threshold - setting.target,
                    "recent_turns": setting.recent_turns,
                    "strategy": setting.strategy,
                    "step_text": setting.step_text,
                }
                | tally.summary(ratio, ratios)
            )
    baselines = {
        name: tallies[SHARE_WINDOW][name] for name in BASELINES if name in tallies[SHARE_WINDOW]
    }
    ids = list(next(iter(baselines.values())).by_session) if baselines else []
    cv = (
        cross_validate(measured, baselines, ids, ratio, ratios, FOLDS) if measured and ids else None
    )
    return {
        **meta,
        "cache_price_ratio": ratio,
        "windows": windows,
        "threshold_target": gaps,
        "cross_validation": cv,
    }


def print_results(results: dict[str, Any], other: float) -> None:
    ratio = results["cache_price_ratio"]
    for label, entries in results["windows"].items():
        sessions = max((e["sessions"] for e in entries.values()), default=0)
        print(f"\nwindow {label} ({sessions} sessions)")
        if entries and sessions:
            print(table(entries, ratio, other))
        else:
            print("(no session reaches this window)")
    if results["threshold_target"]:
        print(f"\nctxopt threshold/target gap, window {SHARE_WINDOW}")
        print(
            table(
                {setting_name(setting_of(g)): g for g in results["threshold_target"]},
                ratio,
                other,
                first="threshold/target",
            )
        )
    for label, entries in results["windows"].items():
        lost = entries.get("ctxopt", {}).get("lost_needed_lines")
        if lost:
            total = entries["ctxopt"]["needed_lines"]
            missing = sum(lost.values())
            causes = ", ".join(f"{cause} {n:,} ({n / missing:.0%})" for cause, n in lost.items())
            print(
                f"\nctxopt at {label}: {missing:,} of {total:,} needed lines (summed over calls) "
                f"missing, by what became of their tool output: {causes}"
            )
    cv = results["cross_validation"]
    if cv:
        print(
            f"\nctxopt cross-validated ({cv['folds']} folds, window {SHARE_WINDOW}): {cv['rule']}"
        )
        rows = [
            "| fold | sessions | chosen | billed | recall mean | over-window | "
            + " | ".join(f"{n} billed" for n in BASELINES)
            + " |"
        ]
        rows.append("| " + " | ".join("---" for _ in range(6 + len(BASELINES))) + " |")
        for f in cv["per_fold"]:
            chosen = f["chosen"]
            name = setting_name(setting_of(chosen))
            rows.append(
                f"| {f['fold']} | {f['sessions']} | {name} | {f['billed_tokens']:,} | "
                f"{f['needed_later_recall']:.3f} | {f['over_window_calls']} / {f['calls']} | "
                + " | ".join(f"{f.get(n + '_billed_tokens', 0):,}" for n in BASELINES)
                + " |"
            )
        print("\n".join(rows))
        print(table({"ctxopt out-of-fold": cv["out_of_fold"], **cv["baselines"]}, ratio, other))
        chosen = cv["chosen_on_all_sessions"]
        print("chosen on all sessions: " + setting_name(setting_of(cv["chosen_on_all_sessions"])))
    long = results.get("long_sessions")
    if long:
        print(
            f"\nctxopt on {long['sessions']} long sessions of {long['trajectories_per_session']} "
            f"trajectories each ({long['calls']:,} calls): {long['calls_at_min_chunks']:,} calls "
            f"with {long['min_chunks']:,}+ chunks, added latency p50 {long['p50_ms']} ms, "
            f"p90 {long['p90_ms']} ms, p99 {long['p99_ms']} ms; what the adapter did: "
            + ", ".join(f"{o} {n:,}" for o, n in long["outcomes"].items())
        )
    for note in results["notes"]:
        print(f"- {note}")
    for name, reason in results["unavailable"].items():
        print(f"- {name} not measured: {reason}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    started = time.perf_counter()
    counter = TokenCounter("cl100k")
    limit = SMOKE_SESSIONS if args.smoke else args.limit
    sessions = load_sessions(args.swe, counter.count_many, limit)
    grid = SMOKE_GRID if args.smoke else GRID
    unavailable: dict[str, str] = {}
    tallies = replay(sessions, grid, counter, args.ts_client, unavailable)
    other = OTHER_RATIO if args.cache_price_ratio != OTHER_RATIO else DEFAULT_RATIO
    meta = {
        "command": " ".join(["scripts/replay.sh", *argv]),
        "swe": str(args.swe),
        "smoke": args.smoke,
        "sessions": len(sessions),
        "calls": sum(len(s.calls) for s in sessions),
        "final_tokens_median": statistics.median(s.final_tokens for s in sessions),
        "final_tokens_max": max(s.final_tokens for s in sessions),
        "notes": list(NOTES),
        "unavailable": unavailable,
    }
    results = results_json(tallies, grid, args.cache_price_ratio, meta)
    if args.long and "ctxopt" not in unavailable:
        results["long_sessions"] = long_latency(sessions, args.long, counter, args.ts_client)
    session = typical(sessions)
    window = session.windows()[SHARE_WINDOW]
    billed = {
        name: tallies[SHARE_WINDOW][name].billed_by_session[session.instance_id]
        for name in METHODS
        if name in tallies[SHARE_WINDOW]
    }
    results["plot"] = {
        "session": session.instance_id,
        "window": window,
        "calls": len(session.calls),
    }
    results["seconds"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    title = (
        f"{session.instance_id}: {len(session.calls)} calls, "
        f"final size {session.final_tokens:,} tokens"
    )
    plot_cumulative(billed, args.cache_price_ratio, window, title, args.out.with_suffix(".png"))
    print_results(results, other)
    print(f"wrote {args.out} and {args.out.with_suffix('.png')} in {results['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
