"""OpenAI Chat Completions (`POST /v1/chat/completions`): messages to chunks and back.

Rules kept: every `tool_calls` id of an assistant message is answered by a
`tool` message right after it, and every `tool` message answers a call of the
assistant message before its run. `system` and `developer` messages, wherever
they are, are never changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxopt.api.gateway.formats import aider
from ctxopt.api.gateway.formats.conversation import (
    Block,
    Conversation,
    Edit,
    JsonObject,
    MessageEdits,
    Resume,
    Rewrite,
    Turn,
    build,
    digest,
    dump_text,
    edited_parts,
    render_list,
    text_of,
)
from ctxopt.model import ChunkKind, Role

# What an image costs at most at the API's default detail (its tiles at 170 + 85).
IMAGE_TOKENS = 1105
_ROLES = {"user": Role.USER, "assistant": Role.MODEL, "tool": Role.TOOL, "function": Role.TOOL}
_LOCKED = ("system", "developer")
CALL_REF = -10  # the k-th tool call of a message has ref (message, CALL_REF - k)
# the k-th segment of a message cut per file (aider's files) has ref (message, SEGMENT_REF - k)
SEGMENT_REF = -1_000_000


class OpenAIChat:
    name = "openai-chat"
    list_key = "messages"

    def opening(self, body: JsonObject) -> Any:
        return body["messages"][:2]

    def parse(
        self, body: JsonObject, path: str, previous: Conversation | None
    ) -> Conversation | None:
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise ValueError("messages: not a list")
        frame = [(ChunkKind.TOOL_SCHEMA, body.get(key)) for key in ("tools", "functions")]
        conversation = build(str(body.get("model", "")), frame, messages, _turn, previous)
        return aider.annotate(conversation)

    def render(
        self,
        body: JsonObject,
        conversation: Conversation,
        edits: Mapping[tuple[int, int], Edit],
        dropped: frozenset[int],
        resume: Resume | None = None,
    ) -> JsonObject:
        def rewrite(index: int, message: Any, mine: MessageEdits, _: list[Any]) -> tuple[Any, bool]:
            return _edited(index, message, edits, mine), True

        return render_list(body, "messages", conversation, edits, dropped, resume, rewrite)

    def violations(self, body: JsonObject) -> list[str]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return ["messages: empty"]
        found: list[str] = []
        open_calls: set[str] = set()
        asked: set[str] = set()
        for i, message in enumerate(messages):
            role = message.get("role") if isinstance(message, dict) else None
            if role == "tool":
                answered = str(message.get("tool_call_id"))
                if answered not in asked:
                    found.append(f"messages[{i}]: tool message answers no call ({answered})")
                open_calls.discard(answered)
                continue
            if open_calls:
                found.append(f"messages[{i}]: tool_calls {sorted(open_calls)} unanswered")
            calls = message.get("tool_calls") if role == "assistant" else None
            asked = {str(c.get("id")) for c in calls or [] if isinstance(c, dict)}
            open_calls = set(asked)
        return found

    def prompt_tokens(self, payload: JsonObject) -> int | None:
        usage = payload.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
            return int(usage["prompt_tokens"])
        return None


def _turn(index: int, message: Any) -> Turn:
    role = message.get("role") if isinstance(message, dict) else None
    if role in _LOCKED:
        text = dump_text(message.get("content"))
        return Turn(
            Role.SYSTEM,
            [Block(ChunkKind.SYSTEM, text, Rewrite.NEVER, ref=(index, -1))],
            True,
            (index,),
        )
    if role not in _ROLES:
        raise ValueError(f"messages[{index}].role: {role!r} unknown")
    content = message.get("content")
    blocks: list[Block] = []
    if role in ("tool", "function"):
        text = _content_text(content) or "[empty result]"
        answers = str(message.get("tool_call_id") or message.get("name"))
        blocks.append(Block(ChunkKind.TOOL_RESULT, text, answers=answers, ref=(index, -1)))
        return Turn(Role.TOOL, blocks, items=(index,))
    segments = aider.file_segments(content) if role == "user" and isinstance(content, str) else None
    if segments is not None:
        blocks.extend(aider.segment_blocks(segments, index, SEGMENT_REF))
    elif isinstance(content, str) and content.strip():
        blocks.append(Block(ChunkKind.MESSAGE, content, ref=(index, -1)))
    elif isinstance(content, list):
        blocks.extend(_part(p, (index, i)) for i, p in enumerate(content))
    for k, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function", {}) if isinstance(call, dict) else {}
        text = f"{function.get('name')} {function.get('arguments')}"
        call_id = str(call.get("id")) if isinstance(call, dict) else ""
        ref = (index, CALL_REF - k)
        blocks.append(Block(ChunkKind.TOOL_CALL, text, Rewrite.CALL, call_id=call_id, ref=ref))
    if not blocks:
        blocks.append(Block(ChunkKind.MESSAGE, dump_text(message), Rewrite.NEVER, ref=(index, -2)))
    return Turn(_ROLES[role], blocks, items=(index,))


def _edited(
    index: int, message: Any, edits: Mapping[tuple[int, int], Edit], mine: MessageEdits
) -> Any:
    """A message with its edits (`mine`, all of them for this message) applied."""
    calls = message.get("tool_calls") or []
    if any((index, CALL_REF - k) in edits for k in range(len(calls))):
        message = {
            **message,
            "tool_calls": [
                _emptied(c) if (index, CALL_REF - k) in edits else c for k, c in enumerate(calls)
            ],
        }
    whole = edits.get((index, -1))
    if whole is not None:
        return {**message, "content": whole.text}
    content = message.get("content")
    if any(part <= SEGMENT_REF for (_, part), _ in mine) and isinstance(content, str):
        message = {**message, "content": _segments_edited(index, content, edits)}
    if isinstance(content, list) and any((index, p) in edits for p in range(len(content))):
        parts = edited_parts(index, content, edits, lambda _, text: {"type": "text", "text": text})
        message = {**message, "content": parts or None}
    return message


def _segments_edited(index: int, content: str, edits: Mapping[tuple[int, int], Edit]) -> str:
    """A message cut per file, with the edited files' texts replaced."""
    segments = aider.file_segments(content) or []
    texts = []
    for k, segment in enumerate(segments):
        edit = edits.get((index, SEGMENT_REF - k))
        if edit is None or edit.text is None:
            texts.append(segment.text)
        else:  # the closing fence stays on a line of its own
            texts.append(edit.text if edit.text.endswith("\n") else edit.text + "\n")
    return "".join(texts)


def _emptied(call: Any) -> Any:
    """A tool call with empty arguments (its id, type and name kept)."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        return call
    return {**call, "function": {**function, "arguments": "{}"}}


def _part(part: Any, ref: tuple[int, int]) -> Block:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text" and isinstance(part.get("text"), str) and part["text"].strip():
        return Block(ChunkKind.MESSAGE, part["text"], ref=ref)
    if kind in ("image_url", "input_audio", "file"):
        return Block(
            ChunkKind.MESSAGE, f"[{kind} {digest(dump_text(part))}]", tokens=IMAGE_TOKENS, ref=ref
        )
    return Block(ChunkKind.MESSAGE, dump_text(part), Rewrite.NEVER, ref=ref)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return text_of(p.get("text", "") for p in content if isinstance(p, dict))
    return ""
