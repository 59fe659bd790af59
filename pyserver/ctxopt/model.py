"""Engine types: chunks, enums, budgets, roots, weights and plans.

Enum values equal the proto numbers of `ctxopt.v1`, so the servicer converts
with a plain `Role(msg.role)`. Everything here is plain data; behaviour lives in
the modules that use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field
from enum import Enum, IntEnum
from typing import NamedTuple, overload


class Role(IntEnum):
    UNSPECIFIED = 0
    SYSTEM = 1
    USER = 2
    MODEL = 3
    TOOL = 4


class ChunkKind(IntEnum):
    UNSPECIFIED = 0
    MESSAGE = 1
    CODE = 2
    LOG = 3
    NOTE = 4
    DECISION = 5
    SUMMARY = 6
    TOOL_CALL = 7
    TOOL_RESULT = 8
    SYSTEM = 9
    ENRICHMENT = 10
    TOOL_SCHEMA = 11
    MEMORY = 12


class GcPolicy(IntEnum):
    UNSPECIFIED = 0
    LOCKED = 1
    PRESERVABLE = 2
    PARTIAL = 3
    EPHEMERAL = 4


class Action(IntEnum):
    UNSPECIFIED = 0
    KEEP = 1
    TRIM = 2
    MASK = 3
    STASH = 4
    DELETE = 5


class Strategy(IntEnum):
    UNSPECIFIED = 0
    HYBRID = 1
    BUDGET = 2
    TRUNCATE = 3


class UpsertStatus(IntEnum):
    UNSPECIFIED = 0
    ADDED = 1
    UNCHANGED = 2
    UPDATED = 3


# The one policy table: what an unspecified policy becomes, by kind.
# System instruction and tool schemas are the frame of every prompt; decisions,
# summaries, memory and notes carry state later turns rely on; enrichment and
# logs can be recomputed or re-read; everything else is ordinary history.
POLICY_BY_KIND: dict[ChunkKind, GcPolicy] = {
    ChunkKind.SYSTEM: GcPolicy.LOCKED,
    ChunkKind.TOOL_SCHEMA: GcPolicy.LOCKED,
    ChunkKind.DECISION: GcPolicy.PRESERVABLE,
    ChunkKind.SUMMARY: GcPolicy.PRESERVABLE,
    ChunkKind.MEMORY: GcPolicy.PRESERVABLE,
    ChunkKind.NOTE: GcPolicy.PRESERVABLE,
    ChunkKind.ENRICHMENT: GcPolicy.EPHEMERAL,
    ChunkKind.LOG: GcPolicy.EPHEMERAL,
    ChunkKind.MESSAGE: GcPolicy.PARTIAL,
    ChunkKind.CODE: GcPolicy.PARTIAL,
    ChunkKind.TOOL_CALL: GcPolicy.PARTIAL,
    ChunkKind.TOOL_RESULT: GcPolicy.PARTIAL,
    ChunkKind.UNSPECIFIED: GcPolicy.PARTIAL,
}


def effective_policy(policy: GcPolicy, kind: ChunkKind, role: Role) -> GcPolicy:
    """The policy a chunk runs under: its own, else the table's, with the
    system role always LOCKED (a system instruction is never pruned)."""
    if policy != GcPolicy.UNSPECIFIED:
        return policy
    if role == Role.SYSTEM:
        return GcPolicy.LOCKED
    return POLICY_BY_KIND[kind]


@dataclass(slots=True)
class Chunk:
    """One piece of conversation history, as a client sends it (the proto's `Chunk`)."""

    id: str
    role: Role
    kind: ChunkKind
    text: str
    tokens: int = 0
    created_at_ms: int = 0
    turn: int = 0
    pinned: bool = False
    policy: GcPolicy = GcPolicy.UNSPECIFIED
    group_id: str = ""
    parent_id: str = ""
    references: tuple[str, ...] = ()
    file_path: str = ""
    line_start: int = 0
    line_end: int = 0
    tags: tuple[str, ...] = ()
    topic_id: str = ""
    task_id: str = ""
    boost: float = 0.0
    embedding: tuple[float, ...] = ()
    summary_of: tuple[str, ...] = ()
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def gc_policy(self) -> GcPolicy:
        return effective_policy(self.policy, self.kind, self.role)


# The one home of the GC defaults (`Config` and every front read these): collect
# at 80% of the window and land at 60%, so the 20-point gap lets the calls
# between two collections reuse the prompt's cached prefix; remove PRESERVABLE
# chunks only above 90%.
DEFAULT_THRESHOLD_PERCENT = 80.0
DEFAULT_TARGET_PERCENT = 60.0
DEFAULT_PRESSURE_PERCENT = 90.0


@dataclass(frozen=True, slots=True)
class Budget:
    """Token budget; percentages are of `context_limit_tokens`."""

    context_limit_tokens: int
    _: KW_ONLY  # four numbers side by side read wrong: the rest by name
    threshold_percent: float = DEFAULT_THRESHOLD_PERCENT
    target_percent: float = DEFAULT_TARGET_PERCENT
    pressure_percent: float = DEFAULT_PRESSURE_PERCENT
    target_tokens: int = 0

    @property
    def target(self) -> int:
        if self.target_tokens > 0:
            return self.target_tokens
        return int(self.context_limit_tokens * self.target_percent / 100.0)

    @property
    def threshold(self) -> int:
        return int(self.context_limit_tokens * self.threshold_percent / 100.0)

    @property
    def pressure(self) -> int:
        return int(self.context_limit_tokens * self.pressure_percent / 100.0)


DEFAULT_RECENT_TURNS = 10


@dataclass(frozen=True, slots=True)
class Roots:
    """What must survive: the current task, the active file, the latest
    `recent_turns` turns and the chunks named in `root_ids`."""

    current_task_id: str = ""
    active_file_path: str = ""
    recent_turns: int = DEFAULT_RECENT_TURNS
    root_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Weights:
    """Hybrid score weights. The four relevance weights are renormalised to sum
    to 1 over the signals present; `gc` is added on top."""

    bm25: float = 0.4
    recency: float = 0.15
    gc: float = 0.2
    embedding: float = 0.4
    boost: float = 0.05


class Breakdown(NamedTuple):
    """A chunk's score components (a tuple: plans build one per decision)."""

    bm25: float = 0.0
    recency: float = 0.0
    gc: float = 0.0
    embedding: float = 0.0
    boost: float = 0.0
    reachable: bool = False
    root: bool = False
    total: float = 0.0


@dataclass(frozen=True, slots=True)
class Decision:
    """What the plan does with one chunk that is not kept as is."""

    chunk_id: str
    action: Action
    tokens: int
    tokens_after: int
    score: float
    breakdown: Breakdown | None  # None when the caller asked for a lean plan
    reasons: tuple[str, ...]
    replacement_text: str = ""
    stash_id: str = ""


@dataclass(frozen=True, slots=True)
class Repair:
    """A coherence fix: which rule, for which chunk, and why."""

    rule: str
    chunk_id: str
    detail: str


@dataclass(slots=True, kw_only=True)
class Decisions(Sequence[Decision]):
    """A plan's decisions as columns, one list per `Decision` field, in prompt
    order. Writers of responses read the columns; a `Decision` object is built
    only when one is read by index or iteration."""

    chunk_ids: list[str] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    tokens_after: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    breakdowns: list[Breakdown] | None = None  # None for a lean plan
    reasons: list[tuple[str, ...]] = field(default_factory=list)
    replacement_texts: list[str] = field(default_factory=list)
    stash_ids: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, rows: Sequence[Decision]) -> Decisions:
        """The columns of these decisions (all with breakdowns, or none)."""
        with_breakdowns = all(d.breakdown is not None for d in rows)
        return cls(
            chunk_ids=[d.chunk_id for d in rows],
            actions=[d.action for d in rows],
            tokens=[d.tokens for d in rows],
            tokens_after=[d.tokens_after for d in rows],
            scores=[d.score for d in rows],
            breakdowns=[d.breakdown for d in rows if d.breakdown is not None]
            if with_breakdowns
            else None,
            reasons=[d.reasons for d in rows],
            replacement_texts=[d.replacement_text for d in rows],
            stash_ids=[d.stash_id for d in rows],
        )

    def __len__(self) -> int:
        return len(self.chunk_ids)

    @overload
    def __getitem__(self, i: int) -> Decision: ...
    @overload
    def __getitem__(self, i: slice) -> list[Decision]: ...
    def __getitem__(self, i: int | slice) -> Decision | list[Decision]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return Decision(
            self.chunk_ids[i],
            self.actions[i],
            self.tokens[i],
            self.tokens_after[i],
            self.scores[i],
            None if self.breakdowns is None else self.breakdowns[i],
            self.reasons[i],
            self.replacement_texts[i],
            self.stash_ids[i],
        )


