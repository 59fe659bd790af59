"""What every wire format maps its message list to, and the edits it maps back.

A format parses a request body into a `Conversation`: the fixed frame (system
prompt, tool declarations) and the history as `Turn`s of `Block`s, each block
one piece the engine sees as a chunk. The pipeline decides `Edit`s per block
and whole turns to drop; the format renders them back into its own JSON. The
engine never sees a format, and a format never sees the engine.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

import orjson

from ctxopt.model import ChunkKind, Role

JsonObject = dict[str, Any]


class Rewrite(Enum):
    """How a block may change."""

    TEXT = "text"  # its content may become an excerpt or a placeholder
    DROP = "drop"  # signed content (thinking): kept byte for byte, or dropped whole
    CALL = "call"  # a tool call: its id and name stay, its arguments may be emptied
    NEVER = "never"  # structure the provider checks (a call's arguments): as sent


@dataclass(slots=True)
class Block:
    kind: ChunkKind
    text: str  # what the engine scores and counts
    rewrite: Rewrite = Rewrite.TEXT
    call_id: str = ""  # the call this block makes
    answers: str = ""  # the call this block answers
    tokens: int = 0  # a count the engine takes as given (media), 0: the engine counts
    ref: tuple[int, int] = (0, -1)  # where it lives: (message or item, part; -1 the whole)
    pinned: bool = False  # a root the engine never shrinks (the file the host is editing)
    file_path: str = ""  # the file whose text this is, in a host's working set


@dataclass(slots=True)
class Turn:
    role: Role
    blocks: list[Block]
    locked: bool = False  # a system or developer message inside the list: never changed
    items: tuple[int, ...] = ()  # the raw messages (or items) it is made of
    # the files the host is editing, resent in place on every call: never dropped whole
    working_set: bool = False
    key: str = ""  # its content's digest, once computed (sessions.trail_of)


@dataclass(frozen=True, slots=True)
class Edit:
    """A block's new content; `text` None drops the block; on a call block any
    text empties its arguments (the step's result placeholder restores it)."""

    text: str | None


MessageEdits = tuple[tuple[tuple[int, int], Edit], ...]


@dataclass(frozen=True, slots=True)
class Resume:
    """Leave to a render to start where the last one asked the same way left
    off: its first `stable` raw messages (or items) carry the edits they carried
    then (the caller's word; the render checks they are the same objects).
    `basis` is kept with the record, for the caller's next comparison."""

    stable: int
    basis: Sequence[object] = ()


@dataclass(frozen=True, slots=True)
class _Record:
    read: list[Any]  # the raw list rendered
    wrote: list[Any]  # the list it rendered to
    before: tuple[int, ...]  # before[i]: elements written before raw element i (and at the end)
    clean: int  # elements of `wrote` below this one no later element changed
    basis: Sequence[object]


class Renders:
    """Each raw message as the last call rendered it, for the next call to reuse:
    an entry holds only for the same message object (reuse.py hands the
    unchanged prefix over as the same objects) under equal edits, so a host that
    edited a message or a decision that changed renders it again. Rendered
    messages are shared between calls: nothing may mutate them.

    And the last render asked with a `Resume`, whole: the next one so asked
    takes the rendered list's leading elements as they are, for the raw
    elements that are the same objects under the same edits, and renders the
    rest. At 1,000 messages that is the few new ones instead of all."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[Any, MessageEdits, Any]] = {}
        self._last: _Record | None = None

    def get(self, index: int, message: Any, edits: MessageEdits) -> Any | None:
        entry = self._entries.get(index)
        if entry is not None and entry[0] is message and entry[1] == edits:
            return entry[2]
        return None

    def put(self, index: int, message: Any, edits: MessageEdits, rendered: Any) -> None:
        self._entries[index] = (message, edits, rendered)

    @property
    def basis(self) -> Sequence[object]:
        """The `Resume.basis` of the last render asked with one."""
        return self._last.basis if self._last is not None else ()

    def resumed(self, read: list[Any], resume: Resume | None) -> tuple[list[Any], list[int], int]:
        """Where a render of `read` starts: the elements it takes as written last
        time, their `before` counts, and the first raw element it renders."""
        last = self._last
        if resume is None or last is None:
            return [], [], 0
        limit = min(resume.stable, len(read), len(last.read))
        start = 0
        while start < limit and read[start] is last.read[start]:
            start += 1
        while start and last.before[start] > last.clean:
            start -= 1
        return last.wrote[: last.before[start]], list(last.before[:start]), start

    def record(
        self,
        resume: Resume | None,
        read: list[Any],
        wrote: list[Any],
        before: list[int],
        clean: int | None = None,
    ) -> None:
        """A render asked with `resume` (None: nothing kept) read `read` and wrote
        `wrote`; `before` has one count per raw element and the total; elements of
        `wrote` from `clean` on were changed by a later raw element."""
        if resume is not None:
            limit = len(wrote) if clean is None else clean
            self._last = _Record(read, wrote, tuple(before), limit, resume.basis)


# A format's rewrite of one raw message under its edits (`MessageEdits`), given the
# list written so far: the rendering (None: the message goes) and whether it is the
# message's own outcome, reusable next call (not when it hung on the messages before).
MessageRewrite = Callable[[int, Any, MessageEdits, list[Any]], tuple[Any | None, bool]]


def render_list(
    body: JsonObject,
    key: str,
    conversation: Conversation,
    edits: Mapping[tuple[int, int], Edit],
    dropped: frozenset[int],
    resume: Resume | None,
    rewrite: MessageRewrite,
) -> JsonObject:
    """`body` with its list `key` rendered under `edits`, less the `dropped` raw
    messages: a message without edits goes as it is, an edited one as `rewrite`
    makes it (or as the last call's `Renders` entry has it). With `resume` (never
    when messages are dropped), the render starts after the leading messages
    rendered the same way last time (`Renders.resumed`)."""
    read = body[key]
    resume = None if dropped else resume
    renders = conversation.renders
    wrote, before, start = renders.resumed(read, resume)
    grouped = edits_by_message(edits, start)
    for index in range(start, len(read)):
        message = read[index]
        before.append(len(wrote))
        mine = grouped.get(index)
        if index in dropped:
            continue
        if mine is None:
            wrote.append(message)
            continue
        rendered = renders.get(index, message, mine)
        if rendered is None:
            rendered, own = rewrite(index, message, mine, wrote)
            if rendered is None:
                continue
            if own:
                renders.put(index, message, mine, rendered)
        wrote.append(rendered)
    before.append(len(wrote))
    renders.record(resume, read, wrote, before)
    return {**body, key: wrote}


def edits_by_message(
    edits: Mapping[tuple[int, int], Edit], start: int = 0
) -> dict[int, MessageEdits]:
    """The edits of each raw message from `start` on (by `Block.ref`'s first
    index), in order."""
    grouped: dict[int, list[tuple[tuple[int, int], Edit]]] = {}
    for ref, edit in edits.items():
        if ref[0] >= start:
            grouped.setdefault(ref[0], []).append((ref, edit))
    return {index: tuple(pairs) for index, pairs in grouped.items()}


def edited_parts(
    index: int,
    parts: Sequence[Any],
    edits: Mapping[tuple[int, int], Edit],
    rewrite: Callable[[Any, str], Any],
) -> list[Any]:
    """Message `index`'s parts with their edits applied: an edit's text takes
    its part's place (`rewrite(part, text)` makes the new part), an edit of
    None drops the part, a part without an edit stays as it is."""
    edited = []
    for position, part in enumerate(parts):
        edit = edits.get((index, position))
        if edit is None:
            edited.append(part)
        elif edit.text is not None:
            edited.append(rewrite(part, edit.text))
    return edited


@dataclass(frozen=True, slots=True)
class HostMarks:
    """What a host's own messages mark among the first `upto` turns (aider.py):
    the first that closes its canned examples (-1: none) and the ones that open
    its working set; carried from call to call, so that only new turns are read."""

    upto: int = 0
    examples_end: int = -1
    working: tuple[int, ...] = ()


@dataclass(slots=True)
class Conversation:
    model: str
    frame: list[tuple[ChunkKind, str]]  # system prompt and tool declarations, never changed
    turns: list[Turn]
    # the raw turns and frame values, compared to the next call's so that only
    # what changed is mapped again; `reused` leading turns came from the last call
    raw_turns: list[Any] = field(default_factory=list)
    frame_raw: list[tuple[ChunkKind, Any]] = field(default_factory=list)
    reused: int = 0
    renders: Renders = field(default_factory=Renders)  # carried from call to call
    marks: HostMarks = HostMarks()  # the last call's, valid for its first `reused` turns


def build(
    model: str,
    frame_values: Sequence[tuple[ChunkKind, Any]],
    raw_turns: list[Any],
    make_turn: Callable[[int, Any], Turn],
    previous: Conversation | None,
) -> Conversation:
    """The conversation of `raw_turns`, reusing the previous call's mapping of
    the unchanged prefix: the host resends its whole history on every call, and
    comparing the parsed JSON is far cheaper than mapping it again."""
    frame_raw = [(kind, value) for kind, value in frame_values if value]
    old_frame = previous.frame_raw if previous is not None else []
    frame = [
        previous.frame[i]
        if previous is not None and i < len(old_frame) and old_frame[i] == item
        else (item[0], dump_text(item[1]))
        for i, item in enumerate(frame_raw)
    ]
    same = 0
    if previous is not None:
        before = previous.raw_turns
        limit = min(len(raw_turns), len(before))
        # the run of the very objects first, in one pass (a call per turn cost 0.5 ms
        # at 1,000 messages), then equal JSON the host wrote again
        same = next(
            (i for i, now, then in zip(itertools.count(), raw_turns, before) if now is not then),
            limit,
        )
        while same < limit and raw_turns[same] == before[same]:
            same += 1
    old = previous.turns[:same] if previous is not None else []
    turns = old + [make_turn(i, raw_turns[i]) for i in range(same, len(raw_turns))]
    renders = previous.renders if previous is not None else Renders()
    marks = previous.marks if previous is not None else HostMarks()
    return Conversation(model, frame, turns, raw_turns, frame_raw, same, renders, marks)


class WireFormat(Protocol):
    """One provider's message shape: parse, render, and that provider's rules."""

    name: str
    list_key: str  # the body's top-level list of messages (or items, contents)

    def opening(self, body: JsonObject) -> Any:
        """What starts the conversation (system prompt, first message): the
        session key when the client names none. Raises ValueError on a shape it
        cannot read."""
        ...

    def parse(
        self, body: JsonObject, path: str, previous: Conversation | None
    ) -> Conversation | None:
        """The conversation (the unchanged prefix of `previous` reused), or None
        when the request must pass untouched (history held by the provider).
        Raises ValueError on a shape it cannot read."""
        ...

    def render(
        self,
        body: JsonObject,
        conversation: Conversation,
        edits: Mapping[tuple[int, int], Edit],
        dropped: frozenset[int],
        resume: Resume | None = None,
    ) -> JsonObject:
        """A copy of `body` with block edits (by `Block.ref`) and the raw messages
        (or items) `dropped` left out; the input is untouched. With `resume` (no
        message dropped), the leading messages as the last render so asked
        wrote them (see `Renders`)."""
        ...

    def violations(self, body: JsonObject) -> list[str]:
        """The provider's history rules this body breaks (empty: valid)."""
        ...

    def prompt_tokens(self, payload: JsonObject) -> int | None:
        """The prompt size the provider reported in a response or stream event."""
        ...


def dump_text(value: Any) -> str:
    """A JSON value as stable text (keys sorted): what the engine sees of structure."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def digest(*parts: str) -> str:
    h = hashlib.blake2b(digest_size=6)
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()


def chunk_id(turn: int, block: int, role: Role, item: Block) -> str:
    """Position plus content: the host resends its whole history on every call,
    so the same block at the same place gets the same id call after call
    (cache markers and other decoration are not part of the text)."""
    pin = ("pinned",) if item.pinned else ()  # a block pinned later is appended anew
    return f"{turn}.{block}.{digest(role.name, item.kind.name, item.call_id, item.text, *pin)}"


def droppable_units(turns: Sequence[Turn], protected: set[int]) -> list[list[int]]:
    """Runs of turns that can go together, oldest first, keeping every rule a
    format checks: each run starts with a model turn and takes every non-model
    turn after it (the answers to its calls), so pairs stay whole, roles still
    alternate and the first turn stays a user turn. The turns before the first
    model turn (the task), `protected` turns and runs holding the host's working set
    stay; locked turns (instructions inside the list) stay where they are, and
    the formats' rules on roles and pairs look past them."""
    units: list[list[int]] = []
    index = next((i for i, t in enumerate(turns) if t.role == Role.MODEL), len(turns))
    while index < len(turns):
        unit = [index]
        index += 1
        while index < len(turns) and turns[index].role != Role.MODEL:
            unit.append(index)
            index += 1
        if not any(i in protected or turns[i].working_set for i in unit):
            units.append([i for i in unit if not turns[i].locked])
    return units


def latest_turns(turns: Sequence[Turn]) -> list[int]:
    """The latest turn as the API needs it whole: the newest user message, or
    the newest tool results with the model turn that made the calls (its
    thinking or reasoning included)."""
    # from the end: the history before the newest unlocked turn is not read
    last = next((i for i in range(len(turns) - 1, -1, -1) if not turns[i].locked), None)
    if last is None:
        return []
    # instructions after it (locked turns) stay with it: they are never changed anyway
    answers = any(b.answers for b in turns[last].blocks)
    if turns[last].role == Role.MODEL or answers:
        start = last
        while start > 0 and turns[start].role != Role.MODEL:
            start -= 1
        return list(range(start, len(turns)))
    return list(range(last, len(turns)))


def first_prompt(turns: Sequence[Turn]) -> int | None:
    """The first user turn that answers no call: the task every later step serves.
    A host's canned turns (few-shot examples, locked) and its working set are not it."""
    for i, turn in enumerate(turns):
        if (
            turn.role == Role.USER
            and not turn.locked
            and not turn.working_set
            and not any(b.answers for b in turn.blocks)
        ):
            return i
    return None


def text_of(parts: Iterator[str]) -> str:
    return "\n".join(p for p in parts if p)
