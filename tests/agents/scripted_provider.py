"""A scripted mode for the recording fake provider: it drives a real agent CLI through a tool loop.

`AgentScript` is a `FakeUpstream` script (tests/gateway/upstream.py records
every request and serves them). Every turn of the agent (a request that
declares the host's shell tool) gets the next step: a shell command to run in
the agent's scratch workspace (`cat` of a large generated file, `wc`), then a
final answer once the script is spent. The host's own compaction request gets
a summary, and side calls (Gemini CLI's router, a next-speaker check) a minimal
valid answer; neither advances the script.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from starlette.responses import Response

from tests.agents.wire import (
    COMPACTION_SUMMARY,
    AnthropicWire,
    ChatWire,
    FinalText,
    GeminiWire,
    Rendered,
    Reply,
    ResponsesWire,
    ToolCall,
    Wire,
    is_compaction,
    prompt_tokens,
)
from tests.gateway.upstream import FakeUpstream, Recorded, fake_upstream

FINAL_ANSWER = "Scripted run finished."
# agent: a turn of the agent's loop; compaction: the host summarising its own history;
# side: another model call (router, checks); other: not a model call
RequestKind = Literal["agent", "compaction", "side", "other"]
_WORDS = (
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
)


def write_workspace(directory: Path, *, files: int, lines_per_file: int) -> list[str]:
    """Fill `directory` with `files` large text files, `lines_per_file` lines each.

    A line is about 18 cl100k tokens. The text is seeded, so a run is
    reproducible; each line names its file and number, so a test can tell
    which output it is looking at.
    """
    directory.mkdir(parents=True, exist_ok=True)
    names = []
    for index in range(files):
        rng = random.Random(index)
        name = f"big_{index:02d}.txt"
        lines = [
            f"{name}:{line:05d} " + " ".join(rng.choice(_WORDS) for _ in range(8))
            for line in range(lines_per_file)
        ]
        (directory / name).write_text("\n".join(lines) + "\n")
        names.append(name)
    return names


def read_and_inspect(names: Sequence[str]) -> list[Reply]:
    """The default script: read each file whole, then count its lines; then finish."""
    steps: list[Reply] = []
    for name in names:
        steps.append(ToolCall(f"cat {name}"))
        steps.append(ToolCall(f"wc -l {name}"))
    steps.append(FinalText(FINAL_ANSWER))
    return steps


def wire_of(path: str) -> Wire | None:
    """The wire format of a model call on `path` (any prefix), None for any other path."""
    if path.endswith("/v1/messages"):
        return AnthropicWire()
    if path.endswith("/v1/responses"):
        return ResponsesWire()
    if path.endswith("/v1/chat/completions"):
        return ChatWire()
    if path.endswith((":generateContent", ":streamGenerateContent")):
        return GeminiWire()
    return None


def kind_of(request: Recorded) -> RequestKind:
    wire = wire_of(request.path)
    if request.method != "POST" or wire is None or not isinstance(request.body, dict):
        return "other"
    if is_compaction(request.body):
        return "compaction"
    return "agent" if wire.is_agent_turn(request.body) else "side"


class AgentScript:
    """Answers each agent turn with the next step of `steps`.

    `reported_prompt_tokens`, when given, is the prompt size every answer
    reports instead of the request's own count: a host compacts by itself
    once that passes its line, which is how that line is measured.
    """

    def __init__(self, steps: Sequence[Reply], *, reported_prompt_tokens: int | None = None):
        if not steps:
            raise ValueError("steps: a script needs at least one reply")
        self.steps = list(steps)
        self.reported_prompt_tokens = reported_prompt_tokens
        self.step = 0
        self._lock = threading.Lock()

    def finished(self) -> bool:
        return self.step >= len(self.steps)

    def __call__(self, request: Recorded) -> Response:
        wire = wire_of(request.path)
        kind = kind_of(request)
        if wire is None or not isinstance(request.body, dict):
            return Response(b"{}", media_type="application/json")
        body = request.body
        usage = self.reported_prompt_tokens or prompt_tokens(body)
        if kind == "compaction":
            return _response(wire.render_side_call(request.path, body, usage, COMPACTION_SUMMARY))
        if kind != "agent":
            return _response(wire.render_side_call(request.path, body, usage))
        with self._lock:
            # a host that asks again after the script ends gets the final answer again
            step = min(self.step, len(self.steps) - 1)
            self.step += 1
        return _response(wire.render(self.steps[step], body, step, usage))


def _response(rendered: Rendered) -> Response:
    return Response(rendered.body, status_code=rendered.status, media_type=rendered.content_type)


def requests_of(upstream: FakeUpstream, kind: RequestKind) -> list[Recorded]:
    with upstream.lock:
        return [r for r in upstream.requests if kind_of(r) == kind]


@contextmanager
def scripted_upstream(script: AgentScript) -> Iterator[FakeUpstream]:
    """The recording fake provider on a free loopback port, answering by `script`."""
    with fake_upstream(script=script) as upstream:
        yield upstream


def dump_requests(upstream: FakeUpstream, path: Path) -> None:
    """Every recorded request as JSON lines (for a failing test's report)."""
    with upstream.lock, path.open("w") as out:
        for r in upstream.requests:
            record = {"method": r.method, "path": r.path, "query": r.query, "kind": kind_of(r)}
            out.write(json.dumps({**record, "body": r.raw.decode(errors="replace")}) + "\n")
