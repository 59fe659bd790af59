"""Running a real agent CLI (Claude Code, Codex, Gemini CLI) offline in a sandbox.

The CLIs come from tests/agents/node_modules (`make install-agents`, pinned by
package-lock.json). Each run gets its own HOME, CODEX_HOME and TMPDIR under
the test's directory, a fake key, and the non-interactive flags that let it
run tools without asking; the user's own ~/.claude, ~/.codex and ~/.gemini
are never read or written. The host is pointed at the gateway (or at any
base URL) by the launcher's own `point_host`, so these runs test it too.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from ctxopt.cli.launch import HOSTS, point_host

BIN = Path(__file__).parent / "node_modules" / ".bin"
RUN_TIMEOUT_S = 240.0
# Variables of the machine's environment that would point a host elsewhere or at a real account
_FOREIGN_PREFIXES = ("ANTHROPIC_", "CLAUDE_", "OPENAI_", "CODEX_", "GEMINI_", "GOOGLE_", "CTXOPT_")
PROMPT = "Read the large files in this folder and report how many lines each has."


def require_clis() -> None:
    """Skip unless the CLIs' install step ran (`make test` always runs it)."""
    missing = [host for host in HOSTS if not (BIN / host).exists()]
    if missing:
        pytest.skip(f"agent CLIs not installed ({', '.join(missing)}): run `make install-agents`")


@dataclass(frozen=True)
class Sandbox:
    root: Path
    workspace: Path
    env: dict[str, str]  # before pointing the host anywhere


def sandbox(host: str, root: Path, workspace: Path) -> Sandbox:
    """A private HOME (and CODEX_HOME, TMPDIR) for `host` under `root`, with a fake key."""
    home = root / "home"
    tmp = root / "tmp"
    for directory in (home, tmp):
        directory.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_PREFIXES)}
    env.update(
        HOME=str(home),
        TMPDIR=str(tmp),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        NO_COLOR="1",
    )
    env[f"CTXOPT_{host.upper()}_BIN"] = str(BIN / host)
    if host == "claude":
        env.update(
            ANTHROPIC_API_KEY="sk-ant-test",
            CLAUDE_CONFIG_DIR=str(home / ".claude"),
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            DISABLE_AUTOUPDATER="1",
        )
    elif host == "codex":
        codex_home = root / "codex-home"
        codex_home.mkdir(exist_ok=True)
        # a model Codex ships metadata for (an unknown one cuts tool outputs at 10 KB)
        (codex_home / "config.toml").write_text('model = "gpt-5.5"\n')
        env.update(CODEX_HOME=str(codex_home), OPENAI_API_KEY="sk-test")
    else:
        env.update(GEMINI_API_KEY="gemini-test", GEMINI_CLI_TRUST_WORKSPACE="true")
    return Sandbox(root, workspace, env)


def host_args(host: str, prompt: str = PROMPT) -> list[str]:
    """The non-interactive command line: run tools without asking, answer, exit."""
    if host == "claude":
        return ["-p", prompt, "--allowedTools", "Bash"]
    if host == "codex":
        return ["exec", "--skip-git-repo-check", prompt]
    return ["-p", prompt, "--approval-mode", "yolo"]


def run_host(host: str, box: Sandbox, base_url: str) -> subprocess.CompletedProcess[str]:
    """Run `host` in `box` with its model calls going to `base_url` (a gateway's URL)."""
    launch = point_host(host, base_url, host_args(host), box.env, scratch=box.root / "tmp")
    return subprocess.run(
        launch.argv,
        cwd=box.workspace,
        env=launch.env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        check=False,
    )
