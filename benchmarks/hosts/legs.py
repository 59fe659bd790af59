"""The legs of the host benchmark: each host alone, and each host through the
gateway, tallied per host over every trajectory, one table row per leg."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from ctxopt.api.gateway.windows import claude_window
from ctxopt.tokens import TokenCounter

from benchmarks.hosts import through
from benchmarks.hosts.baselines import Compacting, compacting, context_editing
from benchmarks.hosts.profiles import CLAUDE_CODE, CODEX, GEMINI_CLI, PROFILES, Profile
from benchmarks.hosts.prompts import Case
from benchmarks.latency.typescript import TS_CLIENT
from benchmarks.replay.ledger import Billing, bill_calls
from benchmarks.replay.node import SUMMARY_TEXT, Job, check_node, run_jobs
from benchmarks.replay.report import Tally, percentile
from benchmarks.replay.sessions import SHARE_WINDOW, Prompt
from tests.gateway.checks import tokens_of as json_tokens
from tests.gateway.conftest import upstream_env
from tests.gateway.upstream import fake_upstream
from tests.serverproc import serving

# Gemini CLI's compression statuses after which it had asked the model for a summary, twice
# (the summary, then its "probe" verification: chatCompressionService.js of gemini-cli-core)
GEMINI_SUMMARISED = ("COMPRESSED", "COMPRESSION_FAILED_INFLATED_TOKEN_COUNT")
HOST, CONTEXT_EDITING, CTXOPT = "host", "host + context editing", "ctxopt"


@dataclass(slots=True)
class Leg:
    """One way of sending a host's calls, over every trajectory."""

    tally: Tally = field(default_factory=Tally)
    summarising_by: dict[str, list[Billing]] = field(default_factory=dict)  # per session

    @property
    def summarising(self) -> list[Billing]:
        return [b for billings in self.summarising_by.values() for b in billings]

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
        # the host alone adds nothing to a call (its summaries aside)
        timed = method.startswith(CTXOPT)
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
            "by_session": self.by_session(profile),
        }

    def by_session(self, profile: Profile) -> dict[str, list[float]]:
        """Per session: billed tokens (its calls; the summarising calls go to the
        session they were made in), the sum of its calls' recalls and their
        count, so that folds of sessions pool as the whole does."""
        figures = {}
        for instance, f in self.tally.by_session.items():
            extra = self.summarising_by.get(instance, [])
            billed = sum(profile.prices.billed(b) for b in [*f.billings, *extra])
            figures[instance] = [round(billed), round(sum(f.recalls), 4), len(f.recalls)]
        return figures


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
        leg.summarising_by[case.session.instance_id] = summarising_billings(
            sent.calls, sent.summarising, count
        )
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
        leg.summarising_by[job.session.instance_id] = gemini_summarising(
            result.prompts, result.outcomes, count
        )
    return leg


def ctxopt_legs(
    cases: list[Case], count: TokenCounter, env: dict[str, str] | None = None
) -> dict[str, Leg]:
    """Each host through one real gateway (its server's environment plus `env`),
    by host name."""
    legs = {p.name: Leg() for p in PROFILES}
    # The provider reports the prompt's size as it counts it; here that is cl100k, the count W,
    # the lines and the hosts' own judgement are in (the fake's default, raw bytes / 4, would
    # make the gateway shrink its ceiling for a tokenizer that counts more than cl100k).
    with (
        fake_upstream(usage=lambda recorded: json_tokens(recorded.body)) as upstream,
        tempfile.TemporaryDirectory() as tmp,
        serving(
            Path(tmp),
            "--gateway-addr",
            "127.0.0.1:0",
            env={**upstream_env(upstream), **(env or {})},
        ) as server,
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


def rows_of(
    cases: list[Case],
    count: TokenCounter,
    variants: dict[str, dict[str, str]] | None = None,
    *,
    default: bool = True,
) -> list[dict[str, Any]]:
    """Every leg of every host over `cases`, one row each, in table order; each
    of `variants` (name -> server environment) adds a row `ctxopt <name>` per
    host; `default` False leaves out ctxopt with the server's defaults."""
    ctxopt = ctxopt_legs(cases, count) if default else {}
    tried = {name: ctxopt_legs(cases, count, env) for name, env in (variants or {}).items()}
    legs = {
        (CLAUDE_CODE, HOST): compacting_leg(CLAUDE_CODE, cases, count),
        (CLAUDE_CODE, CONTEXT_EDITING): compacting_leg(CLAUDE_CODE, cases, count, edited=True),
        **({(CLAUDE_CODE, CTXOPT): ctxopt[CLAUDE_CODE.name]} if default else {}),
        (CODEX, HOST): compacting_leg(CODEX, cases, count),
        **({(CODEX, CTXOPT): ctxopt[CODEX.name]} if default else {}),
        (GEMINI_CLI, HOST): gemini_cli_leg(cases, count),
        **({(GEMINI_CLI, CTXOPT): ctxopt[GEMINI_CLI.name]} if default else {}),
        **{(p, f"{CTXOPT} {name}"): t[p.name] for name, t in tried.items() for p in PROFILES},
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
