"""Anthropic Messages (`POST /v1/messages`): blocks to chunks and back, and its rules.

Rules kept: every `tool_use` is answered by a `tool_result` with its id in the
next user message and every result answers one; the first message is a user
message and roles alternate; `thinking`/`redacted_thinking` blocks are signed,
so they go whole or stay byte for byte; at most 4 `cache_control` breakpoints,
and one on a block that goes moves to the nearest kept block before it.
`<system-reminder>` text Claude Code puts inside messages is never changed, nor
are the `"role": "system"` messages it puts inside `messages` (its environment
block, since 2.1.332): they are instructions, kept whole where they are, and
the rules on roles and pairs are about the user and assistant messages around
them (recorded from Claude Code by tests/agents, which the provider accepts).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from ctxopt.api.gateway.formats import aider
from ctxopt.api.gateway.formats.conversation import (
    Block,
    Conversation,
    Edit,
    JsonObject,
    Resume,
    Rewrite,
    Turn,
    build,
    digest,
    dump_text,
    edits_by_message,
    text_of,
)
from ctxopt.model import ChunkKind, Role

MAX_CACHE_BREAKPOINTS = 4  # the API refuses a request with more
# What an image costs at most at the API's default resizing (1.15 megapixels / 750).
IMAGE_TOKENS = 1600
SYSTEM_REMINDER = "<system-reminder>"
_ROLES = {"user": Role.USER, "assistant": Role.MODEL}
_SYSTEM_ROLE = "system"
_SIGNED = ("thinking", "redacted_thinking")
# a block: output messages, message, block, and whether that content list is ours
_UNCHANGED = 1 << 62  # `_move_marker` changed no earlier message
_Slot = tuple[list[JsonObject], int, int, bool]


class AnthropicMessages:
    name = "anthropic"
    list_key = "messages"

    def opening(self, body: JsonObject) -> Any:
        messages = body["messages"]
        return (body.get("system"), messages[0] if messages else None)

    def parse(
        self, body: JsonObject, path: str, previous: Conversation | None
    ) -> Conversation | None:
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise ValueError("messages: not a list")
        frame = [(ChunkKind.SYSTEM, body.get("system")), (ChunkKind.TOOL_SCHEMA, body.get("tools"))]
        return aider.annotate(build(str(body.get("model", "")), frame, messages, _turn, previous))

    def render(
        self,
        body: JsonObject,
        conversation: Conversation,
        edits: Mapping[tuple[int, int], Edit],
        dropped: frozenset[int],
        resume: Resume | None = None,
    ) -> JsonObject:
        read = body["messages"]
        resume = None if dropped else resume
        messages, before, start = conversation.renders.resumed(read, resume)
        grouped = edits_by_message(edits, start)
        last_kept = _last_kept(messages)  # where a removed block's cache marker moves to
        clean = len(read)  # the first message a later one moved a marker into
        for index in range(start, len(read)):
            message = read[index]
            before.append(len(messages))
            content = message.get("content")
            mine = grouped.get(index)
            if mine is None and index not in dropped:
                messages.append(message)
                # a system message's blocks never take a marker: they stay as sent
                if isinstance(content, list) and content and message.get("role") != _SYSTEM_ROLE:
                    last_kept = (messages, len(messages) - 1, len(content) - 1, False)
                continue
            if index in dropped:
                for block in content if isinstance(content, list) else []:
                    clean = min(clean, _move_marker(block, last_kept))
                continue
            if isinstance(content, str):
                edit = edits.get((index, -1))
                out = dict(message)
                if edit is not None and edit.text is not None:
                    out["content"] = edit.text
                messages.append(out)
                continue
            reused = conversation.renders.get(index, message, mine or ())
            if reused is not None:
                messages.append(reused)
            else:
                blocks: list[JsonObject] = []
                messages.append({**message, "content": blocks})
                moves = False  # a marker leaving this message: then it is not reused
                for position, block in enumerate(content):
                    edit = edits.get((index, position))
                    if edit is not None and edit.text is None:
                        moves = moves or (isinstance(block, dict) and "cache_control" in block)
                        clean = min(clean, _move_marker(block, last_kept))
                        continue
                    blocks.append(block if edit is None else _rewritten(block, edit.text or ""))
                    last_kept = (messages, len(messages) - 1, len(blocks) - 1, True)
                if not moves:
                    conversation.renders.put(index, message, mine or (), messages[-1])
            kept = messages[-1]["content"]
            if kept:  # shared with the next call from now on: later markers copy it
                last_kept = (messages, len(messages) - 1, len(kept) - 1, False)
        before.append(len(messages))
        conversation.renders.record(resume, read, messages, before, clean)
        return {**body, "messages": messages}

    def violations(self, body: JsonObject) -> list[str]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return ["messages: empty"]
        found: list[str] = []
        # the conversation proper: system messages inside the list stand aside
        talk = [
            (i, m)
            for i, m in enumerate(messages)
            if not (isinstance(m, dict) and m.get("role") == _SYSTEM_ROLE)
        ]
        if not talk:
            return ["messages: no user or assistant message"]
        first, opening = talk[0]
        if opening.get("role") != "user":
            found.append(f"messages[{first}]: not a user message")
        for (_, before), (i, message) in itertools.pairwise(talk):
            if message.get("role") == before.get("role"):
                found.append(f"messages[{i}]: same role as the message before")
        for n, (i, message) in enumerate(talk):
            calls = _ids(message, "tool_use", "id")
            answers = (
                _ids(talk[n + 1][1], "tool_result", "tool_use_id") if n + 1 < len(talk) else None
            )
            if calls and answers is not None and not calls <= answers:
                found.append(f"messages[{i}]: tool_use {sorted(calls - answers)} unanswered")
            results = _ids(message, "tool_result", "tool_use_id")
            asked = _ids(talk[n - 1][1], "tool_use", "id") if n > 0 else set()
            if results - asked:
                found.append(
                    f"messages[{i}]: tool_result {sorted(results - asked)} answers no call"
                )
        markers = _markers(body)
        if markers > MAX_CACHE_BREAKPOINTS:
            found.append(f"cache_control: {markers} breakpoints, at most {MAX_CACHE_BREAKPOINTS}")
        return found

    def prompt_tokens(self, payload: JsonObject) -> int | None:
        """`usage` of a response, or of `message_start` in a stream: the prompt is
        the uncached input plus what was read from and written to the cache."""
        message = payload.get("message")
        usage = (message if isinstance(message, dict) else payload).get("usage")
        if not isinstance(usage, dict) or not isinstance(usage.get("input_tokens"), int):
            return None
        keys = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        return sum(v for k in keys if isinstance(v := usage.get(k), int))


def _turn(index: int, message: Any) -> Turn:
    if isinstance(message, dict) and message.get("role") == _SYSTEM_ROLE:
        text = dump_text(message.get("content"))
        block = Block(ChunkKind.SYSTEM, text, Rewrite.NEVER, ref=(index, -1))
        return Turn(Role.SYSTEM, [block], locked=True, items=(index,))
    if not isinstance(message, dict) or message.get("role") not in _ROLES:
        raise ValueError(f"messages[{index}]: no user, assistant or system role")
    role = _ROLES[message["role"]]
    content = message.get("content")
    if isinstance(content, str):
        return Turn(role, [_text_block(content, (index, -1))], items=(index,))
    if not isinstance(content, list):
        raise ValueError(f"messages[{index}].content: neither text nor a list")
    return Turn(role, [_block(b, (index, i)) for i, b in enumerate(content)], items=(index,))


def _text_block(text: str, ref: tuple[int, int]) -> Block:
    if text.lstrip().startswith(SYSTEM_REMINDER):
        return Block(ChunkKind.SYSTEM, text, Rewrite.NEVER, ref=ref)
    if not text.strip():
        return Block(ChunkKind.MESSAGE, "[empty text]", Rewrite.NEVER, ref=ref)
    return Block(ChunkKind.MESSAGE, text, ref=ref)


def _block(block: Any, ref: tuple[int, int]) -> Block:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "text" and isinstance(block.get("text"), str):
        return _text_block(block["text"], ref)
    if kind == "thinking":
        return Block(
            ChunkKind.ENRICHMENT, str(block.get("thinking")) or "[thinking]", Rewrite.DROP, ref=ref
        )
    if kind == "redacted_thinking":
        size = len(str(block.get("data", ""))) // 4 + 1
        return Block(
            ChunkKind.ENRICHMENT, "[redacted thinking]", Rewrite.DROP, tokens=size, ref=ref
        )
    if kind == "tool_use":
        text = f"{block.get('name')} {dump_text(block.get('input'))}"
        return Block(ChunkKind.TOOL_CALL, text, Rewrite.CALL, call_id=str(block.get("id")), ref=ref)
    if kind == "tool_result":
        text = _result_text(block.get("content")) or "[empty result]"
        if block.get("is_error"):
            text = f"[error] {text}"
        return Block(ChunkKind.TOOL_RESULT, text, answers=str(block.get("tool_use_id")), ref=ref)
    if kind in ("image", "document"):
        text = f"[{kind} {digest(dump_text(block.get('source')))}]"
        return Block(ChunkKind.MESSAGE, text, tokens=IMAGE_TOKENS, ref=ref)
    return Block(ChunkKind.MESSAGE, dump_text(block), Rewrite.NEVER, ref=ref)


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return text_of(
        p.get("text", "") if p.get("type") == "text" else f"[{p.get('type')}]"
        for p in content
        if isinstance(p, dict)
    )


def _rewritten(block: JsonObject, text: str) -> JsonObject:
    """The block with its content replaced, its id and cache marker kept."""
    kind = block.get("type")
    if kind == "tool_result":
        return {**block, "content": text}
    if kind == "tool_use":
        return {**block, "input": {}}
    if kind == "text":
        return {**block, "text": text}
    out: JsonObject = {"type": "text", "text": text}
    if "cache_control" in block:
        out["cache_control"] = block["cache_control"]
    return out


def _last_kept(messages: list[JsonObject]) -> _Slot | None:
    """Where a marker moves to after `messages` (rendered before, shared): the
    last block of the last message with blocks, not a system message's (as
    `render` tracks it message by message)."""
    for index in range(len(messages) - 1, -1, -1):
        content = messages[index].get("content")
        if isinstance(content, list) and content and messages[index].get("role") != _SYSTEM_ROLE:
            return (messages, index, len(content) - 1, False)
    return None


def _move_marker(removed: Any, last_kept: _Slot | None) -> int:
    """A removed block's cache breakpoint goes to the nearest kept block before it
    (the prefix up to there is what was cached); the input is never mutated: the
    message and block that get it are copies. The earlier message it changed
    (a render resumed after it must not take it as last written), else a
    number past any."""
    if not isinstance(removed, dict) or "cache_control" not in removed or last_kept is None:
        return _UNCHANGED
    messages, index, position, owned = last_kept
    content = messages[index]["content"] if owned else list(messages[index]["content"])
    target = content[position]
    if "cache_control" not in target and target.get("type") not in _SIGNED:
        content[position] = {**target, "cache_control": removed["cache_control"]}
        if not owned:
            messages[index] = {**messages[index], "content": content}
            return index
    return _UNCHANGED


def _ids(message: Any, kind: str, key: str) -> set[str]:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return set()
    return {str(b.get(key)) for b in content if isinstance(b, dict) and b.get("type") == kind}


def _markers(body: JsonObject) -> int:
    count = 0
    for group in (body.get("system"), body.get("tools")):
        if isinstance(group, list):
            count += sum(1 for b in group if isinstance(b, dict) and "cache_control" in b)
    for message in body.get("messages", []):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            count += sum(1 for b in content if isinstance(b, dict) and "cache_control" in b)
    return count
