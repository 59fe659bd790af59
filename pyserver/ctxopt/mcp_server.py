"""MCP front end: the engine's garbage collector as tools an agent can call.

`ctxopt mcp` serves these over stdio with the official SDK. The tools are thin
adapters over the same Engine and store the gRPC server uses; the only state
of their own is the GC settings `context_gc_configure` changes (the defaults
of later analyze, prune and restore calls in this process).

Safety: removal stashes unless the agent asks for deletion, and LOCKED or
pinned chunks are refused with a tool error that names them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.errors import CtxoptError
from ctxopt.model import (
    DEFAULT_RECENT_TURNS,
    Budget,
    Chunk,
    ChunkKind,
    ChunkUpdate,
    GcPolicy,
    OptimizeOptions,
    Plan,
    Role,
    Roots,
    StashFilter,
    Weights,
)

T = TypeVar("T")
OWNER = ""  # one agent per stdio process: every session is its own
DEFAULT_SESSION = "default"
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


# ---- tool inputs and results (their JSON schemas are what agents see) ---------


class ChunkIn(BaseModel):
    """One piece of the agent's context."""

    id: str
    text: str
    role: RoleName = "user"
    kind: KindName = "message"
    turn: int = 0
    pinned: bool = False
    policy: PolicyName = Field(default="auto", description="auto: derived from kind and role")
    group_id: str = Field(default="", description="a tool call and its result share one")
    parent_id: str = ""
    references: list[str] = []
    file_path: str = ""
    tags: list[str] = []
    task_id: str = ""


class Usage(BaseModel):
    current_tokens: int
    soft_limit_tokens: int = Field(description="collection triggers here (threshold)")
    hard_limit_tokens: int = Field(description="the context window")
    target_tokens: int = Field(description="a collection lands here")


class Candidate(BaseModel):
    id: str
    kind: KindName
    tokens: int
    score: float
    action: str = Field(description="what a collection would do: trim, mask, stash or delete")
    reasons: list[str]


class Analysis(BaseModel):
    usage: Usage
    would_trigger: bool
    tokens_after: int
    candidates: list[Candidate]


class PruneResult(BaseModel):
    strategy: str
    stashed: list[str]
    deleted: list[str]
    trimmed_or_masked: list[str]
    tokens_before: int
    tokens_after: int
    tokens_saved: int


class AppendResult(BaseModel):
    added: int
    updated: int
    unchanged: int
    session_tokens: int
    session_chunks: int


class StashHitOut(BaseModel):
    chunk_id: str
    stash_id: str
    kind: KindName
    tokens: int
    score: float
    snippet: str


class SearchResult(BaseModel):
    hits: list[StashHitOut]
    next_offset: int | None


class RestoreResult(BaseModel):
    restored: list[str]
    session_tokens: int


_WEIGHTS = Weights()


class GcSettings(BaseModel):
    """Defaults of this process's analyze, prune and restore calls."""

    context_limit_tokens: int = Field(default=128_000, gt=0)
    threshold_percent: float = Field(default=80.0, gt=0, le=100)
    target_percent: float = Field(default=60.0, gt=0, le=100)
    pressure_percent: float = Field(default=90.0, gt=0, le=100)
    recent_turns: int = Field(default=DEFAULT_RECENT_TURNS, ge=0)
    batch_size: int = Field(
        default=64, ge=0, description="removal steps per incremental collection"
    )
    weight_bm25: float = Field(default=_WEIGHTS.bm25, ge=0)
    weight_recency: float = Field(default=_WEIGHTS.recency, ge=0)
    weight_gc: float = Field(default=_WEIGHTS.gc, ge=0)


# ---- the adapters ---------------------------------------------------------


