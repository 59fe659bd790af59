"""The four wire formats as the real agent CLIs read them, for the scripted provider.

Each `*Wire` class knows one provider's request shape (is this the agent's own
turn, or a side call such as Gemini CLI's router?) and renders one scripted
`Reply` as that provider would stream it. Every answer carries a reasoning
piece the host must send back untouched (an Anthropic `thinking` block with a
signature, a Responses `reasoning` item with encrypted content, a Gemini
`thoughtSignature`), so the tests see the gateway keep them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ctxopt.tokens import TokenCounter


@dataclass(frozen=True)
class ToolCall:
    """Ask the host to run one shell command in its workspace."""

    command: str


@dataclass(frozen=True)
class FinalText:
    """End the agent's turn with a plain answer."""

    text: str


Reply = ToolCall | FinalText

# The hosts' own compaction prompts, in the newest message of the request that asks the
# model for a summary of the history (Claude Code 2.1.332, Codex 0.169.0, Gemini CLI 0.61.0)
COMPACTION_MARKERS = (
    "Your task is to create a detailed summary of the conversation so far",
    "You are performing a CONTEXT CHECKPOINT COMPACTION",
    "<state_snapshot>",
)
COMPACTION_SUMMARY = "<analysis>Scripted.</analysis>\n<summary>Scripted summary.</summary>"


@dataclass(frozen=True)
class Rendered:
    status: int
    content_type: str
    body: bytes


class Wire(Protocol):
    """One provider's format: which requests are the agent's turns, and how to answer."""

    shell_tool: str

    def is_agent_turn(self, body: Mapping[str, Any]) -> bool: ...

    def render(self, reply: Reply, body: Mapping[str, Any], step: int, usage: int) -> Rendered:
        """The scripted `reply`, reporting `usage` prompt tokens."""
        ...

    def render_side_call(
        self, path: str, body: Mapping[str, Any], usage: int, text: str = "ok"
    ) -> Rendered:
        """A one-part text answer (or, where the request names a JSON schema, a value of it)."""
        ...


_COUNTER = TokenCounter()


def prompt_tokens(body: Mapping[str, Any]) -> int:
    """What the fake reports as the prompt's size: cl100k over every string in the body."""
    return sum(_COUNTER.count(text) for text in _strings(body))


def is_compaction(body: Mapping[str, Any]) -> bool:
    """Whether the request is the host's own compaction: its newest message asks for a summary."""
    history = body.get("messages") or body.get("input") or body.get("contents") or []
    newest = json.dumps(history[-1]) if isinstance(history, list) and history else ""
    return any(marker in newest for marker in COMPACTION_MARKERS)


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _sse(events: list[tuple[str | None, Mapping[str, Any]]]) -> bytes:
    lines = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        lines.append(f"{head}data: {json.dumps(data)}\n\n")
    return "".join(lines).encode()


def _json(data: Mapping[str, Any]) -> Rendered:
    return Rendered(200, "application/json", json.dumps(data).encode())


def _declared_tools(body: Mapping[str, Any]) -> set[str]:
    names: set[str] = set()
    for tool in body.get("tools") or []:
        if not isinstance(tool, Mapping):
            continue
        if isinstance(tool.get("name"), str):
            names.add(tool["name"])
        function = tool.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.add(function["name"])  # Chat Completions
        for declaration in tool.get("functionDeclarations") or []:
            names.add(declaration.get("name", ""))
    return names


