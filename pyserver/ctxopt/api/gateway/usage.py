"""What a provider's answer reports of its usage, beside the prompt size each
format reads itself (`WireFormat.prompt_tokens`): the cached part of the prompt
and the output, for the usage ledger. In a stream the last report wins (an
Anthropic stream gives the final output count in `message_delta`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxopt.api.gateway.formats.conversation import JsonObject


@dataclass(slots=True)
class Reported:
    """A response's usage as far as it told it (None: not reported)."""

    prompt: int | None = None  # cached part included
    cached: int | None = None
    output: int | None = None

    def update(self, fmt_name: str, payload: JsonObject) -> None:
        """Take what `payload` (one response, or one stream event) reports."""
        cached, output = _cached_and_output(fmt_name, payload)
        self.cached = self.cached if cached is None else cached
        self.output = self.output if output is None else output


def _cached_and_output(fmt_name: str, payload: JsonObject) -> tuple[int | None, int | None]:
    if fmt_name == "gemini":
        usage = _dict(payload.get("usageMetadata"))
        output = _int(usage, "candidatesTokenCount")
        if output is not None:
            output += _int(usage, "thoughtsTokenCount") or 0
        return _int(usage, "cachedContentTokenCount"), output
    inner = payload.get({"anthropic": "message", "openai-responses": "response"}.get(fmt_name, ""))
    usage = _dict((inner if isinstance(inner, dict) else payload).get("usage"))
    if fmt_name == "anthropic":
        return _int(usage, "cache_read_input_tokens"), _int(usage, "output_tokens")
    if fmt_name == "openai-chat":
        details = _dict(usage.get("prompt_tokens_details"))
        return _int(details, "cached_tokens"), _int(usage, "completion_tokens")
    details = _dict(usage.get("input_tokens_details"))
    return _int(details, "cached_tokens"), _int(usage, "output_tokens")


def _dict(value: Any) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _int(values: JsonObject, key: str) -> int | None:
    value = values.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
