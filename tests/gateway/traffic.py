"""One small conversation per wire format, sent through the gateway and read
back raw, for the load and fault tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from tests.gateway.upstream import TEST_ID_HEADER

FORMATS = ("anthropic", "openai-chat", "openai-responses", "gemini")
WORDS = ("deploy", "retry", "cache", "schema", "error", "build", "index", "owner")


@dataclass(frozen=True)
class WireCall:
    """A request to the gateway: the path under its URL and the JSON body."""

    path: str
    body: dict[str, Any]


def conversation(fmt: str, turns: int, streamed: bool, seed: int = 0) -> WireCall:
    """`turns` alternating user and model text turns (a user turn last) in `fmt`."""
    texts = [
        f"turn {t} of {seed}: "
        + " ".join(WORDS[(t * 7 + i + seed) % len(WORDS)] for i in range(60))
        for t in range(turns - 1)
    ] + [f"question {seed}: what now?"]
    roles = ["user" if (turns - 1 - t) % 2 == 0 else "model" for t in range(turns)]
    if fmt == "gemini":
        method = "streamGenerateContent?alt=sse" if streamed else "generateContent"
        contents = [{"role": r, "parts": [{"text": x}]} for r, x in zip(roles, texts, strict=True)]
        return WireCall(f"gemini/v1beta/models/gemini-2.5-pro:{method}", {"contents": contents})
    messages = [
        {"role": "user" if r == "user" else "assistant", "content": x}
        for r, x in zip(roles, texts, strict=True)
    ]
    if fmt == "anthropic":
        body = {"model": "claude-sonnet-4-6", "max_tokens": 20, "messages": messages}
        return WireCall("anthropic/v1/messages", body | {"stream": streamed})
    if fmt == "openai-chat":
        body = {"model": "gpt-4o", "messages": messages, "stream": streamed}
        if streamed:  # asked for, the usage chunk is relayed (unasked, the gateway takes it out)
            body["stream_options"] = {"include_usage": True}
        return WireCall("openai/v1/chat/completions", body)
    return WireCall(
        "openai/v1/responses", {"model": "gpt-4o", "input": messages, "stream": streamed}
    )


def send(
    client: httpx.Client, base: str, call: WireCall, test_id: str, **headers: str
) -> tuple[int, bytes]:
    """The status and the raw bytes of the answer (a stream read to its end)."""
    with client.stream(
        "POST", f"{base}/{call.path}", json=call.body, headers={TEST_ID_HEADER: test_id, **headers}
    ) as answer:
        return answer.status_code, b"".join(answer.iter_raw())
