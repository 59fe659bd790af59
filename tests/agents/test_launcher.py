"""`ctxopt run HOST [ARGS...]`: a fake host for what the launcher hands over, a real one end to end.

The fake host is a script that records its arguments and environment, checks
that the gateway answers at the URL it was given, and exits with a chosen
code. The end-to-end test runs the real Claude Code through `ctxopt run` to
the scripted provider.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from ctxopt.cli.launch import LAUNCH_COMPRESSION_THRESHOLD, gateway_answers, gemini_home_overlay

from tests.agents.agent_cli import host_args, require_clis, sandbox
from tests.agents.scripted_provider import (
    FINAL_ANSWER,
    AgentScript,
    read_and_inspect,
    requests_of,
    scripted_upstream,
    write_workspace,
)
from tests.serverproc import CTXOPT, serving

RUN_TIMEOUT_S = 120.0
FAKE_HOST = f"""#!{sys.executable}
import json, os, sys, urllib.error, urllib.parse, urllib.request
base = os.environ.get("ANTHROPIC_BASE_URL") or os.environ.get("GOOGLE_GEMINI_BASE_URL")
if base is None and "OPENCODE_CONFIG_CONTENT" in os.environ:
    config = json.loads(os.environ["OPENCODE_CONFIG_CONTENT"])
    base = config["provider"]["openai"]["options"]["baseURL"]
if base is None:  # codex: the base URL is in a -c override
    base = next(a for a in sys.argv if "base_url=" in a).split('base_url="')[1].split('"')[0]
try:
    origin = urllib.parse.urlsplit(base)
    urllib.request.urlopen(f"{{origin.scheme}}://{{origin.netloc}}/", timeout=5)
    answered = None
except urllib.error.HTTPError as e:
    answered = json.loads(e.read())["error"]["type"]
record = {{"argv": sys.argv[1:], "env": dict(os.environ), "gateway": answered}}
with open(os.environ["FAKE_HOST_RECORD"], "w") as out:
    json.dump(record, out)
