"""headroom as a peer: its proxy between a host and the same fake provider.

headroom-ai (PyPI, Apache-2.0) is a proxy that agents reach through their
base URL. The benchmark installs `PIN` into its own git-ignored venv
(`VENV`; never a dependency of the project) with `--install-headroom`, and
skips the peer when that venv is missing. It runs offline: HEADROOM_OFFLINE=1,
tiktoken's cl100k file from the copy its litellm dependency ships, no
telemetry, `--no-cache --no-rate-limit`, upstreams on the fake. Its default
(cache) mode compresses only the turns it has seen the provider answer, so
the fake answers each call with the trajectory's own next assistant turn
(`NextTurn`), as the real provider did. Its ML compressor (Kompress) needs
model weights that no package ships; offline it runs with its structural
compressors only.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from starlette.responses import JSONResponse, Response

from benchmarks.gateway.histories import (
    MODELS,
    JsonObject,
    Trajectory,
    anthropic_messages,
    gemini_contents,
    responses_items,
)
from tests.agents.wire import is_compaction
from tests.gateway.checks import tokens_of
from tests.gateway.upstream import Recorded

PIN = "headroom-ai[proxy]==0.42.0"
VENV = Path(__file__).resolve().parents[1] / ".venv-headroom"
START_TIMEOUT_S = 120.0
SUMMARY_ANSWER = "<summary>Scripted summary.</summary>"


def headroom_bin() -> Path | None:
    """The installed proxy's command, or None when the venv is missing."""
    command = VENV / "bin" / "headroom"
    return command if command.exists() else None


def install() -> Path:
    """Create VENV and install PIN into it (from the package index)."""
    if headroom_bin() is None:
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "--quiet", PIN], check=True)
    command = headroom_bin()
    if command is None:
        raise RuntimeError(f"{PIN} installed no `headroom` command in {VENV}")
    return command


def _cl100k_dir() -> Path:
    found = sorted(VENV.glob("lib/python*/site-packages/litellm/litellm_core_utils/tokenizers"))
    if not found:
        raise RuntimeError(f"no litellm tokenizers in {VENV}: reinstall {PIN}")
    return found[0]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def headroom_proxy(upstream_url: str) -> Iterator[str]:
    """A running proxy in its default mode, every provider upstream at
    `upstream_url`; yields its base URL."""
    command = headroom_bin()
    if command is None:
        raise RuntimeError(f"{VENV} is missing: run with --install-headroom")
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="ctxopt-headroom-") as home:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("HEADROOM_")},
            "HOME": home,
            "HEADROOM_OFFLINE": "1",
            "ORT_DISABLE_TELEMETRY": "1",
            "TIKTOKEN_CACHE_DIR": str(_cl100k_dir()),
            "ANTHROPIC_TARGET_API_URL": upstream_url,
            "OPENAI_TARGET_API_URL": upstream_url + "/v1",
            "GEMINI_TARGET_API_URL": upstream_url,
        }
        argv = [str(command), "proxy", "--host", "127.0.0.1", "--port", str(port)]
        with open(Path(home) / "proxy.log", "w") as log:
            process = subprocess.Popen(
                [*argv, "--no-cache", "--no-rate-limit"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            try:
                url = f"http://127.0.0.1:{port}"
                _wait_ready(url, process, Path(home) / "proxy.log")
                yield url
            finally:
                process.terminate()
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"headroom proxy exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"headroom proxy not ready in {START_TIMEOUT_S:.0f} s")


@dataclass(slots=True)
class NextTurn:
    """The fake provider's script: each call answered with the trajectory's
    assistant turn of step `step` (set by the caller before each call), a
    host's compaction request with a summary. Usage: cl100k of the request."""

    fmt: str = ""
    trajectory: Trajectory | None = None
    step: int = 0

    def __call__(self, request: Recorded) -> Response:
        body = request.body if isinstance(request.body, dict) else {}
        tokens = tokens_of(body)
        if self.trajectory is None or is_compaction(body):
            return JSONResponse(answer(self.fmt, [], SUMMARY_ANSWER, tokens))
        if self.step >= len(self.trajectory.steps):
            return JSONResponse(answer(self.fmt, [], "done", tokens))
        items = turn_items(self.fmt, self.trajectory, self.step)
        return JSONResponse(answer(self.fmt, items, "", tokens))


def turn_items(fmt: str, trajectory: Trajectory, step: int) -> list[JsonObject]:
    """Step `step`'s assistant items as the history will carry them."""
    steps = trajectory.steps[: step + 1]
    if fmt == "anthropic":
        return [list(anthropic_messages(trajectory.task, steps))[-2]]
    if fmt == "openai-responses":
        return list(responses_items(trajectory.task, steps))[-3:-1]
    return [list(gemini_contents(trajectory.task, steps))[-2]]


def answer(fmt: str, items: list[JsonObject], text: str, prompt_tokens: int) -> JsonObject:
    """A provider's unary answer in `fmt`: the model's `items`, or `text`."""
    model = MODELS[fmt]
    if fmt == "anthropic":
        content = items[0]["content"] if items else [{"type": "text", "text": text}]
        return {
            "id": "msg_bench",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": "tool_use" if items else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": 1},
        }
    if fmt == "openai-responses":
        said = {"type": "output_text", "text": text}
        output = items or [{"type": "message", "role": "assistant", "content": [said]}]
        completed = [
            {**item, "id": f"item_{i}", "status": "completed"}
            | (
                {"content": [{**c, "annotations": []} for c in item["content"]]}
                if item.get("type") == "message"
                else {}
            )
            for i, item in enumerate(output)
        ]
        return {
            "id": "resp_bench",
            "object": "response",
            "status": "completed",
            "model": model,
            "output": completed,
            "usage": {
                "input_tokens": prompt_tokens,
                "output_tokens": 1,
                "total_tokens": prompt_tokens + 1,
            },
        }
    content = items[0] if items else {"role": "model", "parts": [{"text": text}]}
    return {
        "candidates": [{"content": content, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {
            "promptTokenCount": prompt_tokens,
            "candidatesTokenCount": 1,
            "totalTokenCount": prompt_tokens + 1,
        },
        "modelVersion": model,
    }
