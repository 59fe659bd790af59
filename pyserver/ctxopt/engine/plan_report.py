"""What the last collection of a session did (`GetLastPlan`, `ctxopt show`).

The engine remembers the last triggered plan of each session, in memory and for
the most recently planned sessions only: recording keeps a reference to the
plan and costs a collection nothing. The report is built when asked, from the
plan, the chunks the session still holds and the stash (the originals of what
the plan trimmed, masked or stashed).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from ctxopt.model import Action, Chunk, ChunkKind, Plan, Role
from ctxopt.store import StashEntry

# Sessions whose last plan is remembered; older ones are forgotten first.
REMEMBERED_SESSIONS = 256
DEFAULT_TOP = 10
PREVIEW_CHARS = 72


@dataclass(frozen=True, slots=True)
class RecordedPlan:
    plan: Plan
    dry_run: bool
    planned_ms: int


class LastPlans:
    """The last triggered plan per (owner, session), bounded, thread-safe."""

    def __init__(self, capacity: int = REMEMBERED_SESSIONS) -> None:
        self._capacity = capacity
        self._plans: OrderedDict[tuple[str, str], RecordedPlan] = OrderedDict()
        self._lock = threading.Lock()

    def record(self, owner: str, session_id: str, plan: Plan, *, dry_run: bool) -> None:
        """Remember `plan`, unless it decided nothing and the one before it did: a
        repeated or forced pass with nothing left to remove (the gateway runs such
        passes) would hide what the last collection did, and why."""
        key = (owner, session_id)
        with self._lock:
            earlier = self._plans.get(key)
            if earlier is not None and len(earlier.plan.decisions) and not len(plan.decisions):
                self._plans.move_to_end(key)
                return
            self._plans[key] = RecordedPlan(plan, dry_run, int(time.time() * 1000))
            self._plans.move_to_end(key)
            while len(self._plans) > self._capacity:
                self._plans.popitem(last=False)

    def get(self, owner: str, session_id: str) -> RecordedPlan | None:
        with self._lock:
            return self._plans.get((owner, session_id))

    def forget(self, owner: str, session_id: str) -> None:
        with self._lock:
            self._plans.pop((owner, session_id), None)


@dataclass(frozen=True, slots=True)
class KindTokens:
    kind: ChunkKind
    chunk_count: int
    tokens: int
    tokens_after: int


@dataclass(frozen=True, slots=True)
class PlannedChunk:
    chunk_id: str
    kind: ChunkKind
    role: Role
    tokens: int
    tokens_after: int
    action: Action
    reasons: tuple[str, ...]
    stash_id: str
    preview: str


@dataclass(frozen=True, slots=True)
class PlanReport:
    planned_ms: int
    tokens_before: int
    tokens_after: int
    target_tokens: int
    dry_run: bool
    kinds: list[KindTokens]  # largest first
    largest: list[PlannedChunk]  # largest first


def stash_ids_of(recorded: RecordedPlan) -> list[str]:
    """The stash entries holding the originals the plan changed."""
    return [s for s in recorded.plan.decisions.stash_ids if s]


def build_report(
    recorded: RecordedPlan,
    live: Mapping[str, Chunk],
    stashed: Mapping[str, StashEntry],
    top: int = DEFAULT_TOP,
) -> PlanReport:
    """The plan's chunks by kind and the `top` largest, each with its decision.

    `live` holds the session's chunks now (by id), `stashed` the stash entries
    of the plan's originals (by stash id). A kept chunk the session has since
    dropped is left out; a deleted one has no original left (kind UNSPECIFIED).

    >>> from ctxopt.model import Decisions, PlanOutcome
    >>> plan = Plan(kept_ids=["a"], decisions=Decisions(), tokens_before=10, tokens_after=10,
    ...             target_tokens=8, outcome=PlanOutcome.OVER_TARGET, repairs=[])
    >>> chunk = Chunk("a", Role.USER, ChunkKind.MESSAGE, "hello", tokens=10)
    >>> report = build_report(RecordedPlan(plan, False, 0), {"a": chunk}, {})
    >>> [(k.kind.name, k.tokens) for k in report.kinds], report.largest[0].action.name
    ([('MESSAGE', 10)], 'KEEP')
    """
    chunks: list[PlannedChunk] = []
    plan = recorded.plan
    decided = set(plan.decisions.chunk_ids)
    for chunk_id in plan.kept_ids:
        chunk = live.get(chunk_id)
        if chunk is not None and chunk_id not in decided:
            chunks.append(_planned(chunk, chunk.tokens, chunk.tokens, Action.KEEP, (), ""))
    d = plan.decisions
    for i, chunk_id in enumerate(d.chunk_ids):
        entry = stashed.get(d.stash_ids[i])
        original = entry.chunk if entry is not None else live.get(chunk_id)
        if original is None:
            original = Chunk(chunk_id, Role.UNSPECIFIED, ChunkKind.UNSPECIFIED, "")
        action, reasons = d.actions[i], d.reasons[i]
        chunks.append(
            _planned(original, d.tokens[i], d.tokens_after[i], action, reasons, d.stash_ids[i])
        )
    by_kind: dict[ChunkKind, list[int]] = {}
    for c in chunks:
        counts = by_kind.setdefault(c.kind, [0, 0, 0])
        counts[0] += 1
        counts[1] += c.tokens
        counts[2] += c.tokens_after
    kinds = [KindTokens(kind, n, before, after) for kind, (n, before, after) in by_kind.items()]
    kinds.sort(key=lambda k: (-k.tokens, k.kind))
    chunks.sort(key=lambda c: (-c.tokens, c.chunk_id))
    return PlanReport(
        recorded.planned_ms,
        plan.tokens_before,
        plan.tokens_after,
        plan.target_tokens,
        recorded.dry_run,
        kinds,
        chunks[: max(top, 0) or DEFAULT_TOP],
    )


def _planned(
    chunk: Chunk,
    tokens: int,
    tokens_after: int,
    action: Action,
    reasons: tuple[str, ...],
    stash_id: str,
) -> PlannedChunk:
    preview = " ".join(chunk.text.split())
    if len(preview) > PREVIEW_CHARS:
        preview = preview[: PREVIEW_CHARS - 3] + "..."
    return PlannedChunk(
        chunk.id, chunk.kind, chunk.role, tokens, tokens_after, action, reasons, stash_id, preview
    )
