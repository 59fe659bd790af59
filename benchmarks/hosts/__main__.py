"""Savings per host: each host alone against the same host behind the gateway.

    python -m benchmarks.hosts [--smoke] [--limit N] [--out PATH] [--data PATH]

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
calls over W, and what the gateway added per call (p50, p95). Prints a
table; writes JSON and a PNG beside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from ctxopt.api.gateway.windows import claude_window
from ctxopt.tokens import TokenCounter

from benchmarks.gateway.histories import DEFAULT_SWE, MODELS, Trajectory, load
from benchmarks.hosts import through
from benchmarks.hosts.baselines import Compacting, compacting, context_editing
from benchmarks.hosts.profiles import CLAUDE_CODE, CODEX, GEMINI_CLI, PROFILES, Profile
from benchmarks.hosts.prompts import Case
from benchmarks.latency.typescript import TS_CLIENT
from benchmarks.replay.ledger import Billing, bill_calls
from benchmarks.replay.node import SUMMARY_CHARS, SUMMARY_TEXT, Job, check_node, run_jobs
from benchmarks.replay.report import Tally, percentile
from benchmarks.replay.sessions import (
    SHARE_WINDOW,
    WINDOW_SHARE,
    Prompt,
    concatenated,
    load_sessions,
)
from tests.gateway.checks import tokens_of as json_tokens
from tests.gateway.conftest import upstream_env
from tests.gateway.upstream import fake_upstream
from tests.serverproc import serving

RESULTS = Path(__file__).resolve().parents[1] / "results"
SMOKE_TRAJECTORIES = 2
# Gemini CLI's compression statuses after which it had asked the model for a summary, twice
# (the summary, then its "probe" verification: chatCompressionService.js of gemini-cli-core)
GEMINI_SUMMARISED = ("COMPRESSED", "COMPRESSION_FAILED_INFLATED_TOKEN_COUNT")
HOST, CONTEXT_EDITING, CTXOPT = "host", "host + context editing", "ctxopt"


@dataclass(slots=True)
class Leg:
    """One way of sending a host's calls, over every trajectory."""

    tally: Tally = field(default_factory=Tally)
    summarising: list[Billing] = field(default_factory=list)

    def add(
        self,
        case: Case,
        prompts: list[Prompt],
        count: TokenCounter,
        *,
        ms: list[float] | None = None,
        outcomes: list[str] | None = None,
    ) -> None:
        times = ms if ms is not None else [0.0] * len(prompts)
        self.tally.add(case.session, case.window, prompts, times, count.count_many, outcomes or ())

    def row(self, profile: Profile, method: str) -> dict[str, Any]:
        billings = [*self.tally.billings, *self.summarising]
        timed = method == CTXOPT  # the host alone adds nothing to a call (its summaries aside)
        return {
            "host": profile.name,
            "format": profile.fmt,
            "method": method,
            "calls": len(self.tally.billings),
            "summarising_calls": len(self.summarising),
            "prompt_tokens": sum(b.prompt_tokens for b in billings),
            "billed_tokens": round(sum(profile.prices.billed(b) for b in billings)),
            "needed_later_recall": round(self.tally.mean_recall(), 4),
            "over_window_calls": self.tally.over_window,
            "added_p50_ms": percentile(self.tally.ms, 50) if timed else None,
            "added_p95_ms": percentile(self.tally.ms, 95) if timed else None,
            **({"outcomes": self.tally.outcomes} if self.tally.outcomes else {}),
        }


def tokens_of(prompt: Prompt, count: TokenCounter) -> int:
    return sum(count.count_many([text for _, text in prompt]))


def summarising_billings(
    calls: list[Prompt], summarising: dict[int, Prompt], count: TokenCounter
) -> list[Billing]:
    """Each summarising call billed after the call before it (the same history, cached)."""
    return [
        bill_calls([calls[k - 1], prompt], count.count_many)[1] for k, prompt in summarising.items()
    ]


def gemini_summarising(
    prompts: list[Prompt], outcomes: list[str], count: TokenCounter
) -> list[Billing]:
    """Gemini CLI's summary and its verification, each sending at most the
    previous prompt's history under their own system instruction (so the
    first is uncached, the second cached as the first)."""
    billings = []
    for k, outcome in enumerate(outcomes):
        if k and outcome.split(" + ")[0] in GEMINI_SUMMARISED:
            tokens = tokens_of(prompts[k - 1], count)
            billings += [Billing(tokens, 0), Billing(tokens, tokens)]
    return billings


