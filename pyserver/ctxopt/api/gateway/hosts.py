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

from ctxopt.api.gateway.windows import claude_window


class Host(Enum):
    CLAUDE_CODE = "claude-code"
    CODEX = "codex"
    GEMINI_CLI = "gemini-cli"
    OPENCODE = "opencode"
    OTHER = "other"


# Gemini CLI 0.61.0 sends `GeminiCLI/<version>/<model>`, or `GeminiCLI-<client>/...` when it
# names its client (`GeminiCLI-tui/0.61.0/...`, also under `gemini -p`): bundle/chunk-JDPZ4CE3.js
# line 311949 of @google/gemini-cli 0.61.0. Claude Code 2.1.332 sends `claude-cli/2.1.332
# (external, sdk-cli)`, Codex 0.169.0 `codex_exec/0.169.0 (...)`, OpenCode 1.18.33
# `opencode/1.18.33 (linux ...; x64) ai-sdk/...`: recorded by tests/agents. aider sends its
# SDK's (`OpenAI/Python 2.20.0`): it is told by its messages (formats/aider.py). OpenCode's
# own compaction line is not modelled: the window is its ceiling.
USER_AGENT_PREFIXES: dict[str, Host] = {
    "claude-cli/": Host.CLAUDE_CODE,
    "codex_exec/": Host.CODEX,
    "codex_cli_rs/": Host.CODEX,
    "geminicli/": Host.GEMINI_CLI,
    "geminicli-": Host.GEMINI_CLI,
    "opencode/": Host.OPENCODE,
}

# Claude Code: its auto-compact point is window - min(max output, 20,000) - 13,000
# (the constants `kfo=20000` and `$Ue=13000` beside CLAUDE_AUTOCOMPACT_PCT_OVERRIDE in the
# 2.1.332 binary, @anthropic-ai/claude-code-linux-x64/claude). Measured offline with
# `python -m tests.agents.compaction_points` (the provider reports a chosen prompt size):
# claude-sonnet-4-6, a 200,000-token model in its table, compacts between 166,000 and
# 168,000 reported tokens (167,000); claude-opus-5-5 (its default) and claude-sonnet-5-5,
# which its model table marks `native_1m` (window 1e6) without any "[1m]" suffix, compact
# at 966,759 +-100 (967,000 less its estimate of the newest tool output). claude-opus-4-5
# did not compact by itself up to 985,000 (it waits for the API's "prompt is too long").
# CLAUDE_AUTOCOMPACT_PCT_OVERRIDE and CLAUDE_CODE_AUTO_COMPACT_WINDOW can only lower it.
# Its window per model is the gateway's own Claude table (windows.claude_window), which
# follows the same model table of the binary.
CLAUDE_CODE_OUTPUT_RESERVE = 20_000
CLAUDE_CODE_AUTOCOMPACT_BUFFER = 13_000

# Codex: the `context_window` of its bundled model metadata (gpt-5.5: 272,000, with
# `auto_compact_token_limit` null, in the models.json inside the 0.169.0 binary,
# @openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex), whose default
# auto-compact limit is 90% of it. Measured offline as above: gpt-5.5 compacts at 244,579
# +-100 reported tokens, i.e. 244,800 less its estimate of the newest tool output.
CODEX_WINDOW = 272_000
CODEX_AUTO_COMPACT_PERCENT = 90

# Gemini CLI 0.61.0: compresses when the last prompt reaches 50% of tokenLimit(model)
# (DEFAULT_COMPRESSION_TOKEN_THRESHOLD = 0.5, chatCompressionService.js, bundle/
# chunk-JDPZ4CE3.js lines 335493 and 335624-5 of @google/gemini-cli 0.61.0); tokenLimit
# (tokenLimits.js, lines 333183-333199) is 1,048,576 for every Gemini model and 256,000 for
# the two Gemma 4 models. Its compression splits only before a user message, so one long
# `gemini -p` tool loop is never compressed (measured: no compression request at 600,000
# reported tokens); its tool-output masking (toolOutputMaskingService.js, line 343037)
# protects the newest 50,000 tokens of tool output.
GEMINI_CLI_COMPRESSION_PERCENT = 50
GEMINI_CLI_DEFAULT_LIMIT = 1_048_576
# Gemini CLI's line is the user's `model.compressionThreshold` (a fraction of tokenLimit) when
# set. Under the default half the gateway keeps the prompt at half the window, while Gemini
# CLI alone runs a tool loop far past it (it compresses only before a user message), so
# `ctxopt run gemini` sets a higher one for its run and says which in this header
# (GEMINI_CLI_CUSTOM_HEADERS, which Gemini CLI adds to every request); a user who sets the
# threshold by hand can send it the same way. Without it the gateway assumes the default.
COMPRESSION_HEADER = "x-ctxopt-compression-threshold"
GEMINI_CLI_LIMITS = {"gemma-4-31b-it": 256_000, "gemma-4-26b-a4b-it": 256_000}


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


def compression_threshold(header: str | None) -> float | None:
    """The COMPRESSION_HEADER's fraction, or None when absent or not in (0, 1].

    >>> compression_threshold("0.9"), compression_threshold("90"), compression_threshold(None)
    (0.9, None, None)
    """
    try:
        value = float(header) if header is not None else None
    except ValueError:
        return None
    return value if value is not None and 0 < value <= 1 else None


def compaction_line(host: Host, model: str, threshold: float | None = None) -> int | None:
    """Where `host` starts compacting its history for `model`, in tokens
    (`threshold`: Gemini CLI's compression threshold, when known)."""
    if host == Host.CLAUDE_CODE:
        return claude_window(model) - CLAUDE_CODE_OUTPUT_RESERVE - CLAUDE_CODE_AUTOCOMPACT_BUFFER
    if host == Host.CODEX:
        return CODEX_WINDOW * CODEX_AUTO_COMPACT_PERCENT // 100
    if host == Host.GEMINI_CLI:
        name = model.rsplit("/", 1)[-1].lower()
        limit = next(
            (v for k, v in GEMINI_CLI_LIMITS.items() if name.startswith(k)),
            GEMINI_CLI_DEFAULT_LIMIT,
        )
        if threshold is not None:
            return int(limit * threshold)
        return limit * GEMINI_CLI_COMPRESSION_PERCENT // 100
    return None


def ceiling(
    window: int,
    user_agent: str,
    model: str,
    *,
    host_lines: bool,
    threshold: float | None = None,
) -> Ceiling:
    """The most tokens a request may carry: the window, or the host's own
    compaction line when that is lower and `host_lines` is on."""
    host = host_of(user_agent)
    line = compaction_line(host, model, threshold) if host_lines else None
    if line is not None and line < window:
        return Ceiling(line, host, f"{host.value} compaction line")
    return Ceiling(window, host, "window")
