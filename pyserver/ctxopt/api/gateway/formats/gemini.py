"""Gemini (`models/{model}:generateContent` and `:streamGenerateContent`): contents to chunks.

The rules the TS adapter keeps (ts-client/src/gemini/history.ts): the first
content is a user turn; every `functionCall` of a model turn is answered in
the next user turn by a `functionResponse` with its id (or, without ids, its
name, in order) and every response answers one; a part carrying a
`thoughtSignature` is signed and stays byte for byte (thought parts go whole);
the latest turn and a pending call stay intact.
"""

from __future__ import annotations

from collections import Counter
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
)
from ctxopt.model import ChunkKind, Role

IMAGE_TOKENS = 258  # Gemini bills an image at 258 tokens (up to 384 px a side; larger tiles more)
_ROLES = {"user": Role.USER, "model": Role.MODEL, "function": Role.USER}


class GeminiContents:
    name = "gemini"
    list_key = "contents"

    def opening(self, body: JsonObject) -> Any:
        contents = body["contents"]
        return (_system(body), contents[0] if contents else None)

    def parse(
        self, body: JsonObject, path: str, previous: Conversation | None
    ) -> Conversation | None:
        contents = body.get("contents")
        if not isinstance(contents, list):
            raise ValueError("contents: not a list")
        frame = [(ChunkKind.SYSTEM, _system(body)), (ChunkKind.TOOL_SCHEMA, body.get("tools"))]
        model = path.rsplit("/", 1)[-1].split(":", 1)[0]
        return aider.annotate(build(model, frame, contents, _turn, previous))

    def render(
        self,
        body: JsonObject,
        conversation: Conversation,
        edits: Mapping[tuple[int, int], Edit],
        dropped: frozenset[int],
        resume: Resume | None = None,
    ) -> JsonObject:
        def rewrite(index: int, content: Any, _: MessageEdits, __: list[Any]) -> tuple[Any, bool]:
            parts = content.get("parts") or []
            if not any((index, p) in edits for p in range(len(parts))):
                return content, False  # no edit on any of its parts: it goes as sent
            rewritten = edited_parts(index, parts, edits, _rewritten)
            return {**content, "parts": rewritten or [{"text": "[ctxopt: removed]"}]}, True

        return render_list(body, "contents", conversation, edits, dropped, resume, rewrite)

    def violations(self, body: JsonObject) -> list[str]:
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            return ["contents: empty"]
        found: list[str] = []
        if contents[0].get("role") not in ("user", None):
            found.append("contents[0]: not a user turn")
        for i, content in enumerate(contents):
            calls = _keys(content, "functionCall")
            if (
                calls
                and i + 1 < len(contents)
                and calls != _keys(contents[i + 1], "functionResponse")
            ):
                found.append(f"contents[{i}]: function calls not answered by the next turn")
            answers = _keys(content, "functionResponse")
            if answers and (i == 0 or answers != _keys(contents[i - 1], "functionCall")):
                found.append(f"contents[{i}]: function responses answer no call of the turn before")
        return found

    def prompt_tokens(self, payload: JsonObject) -> int | None:
        usage = payload.get("usageMetadata")
        if isinstance(usage, dict) and isinstance(usage.get("promptTokenCount"), int):
            return int(usage["promptTokenCount"])
        return None


def _system(body: JsonObject) -> Any:
    return body.get("systemInstruction", body.get("system_instruction"))


def _turn(index: int, content: Any) -> Turn:
    if not isinstance(content, dict):
        raise ValueError(f"contents[{index}]: not an object")
    role = _ROLES.get(content.get("role") or "user")
    if role is None:
        raise ValueError(f"contents[{index}].role: {content.get('role')!r} unknown")
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise ValueError(f"contents[{index}].parts: not a list")
    seen: Counter[str] = Counter()
    blocks = [_part(p, (index, i), seen) for i, p in enumerate(parts)]
    return Turn(role, blocks, items=(index,))


def _pair_key(value: Any, seen: Counter[str]) -> str:
    """A call's or response's pairing key: its id, else its name and rank among the same name."""
    if not isinstance(value, dict):
        return ""
    if value.get("id"):
        return str(value["id"])
    name = str(value.get("name"))
    seen[name] += 1
    return f"{name}#{seen[name]}"


def _part(part: Any, ref: tuple[int, int], seen: Counter[str]) -> Block:
    if not isinstance(part, dict):
        return Block(ChunkKind.MESSAGE, dump_text(part), Rewrite.NEVER, ref=ref)
    signed = "thoughtSignature" in part or "thought_signature" in part
    if "functionCall" in part:
        call = part["functionCall"]
        text = (
            f"{call.get('name')} {dump_text(call.get('args'))}"
            if isinstance(call, dict)
            else dump_text(call)
        )
        return Block(
            ChunkKind.TOOL_CALL,
            text,
            Rewrite.NEVER if signed else Rewrite.CALL,
            call_id=_pair_key(call, seen),
            ref=ref,
        )
    if "functionResponse" in part:
        response = part["functionResponse"]
        text = dump_text(response.get("response") if isinstance(response, dict) else response)
        rewrite = Rewrite.NEVER if signed else Rewrite.TEXT
        return Block(
            ChunkKind.TOOL_RESULT, text, rewrite, answers=_pair_key(response, seen), ref=ref
        )
    if part.get("thought") is True:
        text = str(part.get("text") or "[thought]")
        return Block(ChunkKind.ENRICHMENT, text, Rewrite.NEVER if signed else Rewrite.DROP, ref=ref)
    if isinstance(part.get("text"), str) and part["text"].strip():
        return Block(
            ChunkKind.MESSAGE, part["text"], Rewrite.NEVER if signed else Rewrite.TEXT, ref=ref
        )
    if "inlineData" in part or "fileData" in part:
        text = f"[media {digest(dump_text(part))}]"
        return Block(
            ChunkKind.MESSAGE,
            text,
            Rewrite.NEVER if signed else Rewrite.TEXT,
            tokens=IMAGE_TOKENS,
            ref=ref,
        )
    return Block(ChunkKind.MESSAGE, dump_text(part), Rewrite.NEVER, ref=ref)


def _rewritten(part: JsonObject, text: str) -> JsonObject:
    if "functionCall" in part:
        return {**part, "functionCall": {**part["functionCall"], "args": {}}}
    if "functionResponse" in part:
        response = part["functionResponse"]
        return {"functionResponse": {**response, "response": {"output": text}}}
    return {"text": text}


def _keys(content: Any, kind: str) -> list[str]:
    parts = content.get("parts") if isinstance(content, dict) else None
    seen: Counter[str] = Counter()
    return sorted(
        _pair_key(p[kind], seen) for p in parts or [] if isinstance(p, dict) and kind in p
    )
