"""A fake model provider on loopback that records every request reaching it.

It speaks the three wire formats well enough for the official SDKs (and the
agents' CLIs): Anthropic Messages, OpenAI Chat Completions and Responses, and
Gemini generateContent / streamGenerateContent, each unary or streamed (SSE),
answering with text or, when `script` says so, with a tool call. Every
request is kept as a `Recorded` (method, path, query, headers, parsed body)
for tests to check what the gateway sent. `fail_with` makes it answer errors
the way a provider does; `usage` sets the prompt size it reports.

Usage:
    with fake_upstream() as upstream:
        ... point CTXOPT_UPSTREAM_* at upstream.url ...
        assert upstream.requests[-1].body["messages"] ...
"""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import threading
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

JsonObject = dict[str, Any]
RELEASE_POLL_S = 0.02
TEST_ID_HEADER = "x-test-id"


@dataclass
class Recorded:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    raw: bytes
    body: Any  # the parsed JSON, None when the body is not JSON

    @property
    def streamed(self) -> bool:
        return "streamGenerateContent" in self.path or bool(
            isinstance(self.body, dict) and self.body.get("stream")
        )


@dataclass(frozen=True)
class ToolCall:
    """A tool call the fake answers with: the tool's name and its arguments."""

    name: str
    arguments: JsonObject
    call_id: str = "call_fake_1"


# What to answer: text, a tool call, or a whole Response of the test's making.
Reply = str | ToolCall | Response


@dataclass
class FakeUpstream:
    url: str = ""
    requests: list[Recorded] = field(default_factory=list)
    script: Callable[[Recorded], Reply] = lambda _request: "ok"
    usage: Callable[[Recorded], int] = lambda request: len(request.raw) // 4
    failure: tuple[int, JsonObject] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Faults: requests `hold` picks get no answer until `released` is set; a streamed
    # answer with `stream_fault` "cut" loses its connection after its first event,
    # with "stall" it waits there for `released`, counted in `streams_abandoned` when
    # the gateway goes away first.
    hold: Callable[[Recorded], bool] = lambda _request: False
    released: threading.Event = field(default_factory=threading.Event)
    stream_fault: Literal["cut", "stall"] | None = None
    streams_abandoned: int = 0
    # The bytes answered to each request carrying an `x-test-id` header, by that id
    answers: dict[str, bytes] = field(default_factory=dict)

    def fail_with(self, status: int, body: JsonObject) -> None:
        self.failure = (status, body)

    def calls(self, path_part: str) -> list[Recorded]:
        """Recorded requests whose path contains `path_part`."""
        with self.lock:
            return [r for r in self.requests if path_part in r.path]

    async def _handle(self, request: Request) -> Response:
        raw = await request.body()
        try:
            # as a provider does, a gzip body is read decoded (`raw` keeps what arrived)
            gzipped = request.headers.get("content-encoding") == "gzip"
            text = gzip.decompress(raw) if gzipped else raw
            body = json.loads(text) if text else None
        except (ValueError, OSError, RecursionError):
            body = None
        recorded = Recorded(
            request.method,
            request.url.path,
            request.url.query,
            {k.lower(): v for k, v in request.headers.items()},
            raw,
            body,
        )
        with self.lock:
            self.requests.append(recorded)
        if self.hold(recorded):
            await self._until_released()
        if self.failure is not None:
            status, error = self.failure
            return JSONResponse(error, status_code=status, headers={"x-provider": "fake"})
        path = recorded.path
        calls = ("/v1/messages", "/v1/chat/completions", "/v1/responses", "enerateContent")
        if not path.endswith(calls):
            return JSONResponse({"object": "fake", "path": path})
        if not isinstance(body, dict):
            return JSONResponse(
                {"error": {"message": "body is not a JSON object"}}, status_code=400
            )
        reply = self.script(recorded)
        if isinstance(reply, Response):
            return reply
        tokens = self.usage(recorded)
        if path.endswith("/v1/messages"):
            answer = _anthropic(reply, tokens, recorded.streamed)
        elif path.endswith("/v1/chat/completions"):
            options = body.get("stream_options")
            asked = isinstance(options, dict) and options.get("include_usage") is True
            answer = _chat(reply, tokens, recorded.streamed, usage_chunk=asked)
        elif path.endswith("/v1/responses"):
            answer = _responses(reply, tokens, recorded.streamed)
        else:
            answer = _gemini(reply, tokens, recorded.streamed, "alt=sse" in recorded.query)
        if self.stream_fault is not None and isinstance(answer, StreamingResponse):
            answer.body_iterator = self._faulty(answer.body_iterator, self.stream_fault)
        test_id = recorded.headers.get(TEST_ID_HEADER)
        if test_id is not None:
            if isinstance(answer, StreamingResponse):
                answer.body_iterator = self._kept(answer.body_iterator, test_id)
            else:
                self.answers[test_id] = bytes(answer.body)
        return answer

    async def _kept(
        self, events: AsyncIterable[str | bytes | memoryview], test_id: str
    ) -> AsyncIterator[str | bytes | memoryview]:
        sent = bytearray()
        async for event in events:
            sent += event.encode() if isinstance(event, str) else event
            yield event
        self.answers[test_id] = bytes(sent)

    async def _until_released(self) -> None:
        while not self.released.is_set():
            await asyncio.sleep(RELEASE_POLL_S)

    async def _faulty(
        self, events: AsyncIterable[str | bytes | memoryview], fault: str
    ) -> AsyncIterator[str | bytes | memoryview]:
        finished = False
        try:
            async for event in events:
                yield event
                if fault == "cut":
                    finished = True  # the cut is the fake's own doing
                    raise ConnectionAbortedError("the fake provider cuts the stream")
                await self._until_released()
            finished = True
        finally:
            if not finished:
                with self.lock:
                    self.streams_abandoned += 1


