"""Running a real agent CLI (Claude Code, Codex, Gemini CLI, aider, OpenCode) offline in a sandbox.

The CLIs come from tests/agents/node_modules (`make install-agents`, pinned by
package-lock.json), aider from its own virtual environment tests/agents/.venv-aider
(pinned in aider-requirements.txt: it pins many packages of its own). Each run
gets its own HOME, CODEX_HOME, XDG directories and TMPDIR under the test's
directory, a fake key, the switches that keep it offline, and the
non-interactive flags that let it run tools without asking; the user's own
configuration is never read or written. The host is pointed at the gateway (or
at any base URL) by the launcher's own `point_host`, so these runs test it too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from ctxopt.cli.launch import HOSTS, point_host

HERE = Path(__file__).parent
BIN = HERE / "node_modules" / ".bin"
AIDER_VENV = HERE / ".venv-aider"
EXECUTABLES = {host: BIN / host for host in HOSTS} | {"aider": AIDER_VENV / "bin" / "aider"}
RUN_TIMEOUT_S = 240.0
# Variables of the machine's environment that would point a host elsewhere or at a real account
_FOREIGN_PREFIXES = (
    "ANTHROPIC_",
    "CLAUDE_",
    "OPENAI_",
    "CODEX_",
    "GEMINI_",
    "GOOGLE_",
    "CTXOPT_",
    "AIDER_",
    "OPENCODE_",
    "LITELLM_",
)
PROMPT = "Read the large files in this folder and report how many lines each has."
# The model aider and OpenCode are run with, and what aider must be told about it offline
# (else LiteLLM and aider fetch price and window maps at start)
OPENAI_MODEL = "gpt-5.2"
AIDER_MODEL_METADATA = {
    f"openai/{name}": {
        "max_input_tokens": 400_000,
        "max_output_tokens": 128_000,
        "input_cost_per_token": 0.0,
        "output_cost_per_token": 0.0,
        "litellm_provider": "openai",
        "mode": "chat",
    }
    for name in (OPENAI_MODEL, "gpt-5-nano")  # the main model and its weak model
}


def require_clis() -> None:
    """Skip unless the CLIs' install step ran (`make test` always runs it)."""
    missing = [host for host in HOSTS if not EXECUTABLES[host].exists()]
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
    env[f"CTXOPT_{host.upper()}_BIN"] = str(EXECUTABLES[host])
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
    elif host == "aider":
        metadata = root / "model-metadata.json"
        metadata.write_text(json.dumps(AIDER_MODEL_METADATA))
        env.update(OPENAI_API_KEY="sk-test", LITELLM_LOCAL_MODEL_COST_MAP="True")
    elif host == "opencode":
        env.update(
            OPENAI_API_KEY="sk-test",
            OPENCODE_DISABLE_MODELS_FETCH="1",
            OPENCODE_DISABLE_AUTOUPDATE="1",
            XDG_DATA_HOME=str(home / ".local" / "share"),
            XDG_STATE_HOME=str(home / ".local" / "state"),
            PWD=str(workspace),  # OpenCode's shell tool starts where PWD says
        )
        seed_opencode_plugin(home / ".config" / "opencode")
    else:
        env.update(GEMINI_API_KEY="gemini-test", GEMINI_CLI_TRUST_WORKSPACE="true")
    return Sandbox(root, workspace, env)


def seed_opencode_plugin(config_dir: Path) -> None:
    """OpenCode installs @opencode-ai/plugin into its config directory at every start
    unless it is there: a copy of the pinned one from node_modules."""
    plugin = HERE / "node_modules" / "@opencode-ai" / "plugin"
    version = json.loads((plugin / "package.json").read_text())["version"]
    target = config_dir / "node_modules" / "@opencode-ai" / "plugin"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(plugin, target, symlinks=True)
    manifest = {"dependencies": {"@opencode-ai/plugin": version}}
    (config_dir / "package.json").write_text(json.dumps(manifest))


def host_args(host: str, prompt: str = PROMPT) -> list[str]:
    """The non-interactive command line: run tools without asking, answer, exit."""
    if host == "claude":
        return ["-p", prompt, "--allowedTools", "Bash"]
    if host == "codex":
        return ["exec", "--skip-git-repo-check", prompt]
    if host == "aider":  # the files it edits follow (aider_args)
        return ["--model", f"openai/{OPENAI_MODEL}", "--message", prompt]
    if host == "opencode":
        return ["run", "--model", f"openai/{OPENAI_MODEL}", prompt]
    return ["-p", prompt, "--approval-mode", "yolo"]


def aider_args(box: Sandbox, prompt: str, files: Sequence[str]) -> list[str]:
    """aider offline and unattended on `files` (added to the chat): no update check,
    no analytics, the model's metadata from a file, no git, no lint, yes to every
    question, one message."""
    offline = ["--no-check-update", "--no-analytics", "--no-show-model-warnings"]
    offline += ["--model-metadata-file", str(box.root / "model-metadata.json")]
    unattended = ["--yes-always", "--no-git", "--no-auto-lint", "--no-pretty"]
    return [*host_args("aider", prompt), *offline, *unattended, *files]


def run_host(
    host: str, box: Sandbox, base_url: str, args: Sequence[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `host` in `box` with its model calls going to `base_url` (a gateway's URL),
    with `args` (else `host_args(host)`)."""
    given = host_args(host) if args is None else list(args)
    launch = point_host(host, base_url, given, box.env, scratch=box.root / "tmp")
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
