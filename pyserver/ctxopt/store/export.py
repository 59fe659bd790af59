"""The JSON export format (`ctxopt-session/1`): a session's live chunks and its
stash, enums by name and every field present, for people and for moving a
session between servers. Reading one checks only its shape; what its chunks
may hold is the engine's validation, the same as for an append."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeVar

from ctxopt.errors import InvalidArgument
from ctxopt.model import Action, Chunk, ChunkKind, GcPolicy, Role
from ctxopt.store.rows import StashEntry, StoredChunk, StoredSession

EXPORT_FORMAT = "ctxopt-session/1"


@dataclass(frozen=True, slots=True)
class Exported:
    """An export read back: the live session (owner as given to `read_export`)
    and its stash."""

    session: StoredSession
    stash: list[StashEntry]


def export_document(session: StoredSession | None, stash: list[StashEntry]) -> dict[str, object]:
    """A session (live chunks and stash) as a JSON-able dict; the owner is not
    exported: an import assigns one."""
    session_id = session.session_id if session else stash[0].session_id
    return {
        "format": EXPORT_FORMAT,
        "session_id": session_id,
        "collections": session.collections if session else 0,
        "chunks": [
            {
                "seq": c.seq,
                "born": c.born,
                "last_touched_ms": c.last_touched_ms,
                "origin": c.origin,
                "chunk": chunk_to_json(c.chunk),
            }
            for c in (session.chunks if session else [])
        ],
        "stash": [_entry_to_json(e) for e in stash],
    }


def read_export(data: object, owner: str) -> Exported:
    """Parse an export for `owner`; errors name the path (`json.chunks[2].chunk.role`)."""
    doc = _Fields(data, "json")
    if doc.string("format") != EXPORT_FORMAT:
        raise InvalidArgument("json.format", doc.raw("format"), f"expected {EXPORT_FORMAT!r}")
    session_id = doc.string("session_id")
    chunks = [
        StoredChunk(
            _chunk_from_json(item.obj("chunk")),
            item.integer("seq"),
            item.integer("born"),
            item.integer("last_touched_ms"),
            item.optional_string("origin"),
        )
        for item in doc.objs("chunks")
    ]
    stash = [_entry_from_json(item, session_id, owner) for item in doc.objs("stash")]
    session = StoredSession(session_id, owner, doc.integer("collections"), chunks)
    return Exported(session, stash)


def chunk_to_json(c: Chunk) -> dict[str, object]:
    return {
        "id": c.id,
        "role": c.role.name,
        "kind": c.kind.name,
        "text": c.text,
        "tokens": c.tokens,
        "created_at_ms": c.created_at_ms,
        "turn": c.turn,
        "pinned": c.pinned,
        "policy": c.policy.name,
        "group_id": c.group_id,
        "parent_id": c.parent_id,
        "references": list(c.references),
        "file_path": c.file_path,
        "line_start": c.line_start,
        "line_end": c.line_end,
        "tags": list(c.tags),
        "topic_id": c.topic_id,
        "task_id": c.task_id,
        "boost": c.boost,
        "embedding": list(c.embedding),
        "summary_of": list(c.summary_of),
        "metadata": dict(c.metadata),
    }


def _entry_to_json(e: StashEntry) -> dict[str, object]:
    return {
        "stash_id": e.stash_id,
        "action": e.action.name,
        "reasons": list(e.reasons),
        "score": e.score,
        "stashed_at_ms": e.stashed_at_ms,
        "plan_id": e.plan_id,
        "chunk": chunk_to_json(e.chunk),
    }


def _chunk_from_json(f: _Fields) -> Chunk:
    return Chunk(
        id=f.string("id"),
        role=f.enum("role", Role),
        kind=f.enum("kind", ChunkKind),
        text=f.string("text"),
        tokens=f.integer("tokens"),
        created_at_ms=f.integer("created_at_ms"),
        turn=f.integer("turn"),
        pinned=f.boolean("pinned"),
        policy=f.enum("policy", GcPolicy),
        group_id=f.string("group_id"),
        parent_id=f.string("parent_id"),
        references=f.strs("references"),
        file_path=f.string("file_path"),
        line_start=f.integer("line_start"),
        line_end=f.integer("line_end"),
        tags=f.strs("tags"),
        topic_id=f.string("topic_id"),
        task_id=f.string("task_id"),
        boost=f.number("boost"),
        embedding=f.floats("embedding"),
        summary_of=f.strs("summary_of"),
        metadata=f.str_map("metadata"),
    )


def _entry_from_json(f: _Fields, session_id: str, owner: str) -> StashEntry:
    return StashEntry(
        stash_id=f.string("stash_id"),
        session_id=session_id,
        owner=owner,
        chunk=_chunk_from_json(f.obj("chunk")),
        action=f.enum("action", Action),
        reasons=f.strs("reasons"),
        score=f.number("score"),
        stashed_at_ms=f.integer("stashed_at_ms"),
        plan_id=f.string("plan_id"),
    )


_E = TypeVar("_E", bound=IntEnum)


class _Fields:
    """Typed reads from a JSON object; errors name the path."""

    def __init__(self, data: object, path: str) -> None:
        if not isinstance(data, Mapping):
            raise InvalidArgument(path, type(data).__name__, "expected an object")
        self._data: Mapping[str, object] = data
        self._path = path

    def raw(self, key: str) -> object:
        return self._data.get(key)

    def _get(self, key: str, kind: type | tuple[type, ...], expected: str) -> Any:
        value = self._data.get(key)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise InvalidArgument(f"{self._path}.{key}", value, f"expected {expected}")
        return value

    def string(self, key: str) -> str:
        return str(self._get(key, str, "a string"))

    def optional_string(self, key: str) -> str:
        return "" if key not in self._data else self.string(key)

    def integer(self, key: str) -> int:
        return int(self._get(key, int, "an integer"))

    def boolean(self, key: str) -> bool:
        return bool(self._get(key, bool, "true or false"))

    def number(self, key: str) -> float:
        return float(self._get(key, (int, float), "a number"))

    def enum(self, key: str, enum: type[_E]) -> _E:
        name = self.string(key)
        if name not in enum.__members__:
            raise InvalidArgument(
                f"{self._path}.{key}", name, f"expected one of {', '.join(enum.__members__)}"
            )
        return enum[name]

    def strs(self, key: str) -> tuple[str, ...]:
        values = self._get(key, list, "a list of strings")
        if not all(isinstance(v, str) for v in values):
            raise InvalidArgument(f"{self._path}.{key}", values, "expected a list of strings")
        return tuple(values)

    def floats(self, key: str) -> tuple[float, ...]:
        values = self._get(key, list, "a list of numbers")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            raise InvalidArgument(f"{self._path}.{key}", values, "expected a list of numbers")
        return tuple(float(v) for v in values)

    def str_map(self, key: str) -> dict[str, str]:
        values = self._get(key, Mapping, "an object of strings")
        if not all(isinstance(v, str) for v in values.values()):
            raise InvalidArgument(f"{self._path}.{key}", values, "expected an object of strings")
        return dict(values)

    def obj(self, key: str) -> _Fields:
        return _Fields(self._data.get(key), f"{self._path}.{key}")

    def objs(self, key: str) -> list[_Fields]:
        items = self._get(key, list, "a list of objects")
        return [_Fields(item, f"{self._path}.{key}[{i}]") for i, item in enumerate(items)]
