"""OpenAI Responses (`POST /v1/responses`): input items to chunks and back.

Rules kept: `function_call` (and `custom_tool_call`) items and their outputs
pair by `call_id`; a `reasoning` item stays with the item it precedes (a
model turn goes whole or stays); leading and inner `system`/`developer`
messages (Codex's instructions) are never changed. A request with
`previous_response_id` keeps its history at the provider: it passes untouched.

Turns: consecutive items of one side form one turn (a model turn is its
reasoning, messages and calls; a tool turn its outputs), so whole exchanges
drop together.
"""

from __future__ import annotations

import bisect
import itertools
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

IMAGE_TOKENS = 1105  # as for Chat Completions
_CALLS = ("function_call", "custom_tool_call", "local_shell_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
_LOCKED = ("system", "developer")


class OpenAIResponses:
    name = "openai-responses"
    list_key = "input"

    def opening(self, body: JsonObject) -> Any:
        items = body.get("input")
        return (body.get("instructions"), items[:2] if isinstance(items, list) else items)

    def parse(
        self, body: JsonObject, path: str, previous: Conversation | None
    ) -> Conversation | None:
        if body.get("previous_response_id"):
            return None  # the provider holds the history
        items = body.get("input")
        if isinstance(items, str):
            return None  # one prompt, no history
        if not isinstance(items, list):
            raise ValueError("input: neither text nor a list")
        frame = [
            (ChunkKind.SYSTEM, body.get("instructions")),
            (ChunkKind.TOOL_SCHEMA, body.get("tools")),
        ]
        groups = _groups(items, previous.raw_turns if previous is not None else [])
        conversation = build(str(body.get("model", "")), frame, groups, _turn, previous)
        return aider.annotate(conversation)

    def render(
        self,
        body: JsonObject,
        conversation: Conversation,
        edits: Mapping[tuple[int, int], Edit],
        dropped: frozenset[int],
        resume: Resume | None = None,
    ) -> JsonObject:
        def rewrite(index: int, item: Any, _: MessageEdits, before: list[Any]) -> tuple[Any, bool]:
            return _edited(index, item, edits, before)

        return render_list(body, "input", conversation, edits, dropped, resume, rewrite)

    def violations(self, body: JsonObject) -> list[str]:
        items = body.get("input")
        if not isinstance(items, list):
            return []
        found: list[str] = []
        calls: set[str] = set()
        answered: set[str] = set()
        for i, item in enumerate(items):
            kind = item.get("type") if isinstance(item, dict) else None
            if kind in _CALLS:
                calls.add(str(item.get("call_id")))
            elif kind in _OUTPUTS:
                call = str(item.get("call_id"))
                if call not in calls:
                    found.append(f"input[{i}]: output answers no earlier call ({call})")
                answered.add(call)
            elif kind == "reasoning":
                following = items[i + 1] if i + 1 < len(items) else None
                if not isinstance(following, dict) or following.get("type") in _OUTPUTS:
                    found.append(f"input[{i}]: reasoning not followed by the item it precedes")
        # a call may be pending only at the end of the input
        last_model = max((i for i, it in enumerate(items) if _side(it) == Role.MODEL), default=-1)
        for i, item in enumerate(items):
            kind = item.get("type") if isinstance(item, dict) else None
            if kind in _CALLS and str(item.get("call_id")) not in answered and i < last_model:
                found.append(f"input[{i}]: call {item.get('call_id')} unanswered")
        return found

    def prompt_tokens(self, payload: JsonObject) -> int | None:
        response = payload.get("response")
        usage = (response if isinstance(response, dict) else payload).get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("input_tokens"), int):
            return int(usage["input_tokens"])
        return None


def _groups(items: list[Any], before: list[Any]) -> list[list[tuple[int, Any]]]:
    """Consecutive items of one side, each with its index: one turn each. The
    last call's groups (`before`) are taken as they are (the same lists) while
    their items are the same objects (reuse.py hands them over) and so is the
    first item of the group after them, which therefore starts a group again.
    Found with one pass over the items in comprehensions: a check per group
    took about 1.5 ms at 1,000 items."""
    previous = [item for group in before for _, item in group]
    same = next(
        (i for i, now, then in zip(itertools.count(), items, previous) if now is not then),
        min(len(items), len(previous)),
    )
    # a group is kept when the head of the one after it is among the `same` items; that
    # head started a group last time, so it starts one again and no kept list grows
    heads = [group[0][0] for group in before[1:]]
    groups: list[list[tuple[int, Any]]] = before[: bisect.bisect_left(heads, same)]
    last: tuple[Role, bool] | None = None
    if groups:
        item = groups[-1][-1][1]
        last = (_side(item), isinstance(item, dict) and item.get("role") in _LOCKED)
    for index in range(groups[-1][-1][0] + 1 if groups else 0, len(items)):
        item = items[index]
        locked = isinstance(item, dict) and item.get("role") in _LOCKED
        side = (_side(item), locked)
        if groups and not locked and side == last:
            groups[-1].append((index, item))
        else:
            groups.append([(index, item)])
        last = side
    return groups