def _sse(events: list[tuple[str | None, JsonObject | str]]) -> StreamingResponse:
    async def stream() -> AsyncIterator[bytes]:
        for name, data in events:
            text = data if isinstance(data, str) else json.dumps(data)
            head = f"event: {name}\n" if name else ""
            yield f"{head}data: {text}\n\n".encode()

    return StreamingResponse(stream(), media_type="text/event-stream")


def _anthropic(reply: str | ToolCall, tokens: int, streamed: bool) -> Response:
    usage = {"input_tokens": tokens, "output_tokens": 5}
    if isinstance(reply, ToolCall):
        block: JsonObject = {
            "type": "tool_use",
            "id": reply.call_id,
            "name": reply.name,
            "input": reply.arguments,
        }
        stop = "tool_use"
    else:
        block = {"type": "text", "text": reply}
        stop = "end_turn"
    message = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
        "content": [block],
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }
    if not streamed:
        return JSONResponse(message)
    start = {**message, "content": [], "stop_reason": None}
    if isinstance(reply, ToolCall):
        opened = {"type": "tool_use", "id": reply.call_id, "name": reply.name, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(reply.arguments)}
    else:
        opened = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": reply}
    return _sse(
        [
            ("message_start", {"type": "message_start", "message": start}),
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": opened},
            ),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": 5},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    )


def _chat(reply: str | ToolCall, tokens: int, streamed: bool, *, usage_chunk: bool) -> Response:
    """As the API: a stream reports usage only when the request asked for it, in an
    extra chunk with no choices, every other chunk then carrying `"usage": null`."""
    usage = {"prompt_tokens": tokens, "completion_tokens": 5, "total_tokens": tokens + 5}
    message: JsonObject = {
        "role": "assistant",
        "content": None if isinstance(reply, ToolCall) else reply,
    }
    if isinstance(reply, ToolCall):
        message["tool_calls"] = [
            {
                "id": reply.call_id,
                "type": "function",
                "function": {"name": reply.name, "arguments": json.dumps(reply.arguments)},
            }
        ]
    finish = "tool_calls" if isinstance(reply, ToolCall) else "stop"
    base = {"id": "chatcmpl-fake", "created": int(time.time()), "model": "gpt-fake"}
    if not streamed:
        choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        return JSONResponse(
            {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
        )
    delta = {**message}
    if "tool_calls" in delta:
        delta["tool_calls"] = [{**delta["tool_calls"][0], "index": 0}]
    chunk = {**base, "object": "chat.completion.chunk", **({"usage": None} if usage_chunk else {})}
    events: list[tuple[str | None, JsonObject | str]] = [
        (None, {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}),
        (None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}),
    ]
    if usage_chunk:
        events.append((None, {**chunk, "choices": [], "usage": usage}))
    return _sse([*events, (None, "[DONE]")])


def _responses(reply: str | ToolCall, tokens: int, streamed: bool) -> Response:
    usage = {
        "input_tokens": tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": tokens + 5,
    }
    if isinstance(reply, ToolCall):
        item: JsonObject = {
            "type": "function_call",
            "id": "fc_fake",
            "call_id": reply.call_id,
            "name": reply.name,
            "arguments": json.dumps(reply.arguments),
            "status": "completed",
        }
    else:
        item = {
            "type": "message",
            "id": "msg_fake",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": reply, "annotations": []}],
        }
    response = {
        "id": "resp_fake",
        "object": "response",
        "created_at": int(time.time()),
        "model": "gpt-fake",
        "status": "completed",
        "output": [item],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }
    if not streamed:
        return JSONResponse(response)
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    return _sse(
        [
            (
                "response.created",
                {"type": "response.created", "sequence_number": 0, "response": pending},
            ),
            (
                "response.output_item.done",
                {
                    "type": "response.output_item.done",
                    "sequence_number": 1,
                    "output_index": 0,
                    "item": item,
                },
            ),
            (
                "response.completed",
                {"type": "response.completed", "sequence_number": 2, "response": response},
            ),
        ]
    )


def _gemini(reply: str | ToolCall, tokens: int, streamed: bool, sse: bool) -> Response:
    part: JsonObject = (
        {"functionCall": {"name": reply.name, "args": reply.arguments, "id": reply.call_id}}
        if isinstance(reply, ToolCall)
        else {"text": reply}
    )
    answer = {
        "candidates": [
            {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": tokens,
            "candidatesTokenCount": 5,
            "totalTokenCount": tokens + 5,
        },
        "modelVersion": "gemini-fake",
    }
    if not streamed:
        return JSONResponse(answer)
    if sse:
        return _sse([(None, answer)])
    return JSONResponse([answer])


@contextmanager
def fake_upstream(**settings: Any) -> Iterator[FakeUpstream]:
    """A FakeUpstream serving on 127.0.0.1 (a free port) for the block."""
    upstream = FakeUpstream(**settings)
    app = Starlette(
        routes=[Route("/{path:path}", upstream._handle, methods=["GET", "POST", "PUT", "DELETE"])]
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted sockets inherit it
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    upstream.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield upstream
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
