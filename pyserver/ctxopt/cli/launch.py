"""`ctxopt run HOST [ARGS...]`: run an agent CLI with its model calls going through the gateway.

The host (Claude Code, Codex CLI, Gemini CLI, aider or OpenCode) is pointed at the gateway for
this run only, through its environment or its command line; no file the user
owns is edited. When no gateway answers at the address, `ctxopt serve` is
started there with the gateway on (its log goes to a file under the data
directory, whose path is printed), and stopped when the host exits. Every
argument after HOST goes to the host unchanged, and its exit code is ours.

How each host is pointed (the gateway's route prefix after the address):
    claude  ANTHROPIC_BASE_URL=<gateway>/anthropic
    codex   -c overrides: a `ctxopt` model provider with base_url <gateway>/openai/v1,
            wire_api "responses", the key from OPENAI_API_KEY (else Codex's own login)
    gemini  GOOGLE_GEMINI_BASE_URL=<gateway>/gemini; through a temporary GEMINI_CLI_HOME
            overlay, when the user's settings choose none, the auth type
            "gemini-api-key" (Gemini CLI 0.61.0's headless mode refuses the
            "gateway" auth type it would pick from the base URL alone) and a
            compression threshold of LAUNCH_COMPRESSION_THRESHOLD; the threshold
            in force goes to the gateway in a header (GEMINI_CLI_CUSTOM_HEADERS)
    aider   OPENAI_API_BASE and OPENAI_BASE_URL=<gateway>/openai/v1, ANTHROPIC_API_BASE and
            ANTHROPIC_BASE_URL=<gateway>/anthropic (LiteLLM, which aider calls, reads either)
    opencode  OPENCODE_CONFIG_CONTENT (merged over the user's own, which OpenCode merges over
            its config files): the base URLs of its built-in `openai`, `anthropic` and
            `google` providers
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ctxopt.api.gateway.hosts import COMPRESSION_HEADER, compression_threshold
from ctxopt.errors import FailedPrecondition, InvalidArgument

HOSTS = ("claude", "codex", "gemini", "aider", "opencode")
# A fixed loopback port beside gRPC's default 50051, so a second `ctxopt run` finds the first
DEFAULT_GATEWAY_ADDR = "127.0.0.1:50052"
HEALTH_TIMEOUT_S = 1.0
STARTUP_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
# The gateway answers an unknown path with an error of this type: how a running one is told
# apart from another HTTP service on the port
GATEWAY_ERROR_TYPE = "ctxopt_gateway"
CODEX_PROVIDER = "ctxopt"
# Gemini CLI's compression threshold for a run through the gateway, when the user set none:
# the gateway keeps the prompt under it, so Gemini CLI's own compression (lossy, two model
# calls) does not run, and the gateway may keep up to this share of the window instead of
# half (its default, 0.5). 0.9 leaves a tenth for the newest turn and the answer, as Codex
# CLI's own line (90% of its window).
LAUNCH_COMPRESSION_THRESHOLD = 0.9
# OpenCode 1.18.33's built-in providers and their SDKs' default base URLs' paths
# (@ai-sdk/openai .../v1, @ai-sdk/anthropic .../v1, @ai-sdk/google .../v1beta)
OPENCODE_PROVIDERS = {
    "openai": "/openai/v1",
    "anthropic": "/anthropic/v1",
    "google": "/gemini/v1beta",
}


@dataclass(frozen=True)
class HostLaunch:
    """The command and environment that run a host against the gateway."""

    argv: list[str]
    env: dict[str, str]


def point_host(
    host: str,
    gateway_url: str,
    args: Sequence[str],
    env: Mapping[str, str],
    *,
    scratch: Path,
) -> HostLaunch:
    """`host` with `args`, its model calls sent to the gateway at `gateway_url`.

    `env` is the environment to start from (it is not changed); `scratch` is a
    directory for files this run needs (Gemini CLI's auth choice), removed by
    the caller afterwards.
    """
    executable = host_executable(host, env)
    launch_env = dict(env)
    argv = [executable]
    if host == "claude":
        launch_env["ANTHROPIC_BASE_URL"] = f"{gateway_url}/anthropic"
    elif host == "codex":
        argv += codex_overrides(f"{gateway_url}/openai/v1", env)
    elif host == "aider":
        for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL"):
            launch_env[name] = f"{gateway_url}/openai/v1"
        for name in ("ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"):
            launch_env[name] = f"{gateway_url}/anthropic"
    elif host == "opencode":
        launch_env["OPENCODE_CONFIG_CONTENT"] = opencode_config(gateway_url, env)
    else:
        launch_env["GOOGLE_GEMINI_BASE_URL"] = f"{gateway_url}/gemini"
        overlay, threshold = gemini_home_overlay(env, scratch)
        if overlay is not None:
            launch_env["GEMINI_CLI_HOME"] = str(overlay)
        if threshold is not None:
            header = f"{COMPRESSION_HEADER}: {threshold:g}"
            mine = env.get("GEMINI_CLI_CUSTOM_HEADERS", "")
            launch_env["GEMINI_CLI_CUSTOM_HEADERS"] = f"{mine}, {header}" if mine else header
    return HostLaunch([*argv, *args], launch_env)


def host_executable(host: str, env: Mapping[str, str]) -> str:
    """CTXOPT_<HOST>_BIN when set, else the host's command on PATH."""
    if host not in HOSTS:
        raise InvalidArgument("host", host, f"must be one of {', '.join(HOSTS)}")
    variable = f"CTXOPT_{host.upper()}_BIN"
    given = env.get(variable, "")
    if given:
        if not Path(given).is_file():
            raise FailedPrecondition(variable, given, "no such file")
        return given
    found = shutil.which(host, path=env.get("PATH"))
    if found is None:
        raise FailedPrecondition(
            "host", host, f"`{host}` is not on PATH: install it, or set {variable}"
        )
    return found


def codex_overrides(base_url: str, env: Mapping[str, str]) -> list[str]:
    """`-c` options that make Codex use a `ctxopt` provider at `base_url` for this run."""
    auth = 'env_key="OPENAI_API_KEY"' if env.get("OPENAI_API_KEY") else "requires_openai_auth=true"
    provider = (
        f'{{name="ctxopt gateway",base_url={json.dumps(base_url)},wire_api="responses",{auth}}}'
    )
    return [
        "-c",
        f"model_providers.{CODEX_PROVIDER}={provider}",
        "-c",
        f'model_provider="{CODEX_PROVIDER}"',
    ]


def opencode_config(gateway_url: str, env: Mapping[str, str]) -> str:
    """The user's OPENCODE_CONFIG_CONTENT (if any) with OpenCode's built-in providers'
    base URLs at the gateway (the paths their SDKs append come after these)."""
    try:
        config = json.loads(env.get("OPENCODE_CONFIG_CONTENT") or "{}")
    except ValueError as e:
        raise InvalidArgument("OPENCODE_CONFIG_CONTENT", "(not JSON)", str(e)) from e
    if not isinstance(config, dict):
        raise InvalidArgument("OPENCODE_CONFIG_CONTENT", "(not an object)", "must be a JSON object")
    providers = config.setdefault("provider", {})
    for name, route in OPENCODE_PROVIDERS.items():
        provider = providers.setdefault(name, {})
        provider.setdefault("options", {})["baseURL"] = f"{gateway_url}{route}"
    return json.dumps(config)


def gemini_home_overlay(env: Mapping[str, str], scratch: Path) -> tuple[Path | None, float | None]:
    """A Gemini CLI home for this run whose settings choose "gemini-api-key" and
    a compression threshold, for what the user's settings leave unset (None: nothing
    to add), and the compression threshold in force (None: settings not readable).

    Gemini CLI 0.61.0 picks the "gateway" auth type from GOOGLE_GEMINI_BASE_URL
    alone, and its headless mode refuses it. The overlay (GEMINI_CLI_HOME) holds
    a copy of the user's settings.json with the auth type and the threshold
    (`model.compressionThreshold`, LAUNCH_COMPRESSION_THRESHOLD) added, and links
    to every other file of their ~/.gemini; their own settings file is not edited.
    """
    user_home = Path(env.get("GEMINI_CLI_HOME") or env.get("HOME") or Path.home())
    user_dir = user_home / ".gemini"
    settings_file = user_dir / "settings.json"
    try:
        settings = json.loads(settings_file.read_text()) if settings_file.exists() else {}
    except (OSError, ValueError):
        return None, None  # a file we cannot read as JSON: Gemini CLI reports it itself
    if not isinstance(settings, dict):
        return None, None
    added = False
    security = settings.setdefault("security", {})
    auth = security.setdefault("auth", {}) if isinstance(security, dict) else None
    if isinstance(auth, dict) and not auth.get("selectedType"):
        auth["selectedType"] = "gemini-api-key"
        added = True
    model = settings.setdefault("model", {})
    threshold = None  # a `model` that is not an object: Gemini CLI reports it itself
    if isinstance(model, dict):
        threshold = compression_threshold(str(model.get("compressionThreshold")))
        if "compressionThreshold" not in model:
            threshold = model["compressionThreshold"] = LAUNCH_COMPRESSION_THRESHOLD
            added = True
    if not added:
        return None, threshold
    overlay = scratch / "gemini-home"
    (overlay / ".gemini").mkdir(parents=True)
    if user_dir.is_dir():
        for entry in user_dir.iterdir():
            if entry.name != "settings.json":
                (overlay / ".gemini" / entry.name).symlink_to(entry)
    (overlay / ".gemini" / "settings.json").write_text(json.dumps(settings, indent=2))
    return overlay, threshold


def gateway_answers(address: str) -> bool:
    """Whether a ctxopt gateway answers at HOST:PORT (its 404 names itself)."""
    try:
        with urllib.request.urlopen(f"http://{address}/", timeout=HEALTH_TIMEOUT_S):
            return False  # a 200 on "/" is not the gateway
    except urllib.error.HTTPError as e:
        try:
            return bool(json.loads(e.read())["error"]["type"] == GATEWAY_ERROR_TYPE)
        except (ValueError, KeyError, TypeError):
            return False
    except (OSError, ValueError):
        return False


@dataclass
class StartedServer:
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_server(address: str, data_dir: Path, env: Mapping[str, str]) -> StartedServer:
    """`ctxopt serve` with the gateway at `address`, its log appended to data_dir/logs/serve.log.

    gRPC listens on a free loopback port: the gateway is what this run needs,
    and a default port already taken by another server must not stop it.
    """
    log = data_dir / "logs" / "serve.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "ctxopt",
        "serve",
        "--addr",
        "127.0.0.1:0",
        "--gateway-addr",
        address,
        "--data-dir",
        str(data_dir),
    ]
    with log.open("ab") as stderr:
        # its own session: a Ctrl-C meant for the agent must not stop the server mid-call
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=dict(env),
            start_new_session=True,
        )
    server = StartedServer(process, log)
    watchdog = threading.Timer(STARTUP_TIMEOUT_S, process.kill)
    watchdog.start()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith(b"ctxopt gateway listening on "):
                threading.Thread(target=process.stdout.read, daemon=True).start()
                return server
    finally:
        watchdog.cancel()
    process.wait()
    raise FailedPrecondition(
        "gateway_addr", address, f"ctxopt serve exited ({process.returncode}); see {log}"
    )