def compacting_leg(
    profile: Profile, cases: list[Case], count: TokenCounter, *, edited: bool = False
) -> Leg:
    """Claude Code or Codex alone (`edited`: with Anthropic context editing)."""
    leg = Leg()
    for case in cases:
        model = Compacting(
            line=profile.line(case.window),
            keep_task=profile is CODEX,
            edit=context_editing(case.window, claude_window(profile.model)) if edited else None,
        )
        sent = compacting(case, profile.fmt, model, lambda prompt: tokens_of(prompt, count))
        leg.add(case, sent.calls, count)
        leg.summarising += summarising_billings(sent.calls, sent.summarising, count)
    return leg


def gemini_cli_leg(cases: list[Case], count: TokenCounter) -> Leg:
    """Gemini CLI alone: the session replay's gemini-cli-native leg, masking scaled."""
    check_node(TS_CLIENT)
    by_id = {c.session.instance_id: c for c in cases}
    jobs = [
        Job("gemini-cli-native", HOST, SHARE_WINDOW, c.session, c.window, scaled_masking=True)
        for c in cases
    ]
    leg = Leg()
    for job, result in run_jobs(jobs, address=""):  # no ctxopt job: no server
        leg.add(by_id[job.session.instance_id], result.prompts, count, outcomes=result.outcomes)
        leg.summarising += gemini_summarising(result.prompts, result.outcomes, count)
    return leg


def ctxopt_legs(cases: list[Case], count: TokenCounter) -> dict[str, Leg]:
    """Each host through one real gateway, by host name."""
    legs = {p.name: Leg() for p in PROFILES}
    # The provider reports the prompt's size as it counts it; here that is cl100k, the count W,
    # the lines and the hosts' own judgement are in (the fake's default, raw bytes / 4, would
    # make the gateway shrink its ceiling for a tokenizer that counts more than cl100k).
    with (
        fake_upstream(usage=lambda recorded: json_tokens(recorded.body)) as upstream,
        tempfile.TemporaryDirectory() as tmp,
        serving(Path(tmp), "--gateway-addr", "127.0.0.1:0", env=upstream_env(upstream)) as server,
        httpx.Client(timeout=120) as client,
    ):
        for profile in PROFILES:
            for case in cases:
                line = profile.line(case.window)
                sent = through.replay(client, server.gateway_url, upstream, profile, case, line)
                legs[profile.name].add(
                    case, sent.prompts, count, ms=sent.added_ms, outcomes=sent.outcomes
                )
    return legs


def rows_of(cases: list[Case], count: TokenCounter) -> list[dict[str, Any]]:
    """Every leg of every host over `cases`, one row each, in table order."""
    ctxopt = ctxopt_legs(cases, count)
    legs = {
        (CLAUDE_CODE, HOST): compacting_leg(CLAUDE_CODE, cases, count),
        (CLAUDE_CODE, CONTEXT_EDITING): compacting_leg(CLAUDE_CODE, cases, count, edited=True),
        (CLAUDE_CODE, CTXOPT): ctxopt[CLAUDE_CODE.name],
        (CODEX, HOST): compacting_leg(CODEX, cases, count),
        (CODEX, CTXOPT): ctxopt[CODEX.name],
        (GEMINI_CLI, HOST): gemini_cli_leg(cases, count),
        (GEMINI_CLI, CTXOPT): ctxopt[GEMINI_CLI.name],
    }
    alone = {p: legs[(p, HOST)].row(p, HOST)["billed_tokens"] for p in PROFILES}
    summary_tokens = count.count(SUMMARY_TEXT)  # each summarising call's output, not billed here
    rows = []
    for (profile, method), leg in legs.items():
        row = leg.row(profile, method)
        rows.append(
            {
                **row,
                "billed_vs_host": round(row["billed_tokens"] / alone[profile], 3),
                "summary_output_tokens": row["summarising_calls"] * summary_tokens,
            }
        )
    return rows


def long_cases(cases: list[Case], k: int, count: TokenCounter) -> list[Case]:
    """Sessions of `k` consecutive trajectories worked one after the other
    (sessions.concatenated), each trajectory's steps up to its last call."""
    sessions = concatenated([c.session for c in cases], k, count.count_many)
    long = []
    for start, session in zip(range(0, len(cases), k), sessions, strict=False):
        group = cases[start : start + k]
        steps = tuple(s for c in group for s in c.trajectory.steps[: c.calls - 1])
        first = group[0].trajectory
        long.append(
            Case.of(session, Trajectory(session.instance_id, first.system, first.task, steps))
        )
    return long


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
        "rows": rows_of(cases, count),
    }
    if args.long:
        long = long_cases(cases, args.long, count)
        results["long"] = {
            "trajectories_per_session": args.long,
            "sessions": len(long),
            "window_median": statistics.median(c.window for c in long),
            "rows": rows_of(long, count),
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
    parser.add_argument("--smoke", action="store_true", help="tiny run, for CI")
    parser.add_argument("--out", type=Path, default=RESULTS / "hosts.json")
    args = parser.parse_args()
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
