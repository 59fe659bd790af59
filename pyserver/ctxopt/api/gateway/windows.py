"""The context window of a model, by family and version, and the overrides.

A request's window is, first match wins: the `x-ctxopt-window-tokens` header,
`CTXOPT_GATEWAY_WINDOW_TOKENS` (Config.gateway_window_tokens), then this table.
A model the table does not know and no override names passes through unpruned:
guessing a window too small would prune a conversation that fits. The hosts'
compaction lines (hosts.py) are derived from the same table.
"""

from __future__ import annotations

import re

WINDOW_HEADER = "x-ctxopt-window-tokens"

# Claude: 1,000,000 tokens natively from these versions of each family on, 200,000 before
# them and for any other Claude name; a "[1m]" suffix (Claude Code's opt-in to the 1M beta)
# gives 1,000,000 to any. From the model table inside Claude Code 2.1.332
# (@anthropic-ai/claude-code-linux-x64/claude: `context:{window:1e6,native_1m:!0}` for
# claude-opus-4-7, -4-8, -5, -5-5, claude-sonnet-5, -5-5, claude-haiku-5-5, claude-fable-5,
# -5-1, -5-2; `window:200000` for claude-haiku-4-5), which matches the provider's pages.
CLAUDE_NATIVE_1M_FROM: dict[str, tuple[int, int]] = {
    "opus": (4, 7),
    "sonnet": (5, 0),
    "haiku": (5, 5),
    "fable": (5, 0),
}
CLAUDE_1M_WINDOW = 1_000_000
CLAUDE_WINDOW = 200_000
CLAUDE_1M_SUFFIX = "[1m]"
# family, major version, minor version (a dated snapshot's 8 digits are not a minor); a
# major of more digits than any version has is no version (and int() refuses 4,301 digits)
_CLAUDE_NAME = re.compile(r"^claude-([a-z]+)-(\d{1,4})(?:-(\d{1,2}))?(?!\d)")

# Other providers, longest matching prefix wins; sizes from each provider's model pages.
MODEL_WINDOWS: dict[str, int] = {
    # OpenAI
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "codex-": 400_000,
    # Google: Gemini CLI's table (tokenLimits.ts)
    "gemini-1.5-pro": 2_097_152,
    "gemini-": 1_048_576,
}


def model_window(model: str) -> int | None:
    """The table's window for `model` (a dated or suffixed name matches its family)."""
    name = model.rsplit("/", 1)[-1].lower()
    if name.startswith("claude-"):
        return claude_window(name)
    matches = [prefix for prefix in MODEL_WINDOWS if name.startswith(prefix)]
    return MODEL_WINDOWS[max(matches, key=len)] if matches else None


def claude_window(model: str) -> int:
    """A Claude model's window: 1M for the versions that have it natively or with
    the "[1m]" suffix, else 200k."""
    name = model.rsplit("/", 1)[-1].lower()
    if CLAUDE_1M_SUFFIX in name:
        return CLAUDE_1M_WINDOW
    parts = _CLAUDE_NAME.match(name)
    if parts is not None:
        family, major, minor = parts.group(1), int(parts.group(2)), int(parts.group(3) or 0)
        first = CLAUDE_NATIVE_1M_FROM.get(family)
        if first is not None and (major, minor) >= first:
            return CLAUDE_1M_WINDOW
    return CLAUDE_WINDOW


def parse_window(raw: str) -> int:
    """A window given in a header: a positive whole number of tokens."""
    value = int(raw.strip())
    if value <= 0:
        raise ValueError(raw)
    return value