class PlanOutcome(Enum):
    """How a plan ended (the wire's `triggered` and `feasible`, which travel together)."""

    IDLE = "idle"  # below the threshold and not forced: the session as it is
    LANDED = "landed"  # collected to at or under the target (and `max_chunks`)
    OVER_TARGET = "over_target"  # collected, but above the target or `max_chunks`: see why

    @property
    def triggered(self) -> bool:
        return self is not PlanOutcome.IDLE

    @property
    def feasible(self) -> bool:
        return self is not PlanOutcome.OVER_TARGET


@dataclass(slots=True, kw_only=True)
class Plan:
    """The result of `optimize` (mirrors `OptimizeResponse`; built by
    `ctxopt.planner.result`)."""

    kept_ids: list[str]
    decisions: Decisions
    tokens_before: int
    tokens_after: int
    target_tokens: int
    outcome: PlanOutcome
    repairs: list[Repair]
    server_ms: float = 0.0
    explanation: str = ""
    mandatory_tokens: int = 0

    @property
    def triggered(self) -> bool:
        """A collection ran (the wire's `triggered`)."""
        return self.outcome.triggered

    @property
    def feasible(self) -> bool:
        """The plan reached its target and `max_chunks` (the wire's `feasible`)."""
        return self.outcome.feasible