@dataclass
class ContextTools:
    engine: Engine
    settings: GcSettings

    def budget(self) -> Budget:
        s = self.settings
        return Budget(
            s.context_limit_tokens, s.threshold_percent, s.target_percent, s.pressure_percent
        )

    def options(self, query: str, *, dry_run: bool) -> OptimizeOptions:
        s = self.settings
        return OptimizeOptions(
            budget=self.budget(),
            query=query,
            roots=Roots(recent_turns=s.recent_turns),
            weights=Weights(bm25=s.weight_bm25, recency=s.weight_recency, gc=s.weight_gc),
            dry_run=dry_run,
            force=True,
        )

    def append(self, session_id: str, chunks: list[ChunkIn]) -> AppendResult:
        result = self.engine.append(OWNER, session_id, [_chunk(c) for c in chunks])
        statuses = [c.status.name for c in result.chunks]
        return AppendResult(
            added=statuses.count("ADDED"),
            updated=statuses.count("UPDATED"),
            unchanged=statuses.count("UNCHANGED"),
            session_tokens=result.session_tokens,
            session_chunks=result.session_chunks,
        )

    def analyze(self, session_id: str, query: str) -> Analysis:
        plan = self.engine.optimize(OWNER, session_id, self.options(query, dry_run=True))
        kinds = self._kinds(session_id, [d.chunk_id for d in plan.decisions])
        budget = self.budget()
        return Analysis(
            usage=Usage(
                current_tokens=plan.tokens_before,
                soft_limit_tokens=budget.threshold,
                hard_limit_tokens=budget.context_limit_tokens,
                target_tokens=budget.target,
            ),
            would_trigger=plan.tokens_before >= budget.threshold,
            tokens_after=plan.tokens_after,
            candidates=[
                Candidate(
                    id=d.chunk_id,
                    kind=kinds[d.chunk_id],
                    tokens=d.tokens,
                    score=round(d.score, 4),
                    action=d.action.name.lower(),
                    reasons=list(d.reasons),
                )
                for d in plan.decisions
            ],
        )

    def prune(
        self,
        session_id: str,
        ids: list[str],
        strategy: Literal["delete", "stash", "auto"],
        query: str,
    ) -> PruneResult:
        before = self.engine.stats(OWNER, session_id).tokens
        if strategy == "auto":
            batch = self.settings.batch_size
            self.engine.config = replace(self.engine.config, incremental_batch=batch)
            options = replace(self.options(query, dry_run=False), incremental=batch > 0)
            return _prune_result(strategy, self.engine.optimize(OWNER, session_id, options))
        if not ids:
            raise ToolError("ids: give the chunk ids to prune (or strategy 'auto')")
        protected = [
            f"{c.id} ({'pinned' if c.pinned else 'LOCKED'})"
            for c in self.engine.chunks(OWNER, session_id, ids)
            if c.pinned or c.gc_policy == GcPolicy.LOCKED
        ]
        if protected:
            raise ToolError(
                f"ids: refused, protected chunks: {', '.join(protected)} "
                "(LOCKED chunks are never pruned; pinned ones after context_gc_unpin)"
            )
        _, after = self.engine.remove(OWNER, session_id, ids, stash=strategy == "stash")
        stashed, deleted = (ids, []) if strategy == "stash" else ([], ids)
        return PruneResult(
            strategy=strategy,
            stashed=stashed,
            deleted=deleted,
            trimmed_or_masked=[],
            tokens_before=before,
            tokens_after=after,
            tokens_saved=before - after,
        )

    def pin(self, session_id: str, ids: list[str], pinned: bool) -> int:
        updates = [ChunkUpdate(id=i, pinned=pinned) for i in ids]
        return self.engine.update(OWNER, session_id, updates)

    def search(
        self, session_id: str, query: str, kinds: list[KindName], limit: int, offset: int
    ) -> SearchResult:
        filters = StashFilter(kinds=tuple(ChunkKind[k.upper()] for k in kinds))
        hits, next_offset = self.engine.search_stash(
            OWNER, session_id, query, filters, limit, offset
        )
        return SearchResult(
            hits=[
                StashHitOut(
                    chunk_id=h.chunk_id,
                    stash_id=h.stash_id,
                    kind=_kind_name(h.kind),
                    tokens=h.tokens,
                    score=round(h.score, 4),
                    snippet=h.snippet,
                )
                for h in hits
            ],
            next_offset=next_offset,
        )

    def restore(self, session_id: str, ids: list[str], force: bool) -> RestoreResult:
        restored, tokens = self.engine.restore(OWNER, session_id, ids, self.budget(), force)
        return RestoreResult(restored=restored, session_tokens=tokens)

    def _kinds(self, session_id: str, ids: list[str]) -> dict[str, KindName]:
        if not ids:
            return {}
        return {c.id: _kind_name(c.kind) for c in self.engine.chunks(OWNER, session_id, ids)}


def _chunk(c: ChunkIn) -> Chunk:
    return Chunk(
        id=c.id,
        role=Role[c.role.upper()],
        kind=ChunkKind[c.kind.upper()],
        text=c.text,
        turn=c.turn,
        pinned=c.pinned,
        policy=GcPolicy.UNSPECIFIED if c.policy == "auto" else GcPolicy[c.policy.upper()],
        group_id=c.group_id,
        parent_id=c.parent_id,
        references=tuple(c.references),
        file_path=c.file_path,
        tags=tuple(c.tags),
        task_id=c.task_id,
    )


