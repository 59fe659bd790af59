"""The MCP tools' inputs and results: their JSON schemas are what agents see.

Only shapes and descriptions live here: every rule on a value (ranges,
limits, known ids) is the engine's or `validate`'s, so a refusal reads the
same through MCP and gRPC.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from ctxopt.model import Budget, Weights

DEFAULT_SESSION = "default"
# the wire's int32 (chunks go through the gRPC conversion, `tools.chunk_of`)
Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
RoleName = Literal["system", "user", "model", "tool"]
KindName = Literal[
    "message",
    "code",
    "log",
    "note",
    "decision",
    "summary",
    "tool_call",
    "tool_result",
    "system",
    "enrichment",
    "tool_schema",
    "memory",
]
PruneStrategy = Literal["delete", "stash", "auto"]
PolicyName = Literal["auto", "locked", "preservable", "partial", "ephemeral"]
ActionName = Literal["trim", "mask", "stash", "delete"]
Query = Annotated[str, Field(description="the current task or question; relevance is scored on it")]
SessionId = Annotated[str, Field(description="the conversation; one per agent session")]


class ChunkIn(BaseModel):
    """One piece of the agent's context."""

    model_config = ConfigDict(extra="forbid")

    id: str
    text: str
    role: RoleName = "user"
    kind: KindName = "message"
    tokens: Int32 = Field(default=0, description="0: the server counts")
    turn: Int32 = 0
    pinned: bool = False
    policy: PolicyName = Field(default="auto", description="auto: derived from kind and role")
    group_id: str = Field(default="", description="a tool call and its result share one")
    parent_id: str = ""
    references: list[str] = []
    file_path: str = ""
    tags: list[str] = []
    task_id: str = ""
    boost: float = 0.0


class GcSettings(BaseModel):
    """Defaults of this process's analyze, prune and restore calls (context_gc_configure
    describes each)."""

    context_limit_tokens: int
    threshold_percent: float
    target_percent: float
    pressure_percent: float
    recent_turns: int
    batch_size: int
    weight_bm25: float
    weight_recency: float
    weight_gc: float
    weight_boost: float

    def budget(self) -> Budget:
        return Budget(
            context_limit_tokens=self.context_limit_tokens,
            threshold_percent=self.threshold_percent,
            target_percent=self.target_percent,
            pressure_percent=self.pressure_percent,
        )

    def weights(self) -> Weights:
        return Weights(
            bm25=self.weight_bm25,
            recency=self.weight_recency,
            gc=self.weight_gc,
            boost=self.weight_boost,
        )


class Usage(BaseModel):
    current_tokens: int
    soft_limit_tokens: int = Field(description="collection triggers here (threshold)")
    hard_limit_tokens: int = Field(description="the context window")
    target_tokens: int = Field(description="a collection lands here")
    percent_of_limit: float


class ChangeOut(BaseModel):
    """One chunk a collection changes, as an agent reads it."""

    id: str
    action: ActionName = Field(description="what the collection does with it")
    tokens: int
    tokens_after: int = Field(description="0 unless trimmed or masked")
    score: float = Field(description="hybrid value: higher is kept first")
    reasons: list[str]


class Candidate(ChangeOut):
    kind: KindName


class Analysis(BaseModel):
    usage: Usage
    would_trigger: bool = Field(description="current tokens reached the soft limit")
    tokens_after: int = Field(description="what context_gc_prune strategy=auto would leave")
    feasible: bool = Field(description="false: protected chunks alone exceed the target")
    explanation: str
    candidates: list[Candidate] = Field(description="what auto would change, in removal order")


class PruneResult(BaseModel):
    strategy: PruneStrategy
    stashed: list[str] = Field(description="restorable with context_stash_restore")
    deleted: list[str]
    trimmed_or_masked: list[str] = Field(description="shortened in place, originals stashed")
    tokens_before: int
    tokens_after: int
    tokens_saved: int
    changes: list[ChangeOut] = Field(
        description="auto: every change with its score and reasons; empty for explicit ids"
    )
    explanation: str


class PinResult(BaseModel):
    ids: list[str]
    pinned: bool


class AppendSummary(BaseModel):
    """How many chunks an append added, changed or found unchanged (statuses counted)."""

    added: int
    updated: int
    unchanged: int
    session_tokens: int
    session_chunks: int


class StashHitOut(BaseModel):
    chunk_id: str
    session_id: str = Field(description="restore it with this session_id")
    stash_id: str
    kind: KindName
    action: str = Field(description="how it left the context: trim, mask, stash")
    tokens: int
    score: float
    snippet: str


class SearchResult(BaseModel):
    hits: list[StashHitOut]
    next_offset: int | None = Field(description="pass as offset for the next page")


class RestoreResult(BaseModel):
    restored: list[str] = Field(description="the ids and the rest of their groups")
    session_tokens: int
    originals: dict[str, str] = Field(description="each restored id's text, byte for byte")
