"""Measure where each real agent CLI compacts its own history, offline.

    .venv/bin/python -m tests.agents.compaction_points [--host claude] [--model M]

The scripted provider reports a chosen prompt size in every answer's usage;
a host compacts (asks the model for a summary of its history) once that size
passes its line. Bisection over the reported size finds the smallest one
that makes the host compact on the next turn: the host's compaction point
for that model, in the provider's tokens. Prints one line per host and model.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

from ctxopt.cli.launch import point_host

from tests.agents.agent_cli import BIN, PROMPT, RUN_TIMEOUT_S, sandbox
from tests.agents.scripted_provider import (
    AgentScript,
    kind_of,
    read_and_inspect,
    scripted_upstream,
    write_workspace,
)
from tests.gateway.upstream import Recorded

# (host, model flag, low, high): the bracket to bisect, in reported prompt tokens
CASES: list[tuple[str, str | None, int, int]] = [
    ("claude", None, 100_000, 990_000),
    ("claude", "claude-sonnet-5-5", 100_000, 990_000),
    # a 200,000-token model of Claude Code's table: past its window the CLI stops with
    # "prompt is too long" instead of compacting, so the bracket ends below it
    ("claude", "claude-opus-4-5", 50_000, 195_000),
    ("codex", None, 100_000, 400_000),
]
RESOLUTION = 100  # tokens


def scripted_run(host: str, args: list[str], reported: int | None) -> tuple[str, list[Recorded]]:
    """Run `host` with `args` on a small scratch workspace against the scripted
    provider, every answer reporting `reported` prompt tokens (None: the
    request's own size); its scratch root and every request that reached the
    provider."""
    with tempfile.TemporaryDirectory(prefix="ctxopt-compaction-") as scratch:
        root = Path(scratch)
        names = write_workspace(root / "workspace", files=2, lines_per_file=10)
        script = AgentScript(read_and_inspect(names), reported_prompt_tokens=reported)
        box = sandbox(host, root, root / "workspace")
        with scripted_upstream(script) as upstream:
            launch = point_host(host, upstream.url, args, box.env, scratch=root / "tmp")
            subprocess.run(
                launch.argv,
                cwd=box.workspace,
                env=launch.env,
                capture_output=True,
                timeout=RUN_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
                check=False,
            )
            with upstream.lock:
                return str(root), list(upstream.requests)


def compacts(host: str, model: str | None, reported: int) -> bool:
    """Whether `host` compacts when every answer reports `reported` prompt tokens."""
    _, requests = scripted_run(host, _args(host, model), reported)
    return any(kind_of(r) == "compaction" for r in requests)


def _args(host: str, model: str | None) -> list[str]:
    if host == "claude":
        return ["-p", PROMPT, "--allowedTools", "Bash", *(["--model", model] if model else [])]
    if host == "codex":
        return ["exec", "--skip-git-repo-check", *(["-m", model] if model else []), PROMPT]
    return ["-p", PROMPT, "--approval-mode", "yolo", *(["-m", model] if model else [])]


def compaction_point(host: str, model: str | None, low: int, high: int) -> int | None:
    """The smallest reported size in (low, high] that makes `host` compact, None if none."""
    if not compacts(host, model, high):
        return None
    while high - low > RESOLUTION:
        middle = (low + high) // 2
        if compacts(host, model, middle):
            high = middle
        else:
            low = middle
    return high


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", choices=("claude", "codex", "gemini"))
    parser.add_argument("--model")
    args = parser.parse_args()
    if not (BIN / "claude").exists():
        raise SystemExit("agent CLIs not installed: run `make install-agents`")
    cases = [c for c in CASES if args.host in (None, c[0])]
    if args.model:
        cases = [c for c in cases if c[1] == args.model] or [
            (host, args.model, low, high) for host, _, low, high in cases[:1]
        ]
    for host, model, low, high in cases:
        point = compaction_point(host, model, low, high)
        found = (
            f"compacts at {point:,} reported prompt tokens (+-{RESOLUTION})"
            if point
            else (f"does not compact up to {high:,}")
        )
        print(f"{host} {model or '(default model)'}: {found}", flush=True)


if __name__ == "__main__":
    main()
