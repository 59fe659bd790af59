"""Each host's real frame, recorded from the real CLIs, and the bodies built on it.

    python -m benchmarks.hosts.frames     # re-record benchmarks/hosts/frames/*.json

A frame is what a host sends around the conversation: the system prompt, the
tool declarations, the leading items of its message list (Claude Code's
system reminders and environment message, Codex's developer instructions and
environment context, Gemini CLI's session context) and its request options.
The recorder runs Claude Code, Codex CLI and Gemini CLI from tests/agents
(offline, fake keys) against the scripted provider and keeps the first agent
turn of each; a second run reports a huge prompt size so that Claude Code
and Codex compact, and keeps their compaction request: the prompt they add
and what they change in the body. Gemini CLI's compression runs inside the
session replay's Node leg (gemini-cli-core's own prompt), so its fixture has
none. Ids, device and session metadata and the scratch paths are scrubbed;
no request carries a credential (the keys travel in headers, never kept).

`framed_request` puts a trajectory's task and exchanges into a frame: the
task where the host put the user's prompt, the exchanges after the frame's
items, the model the benchmark names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.gateway.histories import MODELS, JsonObject, Trajectory, request
from benchmarks.gateway.latency import LISTS
from tests.gateway.upstream import Recorded

FRAMES = Path(__file__).with_name("frames")
HOST_FORMATS = {"claude": "anthropic", "codex": "openai-responses", "gemini": "gemini"}
# Request keys that identify a run, not what the model reads
_IDS = ("metadata", "client_metadata", "prompt_cache_key", "stream")
SCRUBBED_ROOT = "/home/user"
# A host run: its scratch root and its model requests with their kinds (tests/agents)
Recorder = Callable[[str, int | None], tuple[str, list[tuple[str, Recorded]]]]
# Large enough that Claude Code and Codex compact on their next turn
# (tests/agents/compaction_points.py)
COMPACTING_REPORT = 990_000


@dataclass(frozen=True, slots=True)
class Compaction:
    """How a host asks for its summary: the prompt it appends to the history
    and the body keys it sends differently from an agent turn."""

    prompt: str
    changes: JsonObject

    def request(self, fmt: str, body: JsonObject) -> JsonObject:
        """`body` (an agent turn's) turned into the host's summarising request."""
        key = LISTS[fmt]
        items = list(body[key])
        if fmt == "anthropic":
            # Claude Code adds its prompt as a text block of the newest user message
            last = items[-1]
            content = last["content"] if isinstance(last["content"], list) else []
            items[-1] = {**last, "content": [*content, {"type": "text", "text": self.prompt}]}
        else:
            items.append({"type": "message", "role": "user", "content": [_input_text(self.prompt)]})
        return {**body, **self.changes, key: items}


@dataclass(frozen=True, slots=True)
class Frame:
    """One host's recorded frame (see the module docstring)."""

    host: str
    fmt: str
    user_agent: str
    options: JsonObject  # every body key but the message list and the model
    lead: tuple[JsonObject, ...]  # the list's items of the first turn, the prompt as PROMPT
    prompt: str  # the user's prompt the recorder gave, to be replaced by the task
    compaction: Compaction | None

    @property
    def frame_items(self) -> tuple[JsonObject, ...]:
        """The lead items that do not carry the user's prompt."""
        return tuple(item for item in self.lead if self.prompt not in json.dumps(item))


def load_frame(fmt: str) -> Frame:
    host = next(h for h, f in HOST_FORMATS.items() if f == fmt)
    data = json.loads((FRAMES / f"{host}.json").read_text())
    compaction = data.get("compaction")
    return Frame(
        host=host,
        fmt=fmt,
        user_agent=data["user_agent"],
        options=data["options"],
        lead=tuple(data["lead"]),
        prompt=data["prompt"],
        compaction=None if compaction is None else Compaction(**compaction),
    )


def framed_request(frame: Frame, trajectory: Trajectory, steps: int) -> JsonObject:
    """The body after `steps` steps as the host sends it: its frame, the task in
    place of its user prompt, then the exchanges."""
    plain = request(frame.fmt, trajectory, steps)
    key = LISTS[frame.fmt]
    lead = [_replaced(item, frame.prompt, trajectory.task) for item in frame.lead]
    body = {**frame.options, key: [*lead, *plain[key][1:]]}
    if "model" in plain:
        body["model"] = plain["model"]
    return body


def _replaced(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return new if value == old else value
    if isinstance(value, list):
        return [_replaced(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _replaced(v, old, new) for k, v in value.items()}
    return value


def _input_text(text: str) -> JsonObject:
    return {"type": "input_text", "text": text}


def _scrubbed(value: Any, root: str) -> Any:
    """`value` with the scratch directory named as SCRUBBED_ROOT (also as Claude Code
    spells it in its project folder's name, every other character a dash) and item ids
    dropped."""
    text = json.dumps(value).replace(root, SCRUBBED_ROOT)
    text = text.replace(
        re.sub("[^A-Za-z0-9]", "-", root), re.sub("[^A-Za-z0-9]", "-", SCRUBBED_ROOT)
    )
    cleaned = json.loads(text)
    if isinstance(cleaned, list):
        return [{k: v for k, v in item.items() if k != "id"} for item in cleaned]
    return cleaned


def record(host: str, report: int | None) -> tuple[str, list[tuple[str, Recorded]]]:
    """Run the real `host` against the scripted provider; its scratch root and
    every model request it made, with their kinds."""
    from tests.agents.agent_cli import host_args
    from tests.agents.compaction_points import scripted_run
    from tests.agents.scripted_provider import kind_of

    root, requests = scripted_run(host, host_args(host), report)
    return root, [(kind_of(r), r) for r in requests if r.method == "POST"]


def frame_record(host: str, run: Recorder) -> JsonObject:
    """The fixture of `host`: its first agent turn and, for Claude Code and Codex,
    the compaction request of a run that reports a huge prompt."""
    from tests.agents.agent_cli import PROMPT

    fmt = HOST_FORMATS[host]
    key = LISTS[fmt]
    root, calls = run(host, None)
    first = next(r for kind, r in calls if kind == "agent")
    body = first.body
    options = {k: v for k, v in body.items() if k not in (key, "model", *_IDS)}
    fixture: JsonObject = {
        "recorded_with": "tests/agents (python -m benchmarks.hosts.frames)",
        "user_agent": first.headers.get("user-agent", ""),
        "model_recorded": body.get("model", first.path.rsplit("/", 1)[-1].split(":")[0]),
        "prompt": PROMPT,
        "options": _scrubbed(options, root),
        "lead": _scrubbed(body[key], root),
        "compaction": None,
    }
    if host != "gemini":
        root, calls = run(host, COMPACTING_REPORT)
        index = next(i for i, (kind, _) in enumerate(calls) if kind == "compaction")
        asked, turn = calls[index][1].body, calls[index - 1][1].body
        changes = {k: v for k, v in asked.items() if k not in (key, *_IDS) and turn.get(k) != v}
        fixture["compaction"] = {"prompt": _prompt_of(fmt, asked[key][-1]), "changes": changes}
    return fixture


def _prompt_of(fmt: str, item: JsonObject) -> str:
    """The compaction prompt: the last text block of the newest item."""
    blocks = item["content"]
    text = [b["text"] for b in blocks if b.get("type") in ("text", "input_text")]
    if not text:
        raise ValueError(f"{fmt}: no compaction prompt in {json.dumps(item)[:200]}")
    return str(text[-1])


def main() -> None:
    FRAMES.mkdir(exist_ok=True)
    for host in HOST_FORMATS:
        fixture = frame_record(host, record)
        path = FRAMES / f"{host}.json"
        path.write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {path} ({MODELS[HOST_FORMATS[host]]} in the benchmark)")


if __name__ == "__main__":
    main()
