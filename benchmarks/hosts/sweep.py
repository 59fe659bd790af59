"""The gateway's schedule knobs swept in process, scored as `benchmarks.hosts` scores them.

    python -m benchmarks.hosts.sweep --variant NAME:FIELD=VALUE,... [...]
        [--hosts claude,codex] [--limit N] [--long K] [--short] [--out PATH]

The same bodies, rendering, billing and needed-later recall as
`benchmarks.hosts`, but each host's requests go straight into the gateway's
`Pipeline` (a fresh in-memory engine per variant and host) instead of a
server over HTTP, so a grid of settings runs in minutes; added latency is not
measured. FIELD is a `Config` field (`gateway_trigger_percent=65`). The
provider's reported size is the cl100k count of the body, as the fake's.
Writes the host benchmark's JSON shape (rows with per-session figures), which
`benchmarks.hosts.cv` reads; `--short` adds the single trajectories beside
the long sessions. Claude Code and Codex CLI only: Gemini CLI alone runs in
Node (take its rows from `benchmarks.hosts`).
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import orjson
from ctxopt.api.gateway.formats.anthropic import AnthropicMessages
from ctxopt.api.gateway.formats.conversation import WireFormat
from ctxopt.api.gateway.formats.openai_responses import OpenAIResponses
from ctxopt.api.gateway.pipeline import Pipeline
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.tokens import TokenCounter

from benchmarks.gateway.histories import DEFAULT_SWE, load, request
from benchmarks.gateway.latency import PATHS
from benchmarks.hosts.legs import CTXOPT, HOST, Leg, compacting_leg
from benchmarks.hosts.profiles import CLAUDE_CODE, CODEX, Profile
from benchmarks.hosts.prompts import Case, long_cases, rendered
from benchmarks.replay.sessions import Session, load_sessions
from tests.gateway.checks import tokens_of as json_tokens

RESULTS = Path(__file__).resolve().parents[1] / "results"
PROFILES = {"claude": CLAUDE_CODE, "codex": CODEX}
FORMATS: dict[str, WireFormat] = {
    "anthropic": AnthropicMessages(),
    "openai-responses": OpenAIResponses(),
}


def gateway_leg(profile: Profile, cases: list[Case], count: TokenCounter, config: Config) -> Leg:
    """`profile`'s requests of every case through one in-process pipeline."""
    engine = Engine(config)
    pipeline = Pipeline(engine, config)
    fmt = FORMATS[profile.fmt]
    path = PATHS[profile.fmt][1].lstrip("/")
    leg = Leg()
    for case in cases:
        headers = {
            "user-agent": profile.user_agent,
            "x-ctxopt-session": f"sweep-{case.session.instance_id}"[:150],
            "x-ctxopt-window-tokens": str(profile.line(case.window)),
        }
        prompts, outcomes = [], []
        for k in range(case.calls):
            body = orjson.dumps(request(profile.fmt, case.trajectory, k))
            prepared = pipeline.prepare(fmt, path, body, headers, "")
            sent = orjson.loads(prepared.body)
            if prepared.state is not None:
                pipeline.report_usage(prepared.state, json_tokens(sent))
            prompts.append(rendered(case, sent))
            outcomes.append(prepared.outcome.value)
        leg.add(case, prompts, count, outcomes=outcomes)
    engine.close()
    return leg


def rows_of(
    cases: list[Case],
    count: TokenCounter,
    variants: dict[str, dict[str, Any]],
    profiles: list[Profile],
    done: Any,
) -> list[dict[str, Any]]:
    """The host alone and every variant, per host; `done(rows)` after each row."""
    rows: list[dict[str, Any]] = []
    for profile in profiles:
        alone = compacting_leg(profile, cases, count).row(profile, HOST)
        rows.append({**alone, "billed_vs_host": 1.0})
        for name, settings in variants.items():
            started = time.perf_counter()
            config = replace(Config(data_dir=":memory:"), **settings)
            row = gateway_leg(profile, cases, count, config).row(profile, f"{CTXOPT} {name}")
            ratio = round(row["billed_tokens"] / alone["billed_tokens"], 3)
            rows.append({**row, "billed_vs_host": ratio})
            done(rows)
            print(
                f"{profile.name:12} {name:16} billed {ratio:.3f} of the host, recall "
                f"{row['needed_later_recall']:.3f} (host {alone['needed_later_recall']:.3f}) in "
                f"{time.perf_counter() - started:.0f} s",
                flush=True,
            )
    return rows


def variant(text: str) -> tuple[str, dict[str, Any]]:
    """`t65l20:gateway_trigger_percent=65,gateway_landing_percent=20` -> name, Config fields."""
    name, _, settings = text.partition(":")
    known = {f.name: f for f in fields(Config)}
    values: dict[str, Any] = {}
    for setting in filter(None, settings.split(",")):
        key, sep, raw = setting.partition("=")
        if not sep or key not in known:
            raise argparse.ArgumentTypeError(f"{setting!r}: expected FIELD=VALUE of a Config field")
        default = getattr(Config(), key)
        values[key] = (
            raw.lower() in ("1", "true") if isinstance(default, bool) else type(default)(raw)
        )
    return name, values


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variant", type=variant, action="append", default=[], required=True)
    parser.add_argument("--hosts", default="claude,codex", help="of: claude, codex")
    parser.add_argument("--limit", type=int, default=52)
    parser.add_argument("--long", type=int, default=13)
    parser.add_argument("--short", action="store_true", help="also the single trajectories")
    parser.add_argument("--out", type=Path, default=RESULTS / "hosts_sweep.json")
    args = parser.parse_args()
    # a call's needed lines are the same on every leg: found once
    Session.needed = functools.lru_cache(maxsize=None)(Session.needed)  # type: ignore[method-assign]
    count = TokenCounter("cl100k")
    sessions = load_sessions(DEFAULT_SWE, count.count_many, limit=args.limit)
    trajectories = load(DEFAULT_SWE, limit=args.limit)
    cases = [Case.of(s, t) for s, t in zip(sessions, trajectories, strict=True)]
    profiles = [PROFILES[h.strip()] for h in args.hosts.split(",")]
    variants = dict(args.variant)
    results: dict[str, Any] = {
        "command": "python -m benchmarks.hosts.sweep",
        "variants": variants,
        "long": {"trajectories_per_session": args.long, "rows": []},
        "rows": [],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save(section: dict[str, Any]) -> Any:
        def done(rows: list[dict[str, Any]]) -> None:
            section["rows"] = rows
            args.out.write_text(json.dumps(results, indent=1) + "\n")

        return done

    long = long_cases(cases, args.long, count.count_many)
    rows_of(long, count, variants, profiles, save(results["long"]))
    if args.short:
        rows_of(cases, count, variants, profiles, save(results))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
