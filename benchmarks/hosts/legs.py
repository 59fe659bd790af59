"""The legs of the host benchmark: each host alone, through ctxopt's gateway
(under any collection schedule) and behind headroom's proxy, tallied per
host over every trajectory, one table row per leg."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from ctxopt.api.gateway.windows import claude_window
from ctxopt.tokens import TokenCounter

from benchmarks.gateway.histories import JsonObject
from benchmarks.gateway.latency import PATHS
from benchmarks.hosts import through
from benchmarks.hosts.baselines import Compacting, compacting, context_editing
from benchmarks.hosts.costs import Summaries, bill
from benchmarks.hosts.headroom_proxy import NextTurn, headroom_proxy
from benchmarks.hosts.profiles import CODEX, GEMINI_CLI, Profile
from benchmarks.hosts.prompts import Case, rendered
from benchmarks.hosts.schedule import Schedule
from benchmarks.latency.typescript import TS_CLIENT
from benchmarks.replay.ledger import Billing, bill_calls
from benchmarks.replay.node import Job, check_node, run_jobs
from benchmarks.replay.report import Tally, percentile
from benchmarks.replay.sessions import SHARE_WINDOW, Prompt
from tests.gateway.checks import tokens_of as json_tokens
from tests.gateway.conftest import upstream_env
from tests.gateway.upstream import FakeUpstream, fake_upstream
from tests.serverproc import serving

# Gemini CLI's compression statuses after which it had asked the model for a summary, twice
# (the summary, then its "probe" verification: chatCompressionService.js of gemini-cli-core)
GEMINI_SUMMARISED = ("COMPRESSED", "COMPRESSION_FAILED_INFLATED_TOKEN_COUNT")
HOST, CONTEXT_EDITING, CTXOPT, HEADROOM = (
    "host",
    "host + context editing",
    "ctxopt",
    "host + headroom",
)
# Of Gemini CLI's calls, every GEMINI_HEADROOM_SAMPLE-th goes through headroom to check that it
# forwards them unchanged (it leaves functionCall and functionResponse parts alone)
GEMINI_HEADROOM_SAMPLE = 10

CasesByHost = Mapping[Profile, Sequence[Case]]


@dataclass(slots=True)
class Leg:
    """One way of sending a host's calls, over every trajectory."""

    tally: Tally = field(default_factory=Tally)
    # per session: its summarising calls, and the summaries the model wrote (Gemini CLI: the
    # summary and its probe), so each session's bill stands alone for cross-validation
    summarising: dict[str, list[Billing]] = field(default_factory=dict)
    summaries: dict[str, int] = field(default_factory=dict)
    timed: bool = False  # a proxy stands in front: its added ms are the leg's stall
    sampled: tuple[int, int] = (0, 0)  # Gemini CLI + headroom: calls forwarded unchanged, of

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

    def summarised(self, session: str, billings: list[Billing], summaries: int) -> None:
        """`session`'s summarising calls and the summaries they wrote."""
        self.summarising[session] = self.summarising.get(session, []) + billings
        self.summaries[session] = self.summaries.get(session, 0) + summaries

    def row(self, profile: Profile, method: str, cost: Summaries) -> dict[str, Any]:
        summarising = [b for billings in self.summarising.values() for b in billings]
        summaries = sum(self.summaries.values())
        billings = [*self.tally.billings, *summarising]
        billed = bill(billings, summaries, cost, profile.price)
        added_s = sum(self.tally.ms) / 1000 if self.timed else 0.0
        return {
            "host": profile.name,
            "format": profile.fmt,
            "method": method,
            "calls": len(self.tally.billings),
            "summarising_calls": len(summarising),
            "summaries": summaries,
            "prompt_tokens": sum(b.prompt_tokens for b in billings),
            "input_billed_tokens": round(billed.input_tokens),
            "summary_output_tokens": summaries * cost.output_tokens,
            "output_billed_tokens": round(billed.output_tokens),
            "billed_tokens": round(billed.total),
            "needed_later_recall": round(self.tally.mean_recall(), 4),
            "over_window_calls": self.tally.over_window,
            "added_p50_ms": percentile(self.tally.ms, 50) if self.timed else None,
            "added_p95_ms": percentile(self.tally.ms, 95) if self.timed else None,
            "stall_s": round(cost.stall_s(summaries) + added_s, 1),
            **({"outcomes": self.tally.outcomes} if self.tally.outcomes else {}),
            "by_session": self.by_session(profile, cost),
        }

    def by_session(self, profile: Profile, cost: Summaries) -> dict[str, list[float]]:
        """Per session, in replay order: billed tokens, its calls' summed
        needed-later recall and how many calls needed a line (benchmarks/hosts/cv.py)."""
        out = {}
        for session, figures in self.tally.by_session.items():
            billings = [*figures.billings, *self.summarising.get(session, [])]
            billed = bill(billings, self.summaries.get(session, 0), cost, profile.price)
            out[session] = [round(billed.total), sum(figures.recalls), len(figures.recalls)]
        return out


def tokens_of(prompt: Prompt, count: TokenCounter) -> int:
    return sum(count.count_many([text for _, text in prompt]))