sys.exit(int(os.environ.get("FAKE_HOST_EXIT", "0")))
"""


def _free_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _fake_host(tmp_path: Path) -> Path:
    path = tmp_path / "fake-host"
    path.write_text(FAKE_HOST)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _launch(
    host: str, args: list[str], tmp_path: Path, address: str, **env: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    record = tmp_path / "record.json"
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CTXOPT_", "OPENAI_"))}
    full_env = {
        **base,
        "HOME": str(home),
        f"CTXOPT_{host.upper()}_BIN": str(_fake_host(tmp_path)),
        "FAKE_HOST_RECORD": str(record),
        **env,
    }
    command = [str(CTXOPT), "run", "--gateway-addr", address, "--data-dir", str(tmp_path / "data")]
    result = subprocess.run(
        [*command, host, *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    recorded = json.loads(record.read_text()) if record.exists() else {}
    return result, recorded


def test_claude_gets_the_gateway_and_every_argument_and_its_exit_code_is_returned(
    tmp_path: Path,
) -> None:
    address = _free_address()
    args = ["--help", "-p", "fix the bug", "--allowedTools", "Bash", "--", "--not-ours", "a b"]
    result, recorded = _launch("claude", args, tmp_path, address, FAKE_HOST_EXIT="7")
    assert result.returncode == 7, result.stderr
    assert recorded["argv"] == args
    assert recorded["env"]["ANTHROPIC_BASE_URL"] == f"http://{address}/anthropic"
    assert recorded["gateway"] == "ctxopt_gateway"  # a started server answered during the run
    log = tmp_path / "data" / "logs" / "serve.log"
    assert f"its log: {log}" in result.stderr
    assert log.exists()
    assert not gateway_answers(address)  # and it was stopped when the host exited


def test_codex_gets_a_provider_for_this_run_through_config_overrides(tmp_path: Path) -> None:
    address = _free_address()
    args = ["exec", "--skip-git-repo-check", "say hi"]
    result, recorded = _launch("codex", args, tmp_path, address, OPENAI_API_KEY="sk-test")
    assert result.returncode == 0, result.stderr
    overrides, passed = recorded["argv"][:4], recorded["argv"][4:]
    assert passed == args
    assert overrides[0] == overrides[2] == "-c"
    assert overrides[3] == 'model_provider="ctxopt"'
    assert f'base_url="http://{address}/openai/v1"' in overrides[1]
    assert 'wire_api="responses"' in overrides[1] and 'env_key="OPENAI_API_KEY"' in overrides[1]
    assert recorded["gateway"] == "ctxopt_gateway"
    assert not (tmp_path / "home" / ".codex").exists()  # no config file written


def test_codex_without_an_api_key_uses_its_own_login(tmp_path: Path) -> None:
    result, recorded = _launch("codex", ["exec", "hi"], tmp_path, _free_address())
    assert result.returncode == 0, result.stderr
    assert "requires_openai_auth=true" in recorded["argv"][1]


def test_gemini_gets_an_auth_type_through_an_overlay_and_its_settings_stay_untouched(
    tmp_path: Path,
) -> None:
    user_dir = tmp_path / "home" / ".gemini"
    user_dir.mkdir(parents=True)
    settings = {"ui": {"theme": "GitHub"}, "security": {"folderTrust": {"enabled": False}}}
    (user_dir / "settings.json").write_text(json.dumps(settings))
    (user_dir / "oauth_creds.json").write_text("{}")
    address = _free_address()
    result, recorded = _launch("gemini", ["-p", "hi", "-m", "gemini-2.5-pro"], tmp_path, address)
    assert result.returncode == 0, result.stderr
    assert recorded["argv"] == ["-p", "hi", "-m", "gemini-2.5-pro"]
    assert recorded["env"]["GOOGLE_GEMINI_BASE_URL"] == f"http://{address}/gemini"
    overlay = Path(recorded["env"]["GEMINI_CLI_HOME"]) / ".gemini"
    assert not overlay.exists()  # a temporary directory, removed after the run
    assert json.loads((user_dir / "settings.json").read_text()) == settings
    assert recorded["env"]["GEMINI_CLI_CUSTOM_HEADERS"] == "x-ctxopt-compression-threshold: 0.9"


def test_gemini_with_its_own_auth_type_and_threshold_runs_on_the_users_home_and_says_so(
    tmp_path: Path,
) -> None:
    user_dir = tmp_path / "home" / ".gemini"
    user_dir.mkdir(parents=True)
    (user_dir / "settings.json").write_text(
        json.dumps(
            {
                "security": {"auth": {"selectedType": "vertex-ai"}},
                "model": {"compressionThreshold": 0.3},
            }
        )
    )
    mine = "x-team: blue"
    result, recorded = _launch(
        "gemini", ["-p", "hi"], tmp_path, _free_address(), GEMINI_CLI_CUSTOM_HEADERS=mine
    )
    assert result.returncode == 0, result.stderr
    assert "GEMINI_CLI_HOME" not in recorded["env"]
    assert (
        recorded["env"]["GEMINI_CLI_CUSTOM_HEADERS"]
        == f"{mine}, x-ctxopt-compression-threshold: 0.3"
    )


def test_the_gemini_overlay_adds_a_compression_threshold_beside_the_users_auth_type(
    tmp_path: Path,
) -> None:
    user_dir = tmp_path / "home" / ".gemini"
    user_dir.mkdir(parents=True)
    settings = {"security": {"auth": {"selectedType": "vertex-ai"}}}
    (user_dir / "settings.json").write_text(json.dumps(settings))
    overlay, threshold = gemini_home_overlay({"HOME": str(tmp_path / "home")}, tmp_path / "run")
    assert overlay is not None and threshold == LAUNCH_COMPRESSION_THRESHOLD
    written = json.loads((overlay / ".gemini" / "settings.json").read_text())
    assert written == {**settings, "model": {"compressionThreshold": LAUNCH_COMPRESSION_THRESHOLD}}
    assert json.loads((user_dir / "settings.json").read_text()) == settings


def test_aider_gets_the_gateway_for_openai_and_anthropic_models(tmp_path: Path) -> None:
    address = _free_address()
    args = ["--model", "openai/gpt-5.2", "--message", "fix it", "app.py"]
    result, recorded = _launch("aider", args, tmp_path, address, OPENAI_BASE_URL="http://x")
    assert result.returncode == 0, result.stderr
    assert recorded["argv"] == args
    for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL"):  # LiteLLM reads the second first
        assert recorded["env"][name] == f"http://{address}/openai/v1"
    for name in ("ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"):
        assert recorded["env"][name] == f"http://{address}/anthropic"
    assert recorded["gateway"] == "ctxopt_gateway"


def test_opencode_gets_its_providers_base_urls_merged_over_the_users_config(
    tmp_path: Path,
) -> None:
    address = _free_address()
    own = {"model": "openai/gpt-5.2", "provider": {"openai": {"options": {"timeout": 5}}}}
    args = ["run", "-m", "openai/gpt-5.2", "say hi"]
    env = {"OPENCODE_CONFIG_CONTENT": json.dumps(own)}
    result, recorded = _launch("opencode", args, tmp_path, address, **env)
    assert result.returncode == 0, result.stderr
    assert recorded["argv"] == args
    config = json.loads(recorded["env"]["OPENCODE_CONFIG_CONTENT"])
    assert config["model"] == "openai/gpt-5.2"
    assert config["provider"]["openai"]["options"] == {
        "timeout": 5,
        "baseURL": f"http://{address}/openai/v1",
    }
    assert config["provider"]["anthropic"]["options"]["baseURL"] == f"http://{address}/anthropic/v1"
    assert config["provider"]["google"]["options"]["baseURL"] == f"http://{address}/gemini/v1beta"
    assert recorded["gateway"] == "ctxopt_gateway"


def test_a_running_gateway_is_used_and_left_running(tmp_path: Path) -> None:
    address = _free_address()
    (tmp_path / "server").mkdir()
    with serving(tmp_path / "server", "--gateway-addr", address) as server:
        result, recorded = _launch("claude", ["-p", "hi"], tmp_path, address)
        assert result.returncode == 0, result.stderr
        assert "using the ctxopt gateway already running" in result.stderr
        assert recorded["gateway"] == "ctxopt_gateway"
        assert server.process.poll() is None
        assert gateway_answers(address)


def test_a_missing_host_fails_in_one_line_without_starting_a_server(tmp_path: Path) -> None:
    address = _free_address()
    missing = str(tmp_path / "no-such-claude")
    result, recorded = _launch("claude", ["-p", "hi"], tmp_path, address, CTXOPT_CLAUDE_BIN=missing)
    assert result.returncode == 2
    assert result.stderr.strip() == f"ctxopt: CTXOPT_CLAUDE_BIN: no such file (got {missing!r})"
    assert recorded == {}
    assert not (tmp_path / "data" / "logs").exists()


def test_real_claude_code_runs_end_to_end_through_ctxopt_run(tmp_path: Path) -> None:
    require_clis()
    workspace = tmp_path / "workspace"
    script = AgentScript(read_and_inspect(write_workspace(workspace, files=2, lines_per_file=50)))
    box = sandbox("claude", tmp_path / "host", workspace)
    address = _free_address()
    with scripted_upstream(script) as upstream:
        env = {**box.env, "CTXOPT_UPSTREAM_ANTHROPIC": upstream.url}
        command = [str(CTXOPT), "run", "--gateway-addr", address, "--data-dir", str(tmp_path / "d")]
        result = subprocess.run(
            [*command, "claude", *host_args("claude")],
            cwd=workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    assert FINAL_ANSWER in result.stdout
    assert script.finished()
    turns = requests_of(upstream, "agent")
    assert turns and all(r.path == "/v1/messages" for r in turns)
    assert all(r.headers["user-agent"].startswith("claude-cli/") for r in turns)
    log = (tmp_path / "d" / "logs" / "serve.log").read_text()
    assert log.count('{"gateway"') == len(turns)
