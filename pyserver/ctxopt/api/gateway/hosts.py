"""Which agent sent a request, and where its own compaction starts.

Each agent summarises its history itself near the end of its idea of the
model's window, losing detail. The gateway keeps the prompt under that line,
so the agent's lossy compaction is not needed: the prompt's ceiling is the
lower of the window and the host's line (Config.gateway_host_ceilings turns
this off). The agent is recognised by its `User-Agent`. The constants below
are the hosts' documented or observed values; each names its source.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Host(Enum):
    CLAUDE_CODE = "claude-code"
    CODEX = "codex"
    GEMINI_CLI = "gemini-cli"
    OTHER = "other"


USER_AGENT_PREFIXES: dict[str, Host] = {
    "claude-cli/": Host.CLAUDE_CODE,
    "codex_exec/": Host.CODEX,
    "codex_cli_rs/": Host.CODEX,
    "geminicli/": Host.GEMINI_CLI,
}

# Claude Code: the window it assumes for a model unless the model id asks for
# 1M ("[1m]"), and its auto-compact point: window - min(max output, 20,000)
# - AUTOCOMPACT_BUFFER_TOKENS (13,000), i.e. 167,000 of 200,000 (83.5%).
# Source: Claude Code's autoCompact threshold as quoted from the shipped
# binary in anthropics/claude-code issue #31806; CLAUDE_AUTOCOMPACT_PCT_OVERRIDE
# in the Claude Code settings docs can only lower it.
CLAUDE_CODE_WINDOW = 200_000
CLAUDE_CODE_OUTPUT_RESERVE = 20_000
CLAUDE_CODE_AUTOCOMPACT_BUFFER = 13_000

# Codex: `context_window` of its bundled model metadata for the GPT-5 family
# (272,000) and `ModelInfo::auto_compact_token_limit()`, which is at most 90%
# of the context window (codex-rs/protocol/src/openai_models.rs, openai/codex).
CODEX_WINDOW = 272_000
CODEX_AUTO_COMPACT_PERCENT = 90

# Gemini CLI: compresses the history at 50% of tokenLimit(model)
# (DEFAULT_COMPRESSION_TOKEN_THRESHOLD in chatCompressionService.ts; the TS
# adapter's GEMINI_CLI_COMPRESSION_PERCENT), with tokenLimit from
# packages/core/src/core/tokenLimits.ts: 1,048,576, 2,097,152 for gemini-1.5-pro.
GEMINI_CLI_COMPRESSION_PERCENT = 50
GEMINI_CLI_DEFAULT_LIMIT = 1_048_576
GEMINI_CLI_LIMITS = {"gemini-1.5-pro": 2_097_152}


@dataclass(frozen=True, slots=True)
class Ceiling:
    tokens: int
    host: Host
    reason: str  # "window" or "<host> compaction line"


def host_of(user_agent: str) -> Host:
    agent = user_agent.strip().lower()
    for prefix, host in USER_AGENT_PREFIXES.items():
        if agent.startswith(prefix) or f" {prefix}" in agent:
            return host
    return Host.OTHER


def compaction_line(host: Host, model: str) -> int | None:
    """Where `host` starts compacting its history for `model`, in tokens."""
    if host == Host.CLAUDE_CODE:
        window = 1_000_000 if "[1m]" in model.lower() else CLAUDE_CODE_WINDOW
        return window - CLAUDE_CODE_OUTPUT_RESERVE - CLAUDE_CODE_AUTOCOMPACT_BUFFER
    if host == Host.CODEX:
        return CODEX_WINDOW * CODEX_AUTO_COMPACT_PERCENT // 100
    if host == Host.GEMINI_CLI:
        name = model.rsplit("/", 1)[-1].lower()
        limit = next(
            (v for k, v in GEMINI_CLI_LIMITS.items() if name.startswith(k)),
            GEMINI_CLI_DEFAULT_LIMIT,
        )
        return limit * GEMINI_CLI_COMPRESSION_PERCENT // 100
    return None


def ceiling(window: int, user_agent: str, model: str, *, host_lines: bool) -> Ceiling:
    """The most tokens a request may carry: the window, or the host's own
    compaction line when that is lower and `host_lines` is on."""
    host = host_of(user_agent)
    line = compaction_line(host, model) if host_lines else None
    if line is not None and line < window:
        return Ceiling(line, host, f"{host.value} compaction line")
    return Ceiling(window, host, "window")
