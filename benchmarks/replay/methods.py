"""The methods replayed in Python: each builds one call's prompt from the
history so far under the window.

- `none`: the full history (a prompt over the window is an over-window call);
- `obs-mask`: observation masking, the quality benchmark's baseline;
- `langchain`: langchain-core `trim_messages(strategy="last")`, the quality
  benchmark's peer as it is.

The baselines see the history as the quality benchmark maps it (one chunk per
message, the system prompt, the task and the last two messages mandatory) with
the window as the budget. `gemini-cli-native` and `ctxopt` run in Node
(benchmarks/replay/replay.mjs).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Any

from ctxopt.model import Role
from ctxopt.tokens import TokenCounter

from benchmarks.quality.datasets import CountTokens, trajectory_case
from benchmarks.quality.methods import Kept, LangChainTrim, Method, ObsMask
from benchmarks.replay.sessions import Prompt, Session

ROLE_NAMES = {Role.SYSTEM: "system", Role.MODEL: "model", Role.USER: "user", Role.TOOL: "user"}


class ReplayMethod(ABC):
    name: str

    @abstractmethod
    def prompt(self, session: Session, call: int, window: int) -> tuple[Prompt, float]:
        """The prompt of the call at message index `call`, and the ms it took."""


class FullHistory(ReplayMethod):
    name = "none"

    def prompt(self, session: Session, call: int, window: int) -> tuple[Prompt, float]:
        started = time.perf_counter()
        prompt = session.history(call)
        return prompt, (time.perf_counter() - started) * 1000


class QualityMethod(ReplayMethod):
    """A benchmarks.quality method applied to the history of each call, with
    the window as its budget."""

    def __init__(self, method: Method, count: CountTokens) -> None:
        self.method = method
        self.name = method.name
        self.count = count
        self._raw: tuple[str, list[dict[str, Any]]] | None = None  # the latest session's messages

    def raw(self, session: Session) -> list[dict[str, Any]]:
        if self._raw is None or self._raw[0] != session.instance_id:
            self._raw = (session.instance_id, session.raw())
        return self._raw[1]

    def prompt(self, session: Session, call: int, window: int) -> tuple[Prompt, float]:
        case = trajectory_case(session.instance_id, self.raw(session)[:call], self.count)
        started = time.perf_counter()
        # half a token over the window, so int(prompt x share) rounds to the window itself
        kept = self.method.select(case, (window + 0.5) / case.prompt_tokens)
        ms = (time.perf_counter() - started) * 1000
        return prompt_of(case.chunks, kept), ms


def prompt_of(chunks: Any, kept: Kept) -> Prompt:
    by_id = {c.id: c for c in chunks}
    return tuple(
        (ROLE_NAMES[by_id[i].role], kept.replacements.get(i, by_id[i].text)) for i in kept.ids
    )


def python_methods(count: TokenCounter) -> dict[str, ReplayMethod]:
    """The Python-side methods by name, in table order."""
    return {
        "none": FullHistory(),
        "obs-mask": QualityMethod(ObsMask(count.count), count.count_many),
        "langchain": QualityMethod(LangChainTrim(), count.count_many),
    }