@dataclass(frozen=True, slots=True)
class OptimizeOptions:
    """Everything `optimize` needs besides the chunks (mirrors OptimizeRequest)."""

    budget: Budget
    query: str = ""
    query_embedding: tuple[float, ...] = ()
    roots: Roots = Roots()
    weights: Weights = Weights()
    strategy: Strategy = Strategy.HYBRID
    dry_run: bool = False
    aggressive: bool = False
    force: bool = False
    delete_ids: tuple[str, ...] = ()
    max_chunks: int = 0
    incremental: bool = False
    # most removal steps of an incremental collection; 0: the server's default
    incremental_batch: int = 0
    # decisions without score breakdowns (hot paths that apply, not explain)
    lean: bool = False


@dataclass(frozen=True, slots=True)
class ChunkUpdate:
    """A change to one chunk; None (or UNSPECIFIED) leaves a field as it is."""

    id: str
    pinned: bool | None = None
    policy: GcPolicy = GcPolicy.UNSPECIFIED
    touch: bool = False
    references: tuple[str, ...] | None = None
    boost: float | None = None


@dataclass(frozen=True, slots=True)
class ChunkTokens:
    id: str
    tokens: int
    status: UpsertStatus


@dataclass(frozen=True, slots=True)
class AppendResult:
    chunks: list[ChunkTokens]
    session_tokens: int
    session_chunks: int


@dataclass(frozen=True, slots=True)
class ChunkScore:
    chunk_id: str
    tokens: int
    breakdown: Breakdown


@dataclass(frozen=True, slots=True)
class StashFilter:
    kinds: tuple[ChunkKind, ...] = ()
    tags: tuple[str, ...] = ()
    file_path: str = ""
    task_id: str = ""
    from_ms: int = 0
    to_ms: int = 0


@dataclass(frozen=True, slots=True)
class StashHit:
    stash_id: str
    chunk_id: str
    session_id: str
    kind: ChunkKind
    score: float
    snippet: str
    tokens: int
    action: Action
    stashed_at_ms: int


@dataclass(frozen=True, slots=True)
class SessionStats:
    chunk_count: int
    tokens: int
    stashed_count: int
    stashed_tokens: int
    collections: int
    tokens_by_policy: dict[str, int]
    old_generation_chunks: int