def _kind_name(kind: ChunkKind) -> KindName:
    return kind.name.lower()  # type: ignore[return-value]  # KindName lists every kind


def _prune_result(strategy: str, plan: Plan) -> PruneResult:
    def ids(*actions: str) -> list[str]:
        return [d.chunk_id for d in plan.decisions if d.action.name in actions]

    return PruneResult(
        strategy=strategy,
        stashed=ids("STASH"),
        deleted=ids("DELETE"),
        trimmed_or_masked=ids("TRIM", "MASK"),
        tokens_before=plan.tokens_before,
        tokens_after=plan.tokens_after,
        tokens_saved=plan.tokens_before - plan.tokens_after,
    )


# ---- the MCP server ---------------------------------------------------------


def build_server(tools: ContextTools) -> MCPServer:
    server: MCPServer = MCPServer(
        "ctxopt",
        instructions=(
            "Context garbage collection. Register what is in your context with "
            "context_append, look with context_gc_analyze before pruning, and find "
            "stashed content again with context_stash_search / context_stash_restore."
        ),
    )

    def guarded(call: Callable[[], T]) -> T:
        try:
            return call()
        except CtxoptError as e:
            raise ToolError(str(e)) from None

    @server.tool()
    def context_append(chunks: list[ChunkIn], session_id: str = DEFAULT_SESSION) -> AppendResult:
        """Register chunks of the agent's context (upsert by id)."""
        return guarded(lambda: tools.append(session_id, chunks))

    @server.tool()
    def context_gc_analyze(query: str = "", session_id: str = DEFAULT_SESSION) -> Analysis:
        """Usage against the limits and what a collection would remove, with
        scores and reasons; changes nothing."""
        return guarded(lambda: tools.analyze(session_id, query))

    @server.tool()
    def context_gc_prune(
        ids: list[str] | None = None,
        strategy: PruneStrategy = "stash",
        query: str = "",
        session_id: str = DEFAULT_SESSION,
    ) -> PruneResult:
        """Remove chunks: `stash` (default, restorable) or `delete` the given ids,
        or `auto`: run a collection to the target. LOCKED and pinned chunks are refused."""
        return guarded(lambda: tools.prune(session_id, ids or [], strategy, query))

    @server.tool()
    def context_gc_pin(ids: list[str], session_id: str = DEFAULT_SESSION) -> int:
        """Pin chunks: no collection touches them. Returns how many changed."""
        return guarded(lambda: tools.pin(session_id, ids, True))

    @server.tool()
    def context_gc_unpin(ids: list[str], session_id: str = DEFAULT_SESSION) -> int:
        """Unpin chunks. Returns how many changed."""
        return guarded(lambda: tools.pin(session_id, ids, False))

    @server.tool()
    def context_gc_configure(settings: GcSettings) -> GcSettings:
        """Set the limits, thresholds, recency window, batch size and weights
        later calls use; returns the settings now in force."""
        if settings.target_percent > settings.threshold_percent:
            raise ToolError("target_percent: must not exceed threshold_percent")
        tools.settings = settings
        return settings

    @server.tool()
    def context_stash_search(
        query: str = "",
        kinds: list[KindName] | None = None,
        limit: int = 10,
        offset: int = 0,
        session_id: str = DEFAULT_SESSION,
    ) -> SearchResult:
        """Full-text search of what was stashed, best first, with snippets."""
        return guarded(lambda: tools.search(session_id, query, kinds or [], limit, offset))

    @server.tool()
    def context_stash_restore(
        ids: list[str], force: bool = False, session_id: str = DEFAULT_SESSION
    ) -> RestoreResult:
        """Bring stashed chunks (and their groups) back; refused when that would
        pass the target unless `force`."""
        return guarded(lambda: tools.restore(session_id, ids, force))

    return server


def serve_stdio(config: Config) -> None:
    """Run over stdin/stdout until the host closes the stream; flush the store."""
    engine = Engine(config)
    try:
        settings = GcSettings(
            threshold_percent=config.gc_threshold_percent,
            target_percent=config.gc_target_percent,
            pressure_percent=config.gc_pressure_percent,
            batch_size=config.incremental_batch,
        )
        build_server(ContextTools(engine, settings)).run("stdio")
    finally:
        engine.close()
