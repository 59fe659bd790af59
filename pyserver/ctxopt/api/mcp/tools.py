"""The MCP tools as plain methods over the engine: translate, call, translate back.

The only state of their own is the GC settings `context_gc_configure`
changes (the defaults of later analyze, prune and restore calls in this
process). Every rule is the engine's or `validate`'s.

Safety: removal stashes unless the agent asks for deletion, and LOCKED or
pinned chunks are refused with a tool error that names them. The SDK runs
tool calls concurrently, so one lock serialises them: a refusal check and the
removal it guards see the same session.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from mcp.server.mcpserver.exceptions import ToolError

from ctxopt import validate
from ctxopt.api.grpc.convert import chunk_from_pb
from ctxopt.api.mcp.schemas import (
    ActionName,
    Analysis,
    AppendSummary,
    Candidate,
    ChangeOut,
    ChunkIn,
    GcSettings,
    KindName,
    PinResult,
    PruneResult,
    PruneStrategy,
    RestoreResult,
    SearchResult,
    StashHitOut,
    Usage,
)
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.errors import CtxoptError, NotFound
from ctxopt.model import (
    DEFAULT_RECENT_TURNS,
    Chunk,
    ChunkKind,
    ChunkUpdate,
    Decision,
    OptimizeOptions,
    Plan,
    Roots,
    StashFilter,
    Weights,
)
from ctxopt.planner.result import idle_result
from ctxopt.usage.log import UsageLog
from ctxopt.v1 import ctxopt_pb2 as pb

T = TypeVar("T")
OWNER = ""  # one agent per stdio process: every session is its own
DEFAULT_CONTEXT_LIMIT = 128_000


@dataclass
class ContextTools:
    """The tools over one engine, with the GC settings they share and the
    lock that serialises their calls."""

    engine: Engine
    settings: GcSettings
    usage: UsageLog  # `prune auto` leaves a row, as a gRPC Optimize does
    lock: threading.Lock = field(default_factory=threading.Lock)

    def call(self, action: Callable[[], T]) -> T:
        """One tool call at a time; engine errors become tool errors naming the field."""
        with self.lock:
            try:
                return action()
            except CtxoptError as e:
                raise ToolError(str(e)) from None

    def close(self) -> None:
        """Close the ledger, then the store, after the running tool call (stdio: the
        tools own both; over HTTP the gRPC server closes them)."""
        with self.lock:
            self.usage.close()
            self.engine.close()

    def configure(self, changes: dict[str, float | int]) -> GcSettings:
        settings = self.settings.model_copy(update=changes)
        validate.validate_budget(settings.budget(), "settings")
        validate.validate_roots(Roots(recent_turns=settings.recent_turns), "settings")
        validate.validate_weights(settings.weights(), "settings.weight", "_")
        validate.validate_incremental_batch(settings.batch_size, "settings.batch_size")
        self.settings = settings
        return settings

    def collection(self, query: str, *, dry_run: bool) -> OptimizeOptions:
        """A forced collection to the target: what analyze shows is what auto does."""
        s = self.settings
        return OptimizeOptions(
            budget=s.budget(),
            query=query,
            roots=Roots(recent_turns=s.recent_turns),
            weights=s.weights(),
            dry_run=dry_run,
            force=True,
            incremental=s.batch_size > 0,
            incremental_batch=s.batch_size,
        )

    def append(self, session_id: str, chunks: list[ChunkIn]) -> AppendSummary:
        converted = [chunk_of(c, f"chunks[{i}]") for i, c in enumerate(chunks)]
        result = self.engine.append(OWNER, session_id, converted)
        statuses = [c.status.name for c in result.chunks]
        return AppendSummary(
            added=statuses.count("ADDED"),
            updated=statuses.count("UPDATED"),
            unchanged=statuses.count("UNCHANGED"),
            session_tokens=result.session_tokens,
            session_chunks=result.session_chunks,
        )

    def analyze(self, session_id: str, query: str) -> Analysis:
        """An agent's first call may come before anything is registered: a session
        that does not exist yet is an empty one."""
        options = self.collection(query, dry_run=True)
        try:
            plan = self.engine.optimize(OWNER, session_id, options)
        except NotFound as e:
            if e.field != "session_id":
                raise
            plan = idle_result(
                kept_ids=[], tokens=0, target_tokens=options.budget.target, mandatory_tokens=0
            )
        budget = self.settings.budget()
        return Analysis(
            usage=Usage(
                current_tokens=plan.tokens_before,
                soft_limit_tokens=budget.threshold,
                hard_limit_tokens=budget.context_limit_tokens,
                target_tokens=budget.target,
                percent_of_limit=round(100 * plan.tokens_before / budget.context_limit_tokens, 2),
            ),
            would_trigger=plan.tokens_before >= budget.threshold,
            tokens_after=plan.tokens_after,
            feasible=plan.feasible,
            explanation=plan.explanation,
            candidates=self._candidates(session_id, plan.decisions),
        )

    def prune(
        self, session_id: str, ids: list[str], strategy: PruneStrategy, query: str
    ) -> PruneResult:
        if strategy == "auto":
            if ids:
                raise ToolError("ids: strategy 'auto' chooses the chunks itself; give no ids")
            options = self.collection(query, dry_run=False)
            plan = self.engine.optimize(OWNER, session_id, options)
            self.usage.record_plan(OWNER, session_id, plan, front="mcp")
            return _auto_result(plan)
        if not ids:
            raise ToolError("ids: give the chunk ids to prune (or strategy 'auto')")
        before = self.engine.stats(OWNER, session_id).tokens
        _, after = self.engine.prune(
            OWNER,
            session_id,
            ids,
            stash_originals=strategy == "stash",
            roots=Roots(recent_turns=self.settings.recent_turns),
        )
        return PruneResult(
            strategy=strategy,
            stashed=ids if strategy == "stash" else [],
            deleted=ids if strategy == "delete" else [],
            trimmed_or_masked=[],
            tokens_before=before,
            tokens_after=after,
            tokens_saved=before - after,
            changes=[],
            explanation=f"{len(ids)} chunks removed as asked"
            + (", restorable from the stash" if strategy == "stash" else ", for good"),
        )

    def pin(self, session_id: str, ids: list[str], *, pinned: bool) -> PinResult:
        self.engine.update(OWNER, session_id, [ChunkUpdate(id=i, pinned=pinned) for i in ids])
        return PinResult(ids=ids, pinned=pinned)

    def search(
        self, session_id: str, query: str, filters: StashFilter, limit: int, offset: int
    ) -> SearchResult:
        validate.validate_search(limit, offset, offset_field="offset")
        hits, next_offset = self.engine.search_stash(
            OWNER, session_id, query, filters, limit, offset
        )
        return SearchResult(
            hits=[
                StashHitOut(
                    chunk_id=h.chunk_id,
                    session_id=h.session_id,
                    stash_id=h.stash_id,
                    kind=_kind_name(h.kind),
                    action=h.action.name.lower(),
                    tokens=h.tokens,
                    score=round(h.score, 4),
                    snippet=h.snippet,
                )
                for h in hits
            ],
            next_offset=next_offset,
        )

    def restore(self, session_id: str, ids: list[str], *, force: bool) -> RestoreResult:
        budget = self.settings.budget()
        restored, tokens = self.engine.restore(OWNER, session_id, ids, budget=budget, force=force)
        back = self.engine.chunks(OWNER, session_id, restored)
        return RestoreResult(
            restored=restored, session_tokens=tokens, originals={c.id: c.text for c in back}
        )

    def _candidates(self, session_id: str, decisions: Sequence[Decision]) -> list[Candidate]:
        ids = [d.chunk_id for d in decisions]
        chunks = self.engine.chunks(OWNER, session_id, ids) if ids else []
        kinds = {c.id: _kind_name(c.kind) for c in chunks}
        return [Candidate(**_change(d).model_dump(), kind=kinds[d.chunk_id]) for d in decisions]


def chunk_of(c: ChunkIn, field: str) -> Chunk:
    """A tool's chunk through the one conversion gRPC uses (`convert.chunk_from_pb`)."""
    msg = pb.Chunk(
        id=c.id,
        role=f"ROLE_{c.role.upper()}",
        kind=f"CHUNK_KIND_{c.kind.upper()}",
        text=c.text,
        tokens=c.tokens,
        turn=c.turn,
        pinned=c.pinned,
        policy="GC_POLICY_UNSPECIFIED" if c.policy == "auto" else f"GC_POLICY_{c.policy.upper()}",
        group_id=c.group_id,
        parent_id=c.parent_id,
        references=c.references,
        file_path=c.file_path,
        tags=c.tags,
        task_id=c.task_id,
        boost=c.boost,
    )
    return chunk_from_pb(msg, field)


