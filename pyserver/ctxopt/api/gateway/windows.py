"""The context window of a model, by family, and the overrides.

A request's window is, first match wins: the `x-ctxopt-window-tokens` header,
`CTXOPT_GATEWAY_WINDOW_TOKENS` (Config.gateway_window_tokens), then this table.
A model the table does not know and no override names passes through unpruned:
guessing a window too small would prune a conversation that fits.
"""

from __future__ import annotations

WINDOW_HEADER = "x-ctxopt-window-tokens"

# Longest matching prefix wins; sizes from each provider's model pages.
MODEL_WINDOWS: dict[str, int] = {
    # Anthropic: 200k for every current Claude model (1M is a beta opt-in)
    "claude-": 200_000,
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
    matches = [prefix for prefix in MODEL_WINDOWS if name.startswith(prefix)]
    return MODEL_WINDOWS[max(matches, key=len)] if matches else None


def parse_window(raw: str) -> int:
    """A window given in a header: a positive whole number of tokens."""
    value = int(raw.strip())
    if value <= 0:
        raise ValueError(raw)
    return value
