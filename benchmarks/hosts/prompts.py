"""A request body as the session replay's Prompt: the messages the model reads.

Every leg of the host benchmark is scored on the same rendering, so a host's
own prompts and the gateway's output are counted, cached and searched for
needed lines alike: the frame, then one (role, text) message per turn. The
frame renders as one system message: the system prompt, the tool
declarations (JSON) and the list's own frame items (system and developer
messages, and a recorded frame's leading items other than the task).
A model turn renders as the original assistant message when its thought and
command are the step's own (so an untouched body renders as the session's
history, byte for byte), else as its thought and a bash block of its command;
a tool result renders as the text it carries (the output, or a placeholder).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from benchmarks.gateway.histories import JsonObject, Trajectory, call_id, request
from benchmarks.hosts.frames import Frame, framed_request
from benchmarks.quality.datasets import CountTokens
from benchmarks.replay.sessions import WINDOW_SHARE, Message, Prompt, Session, concatenated

CALL_PREFIX = call_id(0)[: -len("0000")]


@dataclass(frozen=True, slots=True)
class Case:
    """One development trajectory twice: as the bodies a host sends
    (histories.request, or framed_request in a host's real frame) and as the
    session its needed lines are scored on. The call with index k sends the
    task and k steps. A case made by `of` has no host yet (`hosted` gives it
    one, its session's first two messages then rendered from the host's body)."""

    session: Session
    trajectory: Trajectory
    fmt: str = ""
    frame: Frame | None = None

    @classmethod
    def of(cls, session: Session, trajectory: Trajectory) -> Case:
        aligned = session.instance_id == trajectory.instance_id and all(
            index == 2 + 2 * k for k, index in enumerate(session.calls)
        )
        if not aligned or len(trajectory.steps) < len(session.calls) - 1:
            raise ValueError(f"{session.instance_id}: trajectory and session do not align")
        return cls(session, trajectory)

    def hosted(self, fmt: str, frame: Frame | None, count: CountTokens) -> Case:
        """This case as `fmt`'s host sends it (in `frame`, else the trajectory's
        own system prompt and bash tool); W is then taken over that frame."""
        case = Case(self.session, self.trajectory, fmt, frame)
        old = self.session.messages
        new = rendered(case, case.body(0))
        messages = (*new, *old[2:])
        before, after = count([t for _, t in old[:2]]), count([t for _, t in new])
        final = self.session.final_tokens - sum(before) + sum(after)
        session = Session(
            self.session.instance_id,
            messages,
            self.session.submission,
            self.session.calls,
            final,
        )
        return Case(session, self.trajectory, fmt, frame)

    def body(self, steps: int) -> JsonObject:
        """The request after `steps` steps, in the host's format and frame."""
        if self.frame is not None:
            return framed_request(self.frame, self.trajectory, steps)
        return request(self.fmt, self.trajectory, steps)

    @property
    def lead(self) -> int:
        """How many items open the message list before the first exchange."""
        return len(self.frame.lead) if self.frame is not None else 1

    @property
    def calls(self) -> int:
        return len(self.session.calls)

    @property
    def window(self) -> int:
        """W: WINDOW_SHARE of the session's final size, as in the session replay."""
        return int(self.session.final_tokens * WINDOW_SHARE)


def long_cases(cases: list[Case], k: int, count: CountTokens) -> list[Case]:
    """Sessions of `k` consecutive trajectories worked one after the other
    (sessions.concatenated), each trajectory's steps up to its last call."""
    sessions = concatenated([c.session for c in cases], k, count)
    long = []
    for start, session in zip(range(0, len(cases), k), sessions, strict=False):
        group = cases[start : start + k]
        steps = tuple(s for c in group for s in c.trajectory.steps[: c.calls - 1])
        first = group[0].trajectory
        long.append(
            Case.of(session, Trajectory(session.instance_id, first.system, first.task, steps))
        )
    return long


def rendered(case: Case, body: JsonObject) -> Prompt:
    """The prompt `body` carries, in any of the three hosts' formats."""
    key = "messages" if "messages" in body else "input" if "input" in body else "contents"
    framing = case.frame.frame_items if case.frame is not None else ()
    folded = [i for i in body[key] if i in framing or i.get("role") in ("system", "developer")]
    items = [i for i in body[key] if i not in folded]
    if key == "messages":
        system = _texts(body.get("system", ""))
        turns = _anthropic(case, items)
    elif key == "input":
        system = str(body.get("instructions", ""))
        turns = _responses(case, items)
    else:
        system = _texts(body.get("systemInstruction", {}).get("parts", []))
        turns = _gemini(case, items)
    frame = [system, json.dumps(body.get("tools", []), sort_keys=True)]
    frame += [_texts(i.get("content", i.get("parts", []))) for i in folded]
    return (("system", "\n".join(frame)), *turns)


def _texts(value: Any) -> str:
    """The text of a string, a text block or part, or a list of them."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_texts(v) for v in value)
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return str(value["text"])
    return ""


def _model_turn(case: Case, thoughts: list[str], calls: list[tuple[str, str]]) -> Message:
    thought = "\n".join(t for t in thoughts if t)
    if len(calls) == 1 and calls[0][0].startswith(CALL_PREFIX):
        step = int(calls[0][0][len(CALL_PREFIX) :])
        original = case.trajectory.steps[step]
        if (thought, calls[0][1]) == (original.thought, original.command):
            return case.session.messages[2 + 2 * step]
    blocks = [f"```bash\n{command}\n```" for _, command in calls if command]
    return ("model", "\n\n".join([thought, *blocks] if thought else blocks))


def _anthropic(case: Case, messages: list[JsonObject]) -> Iterator[Message]:
    for message in messages:
        content = message["content"]
        if message["role"] == "user":
            blocks = content if isinstance(content, list) else [{"text": content}]
            yield ("user", "\n".join(_texts(b.get("content", b)) for b in blocks))
            continue
        thoughts = [b["text"] for b in content if b.get("type") == "text"]
        calls = [
            (str(b["id"]), str(b["input"].get("command", "")))
            for b in content
            if b.get("type") == "tool_use"
        ]
        yield _model_turn(case, thoughts, calls)


def _responses(case: Case, items: list[JsonObject]) -> Iterator[Message]:
    thoughts: list[str] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message" and item["role"] == "assistant":
            thoughts.append(_texts(item["content"]))
        elif kind == "message":
            yield ("user", _texts(item["content"]))
        elif kind == "function_call":
            command = str(json.loads(item["arguments"] or "{}").get("command", ""))
            yield _model_turn(case, thoughts, [(str(item["call_id"]), command)])
            thoughts = []
        elif kind == "function_call_output":
            yield ("user", _texts(item["output"]))
    if thoughts:
        yield _model_turn(case, thoughts, [])


def _gemini(case: Case, contents: list[JsonObject]) -> Iterator[Message]:
    for content in contents:
        parts = content.get("parts", [])
        if content["role"] == "user":
            texts = [
                _response_text(p["functionResponse"]) if "functionResponse" in p else _texts(p)
                for p in parts
            ]
            yield ("user", "\n".join(texts))
            continue
        thoughts = [str(p["text"]) for p in parts if "text" in p]
        calls = [
            (
                str(p["functionCall"].get("id", "")),
                str(p["functionCall"]["args"].get("command", "")),
            )
            for p in parts
            if "functionCall" in p
        ]
        yield _model_turn(case, thoughts, calls)


def _response_text(response: JsonObject) -> str:
    output = response.get("response", {}).get("output")
    return output if isinstance(output, str) else json.dumps(response.get("response"))
