"""What every request that reached the provider must satisfy."""

from __future__ import annotations

from typing import Any

from ctxopt.api.gateway.app import wire_format
from ctxopt.tokens import TokenCounter

COUNTER = TokenCounter("cl100k")
LISTS = {
    "anthropic": "messages",
    "openai-chat": "messages",
    "openai-responses": "input",
    "gemini": "contents",
}
PREFIX_PATHS = {
    "anthropic": ("anthropic", "v1/messages"),
    "openai-chat": ("openai", "v1/chat/completions"),
    "openai-responses": ("openai", "v1/responses"),
    "gemini": ("gemini", "v1beta/models/gemini-2.5-pro:generateContent"),
}


def tokens_of(value: Any) -> int:
    """The cl100k size of every string in a JSON value (what the model reads)."""
    if isinstance(value, str):
        return COUNTER.count(value)
    if isinstance(value, list):
        return sum(tokens_of(v) for v in value)
    if isinstance(value, dict):
        return sum(tokens_of(v) for v in value.values())
    return 0


def assert_valid(
    fmt_name: str, original: dict[str, Any], sent: dict[str, Any], window: int
) -> None:
    """The provider's rules hold, the request fits the window (JSON overhead
    included), and the latest turn arrived exactly as the client sent it."""
    fmt = wire_format(*PREFIX_PATHS[fmt_name])
    assert fmt is not None
    assert fmt.violations(sent) == []
    key = LISTS[fmt_name]
    assert sent[key][-1] == original[key][-1], "the latest turn changed"
    frame = {
        k: v
        for k, v in sent.items()
        if k in ("system", "tools", "instructions", "systemInstruction")
    }
    assert tokens_of(sent[key]) + tokens_of(frame) <= window
    for name in set(original) - {key}:
        assert sent[name] == original[name], f"{name} changed"