class AnthropicWire:
    """Messages API streaming as Claude Code reads it (`POST /v1/messages?beta=true`)."""

    shell_tool = "Bash"

    def is_agent_turn(self, body: Mapping[str, Any]) -> bool:
        return self.shell_tool in _declared_tools(body)

    def render(self, reply: Reply, body: Mapping[str, Any], step: int, usage: int) -> Rendered:
        thinking = {
            "type": "thinking",
            "thinking": f"Step {step}: next.",
            "signature": f"sig-{step}",
        }
        if isinstance(reply, ToolCall):
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": f"toolu_{step:04d}",
                "name": self.shell_tool,
                "input": {"command": reply.command, "description": "Run a scripted command"},
            }
            stop_reason = "tool_use"
        else:
            block = {"type": "text", "text": reply.text}
            stop_reason = "end_turn"
        return self._message([thinking, block], stop_reason, body, step, usage)

    def render_side_call(
        self, path: str, body: Mapping[str, Any], usage: int, text: str = "ok"
    ) -> Rendered:
        return self._message([{"type": "text", "text": text}], "end_turn", body, 0, usage)

    @staticmethod
    def _message(
        blocks: list[dict[str, Any]],
        stop_reason: str,
        body: Mapping[str, Any],
        step: int,
        usage: int,
    ) -> Rendered:
        counts = {"input_tokens": usage, "output_tokens": 20}
        message = {
            "id": f"msg_{step:04d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", ""),
            "content": blocks,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": counts,
        }
        if not body.get("stream"):
            return _json(message)
        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "usage": {**counts, "output_tokens": 1},
        }
        events: list[tuple[str | None, Mapping[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": start})
        ]
        for index, block in enumerate(blocks):
            events += AnthropicWire._block_events(index, block)
        events += [
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": counts["output_tokens"]},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        return Rendered(200, "text/event-stream", _sse(events))

    @staticmethod
    def _block_events(
        index: int, block: Mapping[str, Any]
    ) -> list[tuple[str | None, Mapping[str, Any]]]:
        kind = block["type"]
        if kind == "thinking":
            empty: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        elif kind == "tool_use":
            empty = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        else:
            empty = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        start = {"type": "content_block_start", "index": index, "content_block": empty}
        events: list[tuple[str | None, Mapping[str, Any]]] = [("content_block_start", start)]
        for delta in deltas:
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        return events


# Each host's shell tool and the arguments it takes: Codex, OpenCode
SHELL_ARGUMENTS = {
    "exec_command": lambda command: {"cmd": command},
    "bash": lambda command: {"command": command, "description": "Run a scripted command"},
}


def _shell(body: Mapping[str, Any]) -> str:
    return next((name for name in SHELL_ARGUMENTS if name in _declared_tools(body)), "")


class ResponsesWire:
    """OpenAI Responses streaming as Codex and OpenCode read it (`POST /v1/responses`)."""

    shell_tool = "exec_command"

    def is_agent_turn(self, body: Mapping[str, Any]) -> bool:
        return bool(_shell(body))

    def render(self, reply: Reply, body: Mapping[str, Any], step: int, usage: int) -> Rendered:
        reasoning = {
            "type": "reasoning",
            "id": f"rs_{step:04d}",
            "summary": [],
            "encrypted_content": f"encrypted-{step}",
        }
        if isinstance(reply, ToolCall):
            item: dict[str, Any] = {
                "type": "function_call",
                "id": f"fc_{step:04d}",
                "call_id": f"call_{step:04d}",
                "name": _shell(body),
                "arguments": json.dumps(SHELL_ARGUMENTS[_shell(body)](reply.command)),
                "status": "completed",
            }
        else:
            item = self._message(reply.text, step)
        return self._stream([reasoning, item], body, step, usage)

    def render_side_call(
        self, path: str, body: Mapping[str, Any], usage: int, text: str = "ok"
    ) -> Rendered:
        return self._stream([self._message(text, 0)], body, 0, usage)

    @staticmethod
    def _message(text: str, step: int) -> dict[str, Any]:
        return {
            "type": "message",
            "id": f"msg_{step:04d}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }

    @staticmethod
    def _stream(
        items: list[dict[str, Any]], body: Mapping[str, Any], step: int, input_tokens: int
    ) -> Rendered:
        response: dict[str, Any] = {
            "id": f"resp_{step:04d}",
            "object": "response",
            "model": body.get("model", ""),
            "status": "in_progress",
            "output": [],
        }
        events: list[tuple[str | None, Mapping[str, Any]]] = [
            ("response.created", {"type": "response.created", "response": response})
        ]
        for index, item in enumerate(items):
            events.append(
                (
                    "response.output_item.added",
                    {"type": "response.output_item.added", "output_index": index, "item": item},
                )
            )
            if item["type"] == "message":
                delta = {
                    "type": "response.output_text.delta",
                    "item_id": item["id"],
                    "output_index": index,
                    "content_index": 0,
                    "delta": item["content"][0]["text"],
                }
                events.append(("response.output_text.delta", delta))
            events.append(
                (
                    "response.output_item.done",
                    {"type": "response.output_item.done", "output_index": index, "item": item},
                )
            )
        completed = {
            **response,
            "status": "completed",
            "output": items,
            "usage": {
                "input_tokens": input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 20,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": input_tokens + 20,
            },
        }
        events.append(("response.completed", {"type": "response.completed", "response": completed}))
        if not body.get("stream"):
            return _json(completed)
        return Rendered(200, "text/event-stream", _sse(events))


class ChatWire:
    """Chat Completions as aider (through LiteLLM) and OpenCode read them: an agent turn
    is aider's own request (its system prompt) or one that declares a shell tool."""

    shell_tool = "bash"
    # aider 0.86.2's main system prompt (aider/coders/editblock_prompts.py) starts so
    AIDER_SYSTEM = "Act as an expert software developer."

    def is_agent_turn(self, body: Mapping[str, Any]) -> bool:
        messages = body.get("messages") or [{}]
        first = messages[0] if isinstance(messages[0], Mapping) else {}
        system = first.get("content") if first.get("role") == "system" else ""
        aider = isinstance(system, str) and system.startswith(self.AIDER_SYSTEM)
        return aider or self.shell_tool in _declared_tools(body)

    def render(self, reply: Reply, body: Mapping[str, Any], step: int, usage: int) -> Rendered:
        if isinstance(reply, ToolCall):
            arguments = SHELL_ARGUMENTS[self.shell_tool](reply.command)
            call = {
                "id": f"call_{step:04d}",
                "type": "function",
                "function": {"name": self.shell_tool, "arguments": json.dumps(arguments)},
            }
            return self._answer({"content": None, "tool_calls": [call]}, "tool_calls", body, usage)
        return self._answer({"content": reply.text}, "stop", body, usage)

    def render_side_call(
        self, path: str, body: Mapping[str, Any], usage: int, text: str = "ok"
    ) -> Rendered:
        return self._answer({"content": text}, "stop", body, usage)

    @staticmethod
    def _answer(
        message: dict[str, Any], finish: str, body: Mapping[str, Any], prompt: int
    ) -> Rendered:
        """As the API: a stream reports usage only in an extra chunk the request asked for."""
        usage = {"prompt_tokens": prompt, "completion_tokens": 20, "total_tokens": prompt + 20}
        base = {"id": "chatcmpl-scripted", "created": 0, "model": body.get("model", "")}
        message = {"role": "assistant", **message}
        if not body.get("stream"):
            choice = {"index": 0, "message": message, "finish_reason": finish}
            return _json({**base, "object": "chat.completion", "choices": [choice], "usage": usage})
        options = body.get("stream_options")
        asked = isinstance(options, Mapping) and options.get("include_usage") is True
        chunk = {**base, "object": "chat.completion.chunk", **({"usage": None} if asked else {})}
        delta = dict(message)
        if delta.get("tool_calls"):
            delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(delta["tool_calls"])]
        events: list[tuple[str | None, Mapping[str, Any]]] = [
            (None, {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}),
            (None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}),
        ]
        if asked:
            events.append((None, {**chunk, "choices": [], "usage": usage}))
        return Rendered(200, "text/event-stream", _sse(events) + b"data: [DONE]\n\n")


class GeminiWire:
    """`generateContent` / `streamGenerateContent?alt=sse` as Gemini CLI reads them."""

    shell_tool = "run_shell_command"

    def is_agent_turn(self, body: Mapping[str, Any]) -> bool:
        return self.shell_tool in _declared_tools(body)

    def render(self, reply: Reply, body: Mapping[str, Any], step: int, usage: int) -> Rendered:
        part: dict[str, Any]
        if isinstance(reply, ToolCall):
            call = {"name": self.shell_tool, "args": {"command": reply.command}}
            part = {"functionCall": call, "thoughtSignature": f"sig-{step}"}
        else:
            part = {"text": reply.text, "thoughtSignature": f"sig-{step}"}
        thought = {"text": f"Step {step}: next.", "thought": True}
        return self._answer([thought, part], usage, stream=True)

    def render_side_call(
        self, path: str, body: Mapping[str, Any], usage: int, text: str = "ok"
    ) -> Rendered:
        config = body.get("generationConfig") or {}
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        if schema:
            text = json.dumps(_fill(schema))
        return self._answer([{"text": text}], usage, stream=":streamGenerateContent" in path)

    @staticmethod
    def _answer(parts: list[dict[str, Any]], prompt: int, *, stream: bool) -> Rendered:
        response = {
            "candidates": [
                {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": {
                "promptTokenCount": prompt,
                "candidatesTokenCount": 20,
                "totalTokenCount": prompt + 20,
            },
            "modelVersion": "scripted",
        }
        if not stream:
            return _json(response)
        return Rendered(200, "text/event-stream", _sse([(None, response)]))


def _fill(schema: Mapping[str, Any]) -> object:
    """The smallest value a response schema accepts (the CLI's side calls parse it).

    An integer is 10: Gemini CLI's router reads it as a low complexity score.
    """
    if schema.get("enum"):
        return schema["enum"][0]
    kind = str(schema.get("type", "object")).lower()
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: _fill(sub) for name, sub in properties.items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 10
    if kind == "boolean":
        return False
    return "ok"
