"""What a session holds per slot: its entries, numpy columns and hubs.

A session stores its chunks by *slot*: the position a chunk was first appended
at. Slots are never reused, so slot order is prompt order and the per-slot
numpy columns let scoring and planning run vectorised.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from ctxopt.model import Chunk

_INITIAL_CAPACITY = 64


@lru_cache(maxsize=4096)  # every plan names the stash of each decision; texts hash once
def stash_id(chunk_id: str, text: str) -> str:
    """Deterministic id of a stashed original: the same text stashes once."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=6).hexdigest()
    return f"{chunk_id}@{digest}"


def stash_id_of(chunk: Chunk) -> str:
    """Where this chunk's text is (or would be) stashed."""
    return stash_id(chunk.id, chunk.text)


@dataclass(slots=True)
class Entry:
    """A chunk as its session holds it, with its GC bookkeeping."""

    chunk: Chunk  # `tokens` filled in with the count
    slot: int
    tokens: int
    born: int = 0  # the session's collection count when the chunk arrived
    last_touched_ms: int = 0
    origin: str = ""  # stash id of the original while the text is an excerpt or placeholder
    _own_stash_id: str = ""

    def stash_id(self) -> str:
        """Where this chunk's original is (or would be) stashed: `origin` while the
        text is an excerpt, else the id of this text (hashed once per entry)."""
        if self.origin:
            return self.origin
        if not self._own_stash_id:
            self._own_stash_id = stash_id(self.chunk.id, self.chunk.text)
        return self._own_stash_id


def _grow(array: npt.NDArray[np.generic], size: int) -> npt.NDArray[np.generic]:
    grown = np.zeros(max(size, 2 * len(array)), dtype=array.dtype)
    grown[: len(array)] = array
    return grown


class Columns:
    """Per-slot numpy columns the scorer and planner read in bulk."""

    def __init__(self) -> None:
        n = _INITIAL_CAPACITY
        self.alive = np.zeros(n, dtype=bool)
        self.tokens = np.zeros(n, dtype=np.int64)
        self.turn = np.zeros(n, dtype=np.int64)
        self.created_ms = np.zeros(n, dtype=np.int64)
        self.kind = np.zeros(n, dtype=np.int8)
        self.role = np.zeros(n, dtype=np.int8)
        self.policy = np.zeros(n, dtype=np.int8)
        self.pinned = np.zeros(n, dtype=bool)
        self.boost = np.zeros(n, dtype=np.float64)
        self.born = np.zeros(n, dtype=np.int64)
        self.refcount = np.zeros(n, dtype=np.int64)
        self.lines = np.zeros(n, dtype=np.int64)

    NAMES = (
        "alive",
        "tokens",
        "turn",
        "created_ms",
        "kind",
        "role",
        "policy",
        "pinned",
        "boost",
        "born",
        "refcount",
        "lines",
    )

    # the columns an entry alone sets (`alive` and `refcount` are the session's),
    # read by linking one entry and by linking a restart's in bulk alike
    OF_ENTRY: tuple[tuple[str, Callable[[Entry], object]], ...] = (
        ("tokens", attrgetter("tokens")),
        ("turn", attrgetter("chunk.turn")),
        ("created_ms", attrgetter("chunk.created_at_ms")),
        ("kind", attrgetter("chunk.kind")),
        ("role", attrgetter("chunk.role")),
        ("policy", attrgetter("chunk.gc_policy")),
        ("pinned", attrgetter("chunk.pinned")),
        ("boost", attrgetter("chunk.boost")),
        ("born", attrgetter("born")),
        ("lines", lambda entry: entry.chunk.text.count("\n") + 1),
    )

    def ensure(self, size: int) -> None:
        if size <= len(self.alive):
            return
        for name in self.NAMES:
            setattr(self, name, _grow(getattr(self, name), size))

    def frozen(self, size: int) -> Columns:
        """Read-only views of the first `size` slots (no copy)."""
        view = Columns.__new__(Columns)
        for name in self.NAMES:
            column = getattr(self, name)[:size]
            column.flags.writeable = False
            setattr(view, name, column)
        return view


_HUB_NAMES = ("by_file", "by_tag", "by_topic", "by_group", "by_task")


def _hub_keys(chunk: Chunk) -> Iterator[tuple[str, str]]:
    """Each hub (by name) this chunk belongs to, with its key there."""
    if chunk.file_path:
        yield "by_file", chunk.file_path
    for tag in chunk.tags:
        yield "by_tag", tag
    if chunk.topic_id:
        yield "by_topic", chunk.topic_id
    if chunk.group_id:
        yield "by_group", chunk.group_id
    if chunk.task_id:
        yield "by_task", chunk.task_id


@dataclass(slots=True)
class Hubs:
    """Implicit links: chunks sharing a file, tag, topic, group or task."""

    by_file: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    by_tag: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    by_topic: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    by_group: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    by_task: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))

    def add(self, chunk: Chunk, slot: int) -> None:
        for name, key in _hub_keys(chunk):
            getattr(self, name)[key].add(slot)

    def discard(self, chunk: Chunk, slot: int) -> None:
        for name, key in _hub_keys(chunk):
            hub: dict[str, set[int]] = getattr(self, name)
            members = hub.get(key)
            if members is not None:
                members.discard(slot)
                if not members:
                    del hub[key]

    def view(self) -> HubsView:
        """Read-only mappings over these hubs (no copy)."""
        return HubsView(*(MappingProxyType(getattr(self, name)) for name in _HUB_NAMES))


Hub = Mapping[str, AbstractSet[int]]


@dataclass(frozen=True, slots=True)
class HubsView:
    """The hubs as readers see them: mappings they cannot change."""

    by_file: Hub
    by_tag: Hub
    by_topic: Hub
    by_group: Hub
    by_task: Hub

    def keys_of(self, chunk: Chunk) -> Iterator[tuple[Hub, str]]:
        """Each hub this chunk belongs to, with its key there."""
        for name, key in _hub_keys(chunk):
            yield getattr(self, name), key