def summarising_billings(
    calls: list[Prompt], summarising: dict[int, Prompt], count: TokenCounter
) -> list[Billing]:
    """Each summarising call billed after the call before it (its shared prefix cached)."""
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
    profile: Profile,
    cases: Sequence[Case],
    count: TokenCounter,
    *,
    edited: bool = False,
) -> Leg:
    """Claude Code or Codex alone (`edited`: with Anthropic context editing)."""
    leg = Leg()
    for case in cases:
        edit = context_editing(case.window, claude_window(profile.model)) if edited else None
        _compact(
            leg, profile, case, count, Compacting(profile.line(case.window), profile is CODEX, edit)
        )
    return leg


def _compact(
    leg: Leg,
    profile: Profile,
    case: Case,
    count: TokenCounter,
    model: Compacting,
    send: _Proxied | None = None,
) -> None:
    sent = compacting(case, model, lambda prompt: tokens_of(prompt, count), send)
    ms = None if send is None else [send.ms[k] for k in range(case.calls)]
    leg.add(case, sent.calls, count, ms=ms)
    billings = summarising_billings(sent.calls, sent.summarising, count)
    leg.summarised(case.session.instance_id, billings, len(sent.summarising))


def gemini_cli_leg(cases: Sequence[Case], count: TokenCounter) -> Leg:
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
        billings = gemini_summarising(result.prompts, result.outcomes, count)
        leg.summarised(job.session.instance_id, billings, len(billings))
    return leg


def ctxopt_legs(
    cases: CasesByHost,
    count: TokenCounter,
    schedule: Schedule,
    gemini_threshold: float | None = None,
) -> dict[str, Leg]:
    """Each host through one real gateway collecting on `schedule`, by host name
    (`gemini_threshold`: Gemini CLI's compression threshold as `ctxopt run gemini`
    sets it, its line then that share of W; None: its own default)."""
    legs = {p.name: Leg(timed=True) for p in cases}
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
            env={**upstream_env(upstream), **schedule.env()},
        ) as server,
        httpx.Client(timeout=120) as client,
    ):
        for profile, host_cases in cases.items():
            for case in host_cases:
                line = profile.line(case.window)
                if profile is GEMINI_CLI and gemini_threshold is not None:
                    line = int(case.window * gemini_threshold)
                sent = through.replay(client, server.gateway_url, upstream, profile, case, line)
                legs[profile.name].add(
                    case, sent.prompts, count, ms=sent.added_ms, outcomes=sent.outcomes
                )
    return legs


@dataclass(slots=True)
class _Proxied:
    """Sends one case's bodies through headroom and times what it adds."""

    client: httpx.Client
    proxy: str
    upstream: FakeUpstream
    script: NextTurn
    profile: Profile
    case: Case
    # per call index (a summarising call's time is overwritten by its call's)
    ms: dict[int, float] = field(default_factory=dict)

    def __call__(self, body: JsonObject, call: int) -> Prompt:
        _, path = PATHS[self.profile.fmt]
        self.script.step = call
        started = time.perf_counter()
        self.client.post(self.upstream.url + path, json=body).raise_for_status()
        direct = time.perf_counter() - started
        headers = {"user-agent": self.profile.user_agent, "x-api-key": "bench"}
        started = time.perf_counter()
        self.client.post(self.proxy + path, json=body, headers=headers).raise_for_status()
        self.ms[call] = (time.perf_counter() - started - direct) * 1000
        forwarded = self.upstream.calls(path)[-1].body
        with self.upstream.lock:
            self.upstream.requests.clear()
        return rendered(self.case, forwarded)


def headroom_legs(cases: CasesByHost, count: TokenCounter) -> dict[str, Leg]:
    """Claude Code and Codex behind headroom's proxy, compacting at their line
    on the sizes it forwards; Gemini CLI's calls sampled through it (its own
    compression runs in Node, which is not pointed at the proxy)."""
    legs: dict[str, Leg] = {}
    script = NextTurn()
    with (
        fake_upstream(script=script) as upstream,
        headroom_proxy(upstream.url) as proxy,
        httpx.Client(timeout=300) as client,
    ):
        for profile, host_cases in cases.items():
            leg = legs[profile.name] = Leg(timed=True)
            for case in host_cases:
                script.fmt, script.trajectory = profile.fmt, case.trajectory
                send = _Proxied(client, proxy, upstream, script, profile, case)
                if profile is GEMINI_CLI:
                    same, seen = _unchanged(send, case)
                    leg.sampled = (leg.sampled[0] + same, leg.sampled[1] + seen)
                    continue
                model = Compacting(profile.line(case.window), profile is CODEX)
                _compact(leg, profile, case, count, model, send)
    return legs


def _unchanged(send: _Proxied, case: Case) -> tuple[int, int]:
    """Every GEMINI_HEADROOM_SAMPLE-th full-history body of `case` through the
    proxy: how many it forwarded unchanged, of how many."""
    calls = range(0, case.calls, GEMINI_HEADROOM_SAMPLE)
    same = sum(send(case.body(k), k) == rendered(case, case.body(k)) for k in calls)
    return same, len(calls)
