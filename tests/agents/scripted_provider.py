"""A scripted model provider on loopback that drives a real agent CLI through a tool loop.

Every turn of the agent (a request that declares the host's shell tool) gets
the next step of the script: a shell command to run in the agent's scratch
workspace (`cat` of a large generated file, `wc`, `ls`), then a final answer
once the script is spent. Side calls (Gemini CLI's router, a title or
next-speaker check) get a minimal valid answer and do not advance the script.
Every request is recorded byte for byte with its headers, for the tests to
check what reached the provider.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.agents.wire import (
    AnthropicWire,
    FinalText,
    GeminiWire,
    Rendered,
    Reply,
    ResponsesWire,
    ToolCall,
    Wire,
)

FINAL_ANSWER = "Scripted run finished."
_WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "parser",
    "token",
    "window",
    "budget",
    "cache",
    "stream",
    "socket",
    "buffer",
    "config",
    "handler",
    "request",
    "session",
    "planner",
    "engine",
    "kernel",
    "module",
    "import",
    "return",
    "value",
    "error",
    "retry",
    "timeout",
    "offset",
    "length",
    "commit",
    "branch",
    "merge",
    "review",
]


def write_workspace(directory: Path, *, files: int, tokens_per_file: int) -> list[str]:
    """Fill `directory` with `files` large text files (about `tokens_per_file` cl100k each).

    The text is seeded, so a run is reproducible; each line is numbered and
    names its file, so a test can tell which output it is looking at.
    """
    directory.mkdir(parents=True, exist_ok=True)
    names = []
    for index in range(files):
        rng = random.Random(index)
        name = f"big_{index:02d}.txt"
        lines = []
        # about 12 cl100k tokens a line: a label, a number and eight common words
        for line in range(tokens_per_file // 12):
            words = " ".join(rng.choice(_WORDS) for _ in range(8))
            lines.append(f"{name}:{line:05d} {words}")
        (directory / name).write_text("\n".join(lines) + "\n")
        names.append(name)
    return names


def read_and_inspect(names: Sequence[str]) -> list[Reply]:
    """The default script: read each file whole, then a small command on it; then finish."""
    steps: list[Reply] = []
    for name in names:
        steps.append(ToolCall(f"cat {name}"))
        steps.append(ToolCall(f"wc -l {name}"))
    steps.append(FinalText(FINAL_ANSWER))
    return steps


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: Mapping[str, str]  # lower-case names
    body: bytes
    agent_turn: bool

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class ScriptedProvider:
    """The provider's state: the script, how far it got, and what reached it."""

    script: Sequence[Reply]
    requests: list[RecordedRequest] = field(default_factory=list)
    step: int = 0
    url: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def agent_turns(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.agent_turn]

    def finished(self) -> bool:
        return self.step >= len(self.script)

    def answer(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Rendered:
        wire = _wire_for(path)
        if method != "POST" or wire is None:
            self._record(RecordedRequest(method, path, headers, body, agent_turn=False))
            return Rendered(200 if method in ("GET", "HEAD") else 404, "application/json", b"{}")
        try:
            parsed = json.loads(body)
        except ValueError:
            self._record(RecordedRequest(method, path, headers, body, agent_turn=False))
            message = b'{"error":{"message":"body is not JSON"}}'
            return Rendered(400, "application/json", message)
        with self._lock:
            agent_turn = wire.is_agent_turn(parsed)
            self.requests.append(RecordedRequest(method, path, headers, body, agent_turn))
            if not agent_turn:
                return wire.render_side_call(path, parsed)
            # a host that keeps asking after the script ends gets the final answer again
            step = min(self.step, len(self.script) - 1)
            self.step += 1
            return wire.render(self.script[step], parsed, step)

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)


def _wire_for(path: str) -> Wire | None:
    route = path.split("?", 1)[0]
    if route.endswith("/v1/messages"):
        return AnthropicWire()
    if route.endswith("/v1/responses"):
        return ResponsesWire()
    if route.endswith((":generateContent", ":streamGenerateContent")):
        return GeminiWire()
    return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProviderServer

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in self.headers.items()}
        rendered = self.server.provider.answer(self.command, self.path, headers, body)
        self.send_response(rendered.status)
        self.send_header("content-type", rendered.content_type)
        self.send_header("content-length", str(len(rendered.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(rendered.body)

    do_GET = do_POST = do_HEAD = _serve

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the recorded requests are the log."""


class _ProviderServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, provider: ScriptedProvider) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.provider = provider


@contextmanager
def serving(script: Sequence[Reply]) -> Iterator[ScriptedProvider]:
    """A scripted provider on a free loopback port for the block; `url` has no path."""
    provider = ScriptedProvider(script)
    server = _ProviderServer(provider)
    host, port = server.server_address[:2]
    provider.url = f"http://{host!s}:{port}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
