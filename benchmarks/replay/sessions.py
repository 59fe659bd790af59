"""SWE-agent trajectories as sessions to replay, call by call.

A trajectory is mini-swe-agent's message list: the system prompt, the task,
then assistant turns (THOUGHT plus one bash command) and the tool outputs that
answer them. Each assistant message is the answer of one model call; the call
at message index i sends the messages before i. The windows a session is
replayed under come from its final size: the tokens of the history at its
last call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.quality.datasets import CountTokens, is_tool_output, read_trajectories
from benchmarks.quality.metrics import needed_lines

SHARE_WINDOW = "40%"
FIXED_WINDOW = "128k"
WINDOW_SHARE = 0.4  # every method must act: the window is well under the final size
FIXED_WINDOW_TOKENS = 128_000

Message = tuple[str, str]  # (role, text); roles "system", "user", "model"
Prompt = tuple[Message, ...]


def role_name(role: str) -> str:
    """mini-swe-agent's role as the prompt's: `assistant` is the model."""
    return "model" if role == "assistant" else role


@dataclass(frozen=True, slots=True)
class Session:
    """One trajectory: its messages up to the final assistant message, the
    submitted patch, and the message index of every model call."""

    instance_id: str
    messages: tuple[Message, ...]
    submission: str
    calls: tuple[int, ...]
    final_tokens: int
    _needed: dict[int, tuple[str, ...]] = field(default_factory=dict, compare=False, repr=False)

    def history(self, call: int) -> Prompt:
        """What the call at message index `call` is built from."""
        return self.messages[:call]

    def needed(self, call: int) -> tuple[str, ...]:
        """Needed-later lines at this call (../shared/datasets/README.md): the
        lines of earlier tool outputs that the answer of this call or a later
        one, or the patch, holds verbatim."""
        if call not in self._needed:
            outputs = [
                text
                for index, (role, text) in enumerate(self.messages[:call])
                if index >= 2 and role == "user" and is_tool_output({"role": role, "content": text})
            ]
            later = [text for role, text in self.messages[call:] if role == "model"]
            self._needed[call] = needed_lines(outputs, [*later, self.submission])
        return self._needed[call]

    def windows(self) -> dict[str, int]:
        """The windows this session is replayed under, by label: 40% of its
        final size, and 128k when the session grows past it."""
        windows = {SHARE_WINDOW: int(self.final_tokens * WINDOW_SHARE)}
        if self.final_tokens > FIXED_WINDOW_TOKENS:
            windows[FIXED_WINDOW] = FIXED_WINDOW_TOKENS
        return windows

    def raw(self) -> list[dict[str, str]]:
        """The messages as mini-swe-agent wrote them (for the Node legs)."""
        return [
            {"role": "assistant" if role == "model" else role, "content": text}
            for role, text in self.messages
        ]


def session_of(record: Mapping[str, Any], count: CountTokens) -> Session:
    raw: Sequence[Mapping[str, Any]] = record["messages"]
    last = max(i for i, m in enumerate(raw) if m["role"] == "assistant")
    messages = tuple((role_name(str(m["role"])), str(m["content"])) for m in raw[: last + 1])
    calls = tuple(i for i, (role, _) in enumerate(messages) if role == "model" and i >= 2)
    final_tokens = sum(count([text for _, text in messages[:last]]))
    return Session(
        str(record["instance_id"]), messages, str(record["submission"]), calls, final_tokens
    )


def concatenated(sessions: Sequence[Session], k: int, count: CountTokens) -> list[Session]:
    """Long sessions, each `k` consecutive trajectories worked one after the
    other under the first one's system prompt and task (every final assistant
    message but the last left out, so turns alternate); a shorter tail group
    is dropped."""
    long = []
    for start in range(0, len(sessions) - k + 1, k):
        group = sessions[start : start + k]
        messages = list(group[0].messages[:-1])
        for session in group[1:]:
            messages += session.messages[2:-1]
        messages.append(group[-1].messages[-1])
        calls = tuple(i for i, (role, _) in enumerate(messages) if role == "model" and i >= 2)
        final_tokens = sum(count([text for _, text in messages[:-1]]))
        name = f"{group[0].instance_id}..{group[-1].instance_id}"
        long.append(Session(name, tuple(messages), group[-1].submission, calls, final_tokens))
    return long


def load_sessions(path: Path, count: CountTokens, limit: int = 0) -> list[Session]:
    """The trajectories of `path` in file order; `limit` > 0 keeps the first ones."""
    sessions = []
    for record in read_trajectories(path):
        sessions.append(session_of(record, count))
        if limit and len(sessions) >= limit:
            break
    return sessions
