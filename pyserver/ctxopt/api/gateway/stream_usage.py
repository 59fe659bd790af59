"""The provider's prompt size for OpenAI Chat streams whose client did not ask for it.

A streamed Chat Completion reports usage only when the request sets
`stream_options.include_usage` (aider 0.86.2 does not); without it the
gateway's calibration (pipeline.report_usage) never learns the provider's
count. The gateway asks for it on the client's behalf and takes the extra
chunk out of the stream it relays: per the API, that chunk comes last before
`data: [DONE]`, with `choices` empty, and every other chunk gains
`"usage": null`, which a client that did not ask for usage ignores.
"""

from __future__ import annotations

from typing import Any

import orjson

from ctxopt.api.gateway.formats.conversation import JsonObject

# SSE events end with a blank line; the API writes "\n\n"
EVENT_END = b"\n\n"


def ask_for_usage(raw: bytes, fields: JsonObject | None = None) -> bytes | None:
    """`raw` with `stream_options.include_usage` set, when it is a streamed Chat
    request without it; None when there is nothing to add. Without options the
    body's bytes stay as sent but for the option, put first. `fields`, when
    given, is a parse of a body with `raw`'s top-level fields other than the
    message list (the pipeline's): `raw` (about 1 MB at 1,000 messages) is then
    parsed only when it has options to merge."""
    body = fields if fields is not None else _object(raw)
    if body is None or body.get("stream") is not True:
        return None
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return None
    if "stream_options" not in body:
        start = raw.index(b"{") + 1
        # the object holds `stream` at least, so a comma follows; one copy, in the join
        added = b'"stream_options":{"include_usage":true},'
        return b"".join((raw[:start], added, memoryview(raw)[start:]))
    body = _object(raw)  # `raw` may be pruned: its own messages are the ones to dump
    if body is None:
        return None
    kept = options if isinstance(options, dict) else {}
    return orjson.dumps({**body, "stream_options": {**kept, "include_usage": True}})


def _object(raw: bytes) -> dict[str, Any] | None:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return body if isinstance(body, dict) else None


class UsageStripper:
    """Relays an SSE stream less its usage-only chunks (`choices` empty, `usage` set)."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._pending + chunk
        end = data.rfind(EVENT_END)
        if end < 0:
            self._pending = data
            return b""
        self._pending = data[end + len(EVENT_END) :]
        events = data[: end + len(EVENT_END)].split(EVENT_END)
        return b"".join(e + EVENT_END for e in events[:-1] if not _usage_only(e))

    def finish(self) -> bytes:
        rest, self._pending = self._pending, b""
        return b"" if _usage_only(rest) else rest


def _usage_only(event: bytes) -> bool:
    for line in event.split(b"\n"):
        if line.startswith(b"data:") and b'"usage"' in line:
            try:
                payload = orjson.loads(line[5:])
            except orjson.JSONDecodeError:
                return False
            return (
                isinstance(payload, dict)
                and payload.get("choices") == []
                and isinstance(payload.get("usage"), dict)
            )
    return False
