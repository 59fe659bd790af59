"""One section of the host benchmark (short trajectories, or long sessions):
every leg of every host as a table row, ctxopt's points over its schedule
(the Pareto curve), and the rows' bill at other summary lengths."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxopt.tokens import TokenCounter

from benchmarks.hosts.costs import SENSITIVITY_TOKENS, Summaries, with_summary_tokens
from benchmarks.hosts.legs import (
    CONTEXT_EDITING,
    CTXOPT,
    HEADROOM,
    HOST,
    CasesByHost,
    Leg,
    compacting_leg,
    ctxopt_legs,
    gemini_cli_leg,
    headroom_legs,
)
from benchmarks.hosts.profiles import CLAUDE_CODE, GEMINI_CLI, PROFILES, Profile
from benchmarks.hosts.schedule import Schedule


@dataclass(frozen=True, slots=True)
class Options:
    summaries: Summaries
    sweep: tuple[Schedule, ...] = ()  # ctxopt's other points on its schedule
    headroom: bool = False  # the `host + headroom` legs (headroom's venv installed)
    default: bool = True  # ctxopt at the server's defaults (off: another run has it)
    gemini_threshold: float | None = None  # Gemini CLI's as `ctxopt run gemini` sets it


def section(cases: CasesByHost, count: TokenCounter, options: Options) -> dict[str, Any]:
    """Rows in table order, the frontier and the sensitivity of `cases`."""
    legs: dict[tuple[Profile, str], Leg] = {}
    threshold = options.gemini_threshold
    ctxopt = ctxopt_legs(cases, count, Schedule(), threshold) if options.default else {}
    peers = headroom_legs(cases, count) if options.headroom else {}
    for profile, host_cases in cases.items():
        if profile is GEMINI_CLI:
            legs[(profile, HOST)] = gemini_cli_leg(host_cases, count)
        else:
            legs[(profile, HOST)] = compacting_leg(profile, host_cases, count)
        if profile is CLAUDE_CODE:
            legs[(profile, CONTEXT_EDITING)] = compacting_leg(
                profile, host_cases, count, edited=True
            )
        if profile.name in ctxopt:
            legs[(profile, CTXOPT)] = ctxopt[profile.name]
        if profile.name in peers:
            legs[(profile, HEADROOM)] = peers[profile.name]
    rows = rows_of(legs, options.summaries)
    frontier = [_point(r, Schedule().label) for r in rows if r["method"] == CTXOPT]
    for schedule in options.sweep:
        swept = ctxopt_legs(cases, count, schedule, threshold)
        alone = {r["host"]: r["billed_tokens"] for r in rows if r["method"] == HOST}
        for profile in cases:
            row = swept[profile.name].row(profile, CTXOPT, options.summaries)
            row["billed_vs_host"] = round(row["billed_tokens"] / alone[profile.name], 3)
            frontier.append(_point(row, schedule.label))
    return {"rows": rows, "frontier": frontier, "sensitivity": sensitivity(rows)}


def rows_of(legs: dict[tuple[Profile, str], Leg], cost: Summaries) -> list[dict[str, Any]]:
    """One row per leg with `billed_vs_host`; Gemini CLI + headroom, whose calls
    headroom forwards unchanged, is the host's row with the sample's tally."""
    rows = []
    alone = {p: legs[(p, HOST)].row(p, HOST, cost)["billed_tokens"] for p, m in legs if m == HOST}
    for (profile, method), leg in legs.items():
        if method == HEADROOM and profile is GEMINI_CLI:
            row = legs[(profile, HOST)].row(profile, method, cost)
            same, seen = leg.sampled
            row["note"] = f"{same} of {seen} sampled calls forwarded unchanged"
        else:
            row = leg.row(profile, method, cost)
        rows.append({**row, "billed_vs_host": round(row["billed_tokens"] / alone[profile], 3)})
    return rows


def _point(row: dict[str, Any], schedule: str) -> dict[str, Any]:
    keys = (
        "host",
        "billed_tokens",
        "billed_vs_host",
        "needed_later_recall",
        "over_window_calls",
        "by_session",
    )
    return {"schedule": schedule, **{k: row[k] for k in keys}}


def sensitivity(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row's billed_vs_host had every summary been each of SENSITIVITY_TOKENS long."""
    prices = {p.name: p.price for p in PROFILES}
    out = []
    for tokens in SENSITIVITY_TOKENS:
        billed = {
            (r["host"], r["method"]): with_summary_tokens(
                r["input_billed_tokens"], r["summaries"], tokens, prices[r["host"]]
            )
            for r in rows
        }
        for (host, method), value in billed.items():
            ratio = value / billed[(host, HOST)]
            out.append(
                {
                    "summary_tokens": tokens,
                    "host": host,
                    "method": method,
                    "billed_vs_host": round(ratio, 3),
                }
            )
    return out
