"""The three hosts as the benchmark replays them: wire format, User-Agent,
compaction line as a share of the window, and the provider's prices
(ctxopt.prices: cache read and write shares, output price in input units).

Each host's line is its own rule's proportion of its own window, taken from
the gateway's host table (ctxopt.api.gateway.hosts), so the benchmark's
smaller window W scales it: Claude Code 167,000 of 200,000 (0.835 W), Codex
90% (0.9 W), Gemini CLI 50% of tokenLimit (0.5 W).
"""

from __future__ import annotations

from dataclasses import dataclass

from ctxopt.api.gateway.hosts import (
    CODEX_WINDOW,
    GEMINI_CLI_DEFAULT_LIMIT,
    Host,
    compaction_line,
)
from ctxopt.api.gateway.windows import claude_window
from ctxopt.prices import ModelPrice, price_of

from benchmarks.gateway.histories import MODELS


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    fmt: str  # a format of benchmarks.gateway.histories
    user_agent: str  # as recorded from the real CLI (tests/agents), so the gateway knows it
    query: str  # what the host adds to the request path
    line_share: float  # its compaction line over its window
    provider: str  # as ctxopt.prices names it

    @property
    def model(self) -> str:
        return MODELS[self.fmt]

    @property
    def price(self) -> ModelPrice:
        return price_of(self.model, self.provider)

    def line(self, window: int) -> int:
        return int(window * self.line_share)


def _share(host: Host, model: str, window: int) -> float:
    line = compaction_line(host, model)
    assert line is not None, host
    return line / window


CLAUDE_CODE = Profile(
    name="Claude Code",
    fmt="anthropic",
    user_agent="claude-cli/2.1.332 (external, sdk-cli)",
    query="?beta=true",
    line_share=_share(Host.CLAUDE_CODE, MODELS["anthropic"], claude_window(MODELS["anthropic"])),
    provider="anthropic",
)
CODEX = Profile(
    name="Codex CLI",
    fmt="openai-responses",
    user_agent="codex_exec/0.169.0 (Ubuntu 24.4.0; x86_64) xterm-256color",
    query="",
    line_share=_share(Host.CODEX, MODELS["openai-responses"], CODEX_WINDOW),
    provider="openai",
)
GEMINI_CLI = Profile(
    name="Gemini CLI",
    fmt="gemini",
    user_agent="GeminiCLI/0.61.0/gemini-2.5-pro (linux; x64)",
    query="",
    line_share=_share(Host.GEMINI_CLI, MODELS["gemini"], GEMINI_CLI_DEFAULT_LIMIT),
    provider="gemini",
)
PROFILES = (CLAUDE_CODE, CODEX, GEMINI_CLI)