def _turn(position: int, group: list[tuple[int, Any]]) -> Turn:
    blocks: list[Block] = []
    role, locked = Role.USER, False
    for index, item in group:
        role, locked, found = _item(index, item)
        blocks.extend(found)
    return Turn(role, blocks, locked, tuple(index for index, _ in group))


def _edited(
    index: int, item: Any, edits: Mapping[tuple[int, int], Edit], before: list[Any]
) -> tuple[Any, bool]:
    """The item with its edits applied (None: it goes whole), and whether that is
    the item's own outcome: not when it depended on the items `before` it."""
    whole = edits.get((index, -1))
    if whole is not None and item.get("type") in _CALLS:
        key = "arguments" if item.get("type") == "function_call" else "input"
        return {**item, key: "{}" if key == "arguments" else ""}, True
    if whole is not None and whole.text is not None:
        key = "output" if item.get("type") in _OUTPUTS else "content"
        return {**item, key: whole.text}, True
    own = whole is None
    if not own and _droppable(before):
        return None, False
    content = item.get("content")
    if isinstance(content, list) and any((index, p) in edits for p in range(len(content))):
        kind = "output_text" if item.get("role") == "assistant" else "input_text"
        parts = edited_parts(index, content, edits, lambda _, text: {"type": kind, "text": text})
        if not parts and _droppable(before):
            return None, False
        removed = [{"type": "output_text", "text": "[ctxopt: removed]"}]
        return {**item, "content": parts or removed}, own and bool(parts)
    return item, own


def _droppable(kept: list[Any]) -> bool:
    """Whether an item whose content all went can go whole: not when it follows a
    reasoning item, which must stay with the item it precedes."""
    return not kept or not isinstance(kept[-1], dict) or kept[-1].get("type") != "reasoning"


def _side(item: Any) -> Role:
    if not isinstance(item, dict):
        return Role.USER
    kind = item.get("type")
    if kind in _OUTPUTS:
        return Role.TOOL
    if kind in (*_CALLS, "reasoning") or item.get("role") == "assistant":
        return Role.MODEL
    return Role.USER


def _item(index: int, item: Any) -> tuple[Role, bool, list[Block]]:
    if not isinstance(item, dict):
        raise ValueError(f"input[{index}]: not an object")
    kind = item.get("type")
    ref = (index, -1)
    if item.get("role") in _LOCKED:
        return Role.SYSTEM, True, [Block(ChunkKind.SYSTEM, dump_text(item), Rewrite.NEVER, ref=ref)]
    side = _side(item)
    if kind in _CALLS:
        text = f"{item.get('name')} {item.get('arguments', item.get('input', item.get('action')))}"
        call = str(item.get("call_id"))
        rewrite = Rewrite.NEVER if kind == "local_shell_call" else Rewrite.CALL
        return side, False, [Block(ChunkKind.TOOL_CALL, text, rewrite, call_id=call, ref=ref)]
    if kind in _OUTPUTS:
        output = item.get("output")
        text = (output if isinstance(output, str) else dump_text(output)) or "[empty output]"
        call = str(item.get("call_id"))
        return side, False, [Block(ChunkKind.TOOL_RESULT, text, answers=call, ref=ref)]
    if kind == "reasoning":
        summary = text_of(
            s.get("text", "") for s in item.get("summary") or [] if isinstance(s, dict)
        )
        size = len(str(item.get("encrypted_content") or "")) // 4
        block = Block(
            ChunkKind.ENRICHMENT, summary or "[reasoning]", Rewrite.NEVER, tokens=size, ref=ref
        )
        return side, False, [block]
    content = item.get("content")
    if (kind in (None, "message")) and isinstance(content, str) and content.strip():
        return side, False, [Block(ChunkKind.MESSAGE, content, ref=ref)]
    if (kind in (None, "message")) and isinstance(content, list):
        return (
            side,
            False,
            [_part(p, (index, i)) for i, p in enumerate(content)]
            or [Block(ChunkKind.MESSAGE, "[empty message]", Rewrite.NEVER, ref=ref)],
        )
    return side, False, [Block(ChunkKind.MESSAGE, dump_text(item), Rewrite.NEVER, ref=ref)]


def _part(part: Any, ref: tuple[int, int]) -> Block:
    kind = part.get("type") if isinstance(part, dict) else None
    text = part.get("text") if isinstance(part, dict) else None
    if kind in ("input_text", "output_text") and isinstance(text, str) and text.strip():
        return Block(ChunkKind.MESSAGE, text, ref=ref)
    if kind in ("input_image", "input_file"):
        return Block(
            ChunkKind.MESSAGE, f"[{kind} {digest(dump_text(part))}]", tokens=IMAGE_TOKENS, ref=ref
        )
    return Block(ChunkKind.MESSAGE, dump_text(part), Rewrite.NEVER, ref=ref)