@contextmanager
def gateway(address: str, data_dir: Path, env: Mapping[str, str]) -> Iterator[str]:
    """The gateway's URL: one already answering at `address`, else one started for the block."""
    if gateway_answers(address):
        _say(f"using the ctxopt gateway already running at http://{address}")
        yield f"http://{address}"
        return
    host = address.rpartition(":")[0].strip("[]")
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise FailedPrecondition(
            "gateway_addr", address, "no gateway answers there (not loopback: not starting one)"
        )
    server = start_server(address, data_dir, env)
    _say(f"started ctxopt serve with the gateway at http://{address}; its log: {server.log}")
    try:
        yield f"http://{address}"
    finally:
        server.stop()


def run(host: str, args: Sequence[str], *, address: str, data_dir: Path) -> int:
    """Run `host` with `args` through the gateway at `address`; the host's exit code."""
    env = dict(os.environ)
    host_executable(host, env)  # fail before starting a server for a host that is not there
    with (
        gateway(address, data_dir, env) as url,
        tempfile.TemporaryDirectory(prefix="ctxopt-run-") as scratch,
    ):
        launch = point_host(host, url, args, env, scratch=Path(scratch))
        return _run_host(launch)


def _run_host(launch: HostLaunch) -> int:
    process = subprocess.Popen(launch.argv, env=launch.env)
    # Ctrl-C reaches the host through the terminal; the launcher waits for it to finish
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    forward = signal.signal(signal.SIGTERM, lambda *_: process.terminate())
    try:
        code = process.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, forward)
    return code if code >= 0 else 128 - code


def _say(message: str) -> None:
    print(f"ctxopt run: {message}", file=sys.stderr, flush=True)