def _kind_name(kind: ChunkKind) -> KindName:
    return kind.name.lower()  # type: ignore[return-value]  # KindName lists every kind


def _change(decision: Decision) -> ChangeOut:
    return ChangeOut(
        id=decision.chunk_id,
        action=decision.action.name.lower(),  # type: ignore[arg-type]  # plans never list KEEP
        tokens=decision.tokens,
        tokens_after=decision.tokens_after,
        score=round(decision.score, 4),
        reasons=list(decision.reasons),
    )


def _auto_result(plan: Plan) -> PruneResult:
    changes = [_change(d) for d in plan.decisions]

    def ids(*actions: ActionName) -> list[str]:
        return [c.id for c in changes if c.action in actions]

    return PruneResult(
        strategy="auto",
        stashed=ids("stash"),
        deleted=ids("delete"),
        trimmed_or_masked=ids("trim", "mask"),
        tokens_before=plan.tokens_before,
        tokens_after=plan.tokens_after,
        tokens_saved=plan.tokens_before - plan.tokens_after,
        changes=changes,
        explanation=plan.explanation
        or f"collected to {plan.tokens_after} tokens (target {plan.target_tokens})",
    )


def initial_settings(config: Config) -> GcSettings:
    """The configured GC percentages, the engine's default weights, full collections."""
    weights = Weights()
    return GcSettings(
        context_limit_tokens=DEFAULT_CONTEXT_LIMIT,
        threshold_percent=config.gc_threshold_percent,
        target_percent=config.gc_target_percent,
        pressure_percent=config.gc_pressure_percent,
        recent_turns=DEFAULT_RECENT_TURNS,
        batch_size=0,
        weight_bm25=weights.bm25,
        weight_recency=weights.recency,
        weight_gc=weights.gc,
        weight_boost=weights.boost,
    )
