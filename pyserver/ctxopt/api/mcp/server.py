"""MCP front end: the engine's garbage collector as tools an agent can call.

`ctxopt mcp` serves these over stdio with the official SDK. The tools are thin
adapters over the same Engine and store the gRPC server uses; the only state
of their own is the GC settings `context_gc_configure` changes (the defaults
of later analyze, prune and restore calls in this process).

Safety: removal stashes unless the agent asks for deletion, and LOCKED or
pinned chunks are refused with a tool error that names them. The SDK runs
tool calls concurrently, so one lock serialises them: a refusal check and the
removal it guards see the same session.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Literal, TypeVar

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, ConfigDict, Field

from ctxopt import validate
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.errors import CtxoptError, FailedPrecondition, NotFound
from ctxopt.model import (
    DEFAULT_RECENT_TURNS,
    Budget,
    Chunk,
    ChunkKind,
    ChunkUpdate,
    Decision,
    Decisions,
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
DEFAULT_CONTEXT_LIMIT = 128_000
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
Percent = Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)]
WindowTokens = Annotated[int, Field(gt=0, le=validate.MAX_CONTEXT_TOKENS)]
Count = Annotated[int, Field(ge=0)]
Weight = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Query = Annotated[str, Field(description="the current task or question; relevance is scored on it")]
SessionId = Annotated[str, Field(description="the conversation; one per agent session")]


# ---- tool inputs and results (their JSON schemas are what agents see) ---------


class ChunkIn(BaseModel):
    """One piece of the agent's context."""

    model_config = ConfigDict(extra="forbid")

    id: str
    text: str
    role: RoleName = "user"
    kind: KindName = "message"
    tokens: int = Field(default=0, ge=0, description="0: the server counts")
    turn: int = 0
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
            self.context_limit_tokens,
            self.threshold_percent,
            self.target_percent,
            self.pressure_percent,
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


class Change(BaseModel):
    id: str
    action: ActionName = Field(description="what the collection does with it")
    tokens: int
    tokens_after: int = Field(description="0 unless trimmed or masked")
    score: float = Field(description="hybrid value: higher is kept first")
    reasons: list[str]


class Candidate(Change):
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
    changes: list[Change] = Field(
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


# ---- the adapters ---------------------------------------------------------


@dataclass
class ContextTools:
    engine: Engine
    settings: GcSettings
    lock: threading.Lock = field(default_factory=threading.Lock)

    def call(self, action: Callable[[], T]) -> T:
        """One tool call at a time; engine errors become tool errors naming the field."""
        with self.lock:
            try:
                return action()
            except CtxoptError as e:
                raise ToolError(str(e)) from None

    def configure(self, changes: dict[str, float | int]) -> GcSettings:
        settings = self.settings.model_copy(update=changes)
        validate.validate_budget(settings.budget(), "settings")
        validate.validate_roots(Roots(recent_turns=settings.recent_turns), "settings")
        validate.validate_weights(settings.weights(), "settings")
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
        result = self.engine.append(OWNER, session_id, [_chunk(c) for c in chunks])
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
            plan = Plan([], Decisions(), 0, 0, options.budget.target, False, True, [])
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
            return _auto_result(self.engine.optimize(OWNER, session_id, options))
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

    def pin(self, session_id: str, ids: list[str], pinned: bool) -> PinResult:
        self.engine.update(OWNER, session_id, [ChunkUpdate(id=i, pinned=pinned) for i in ids])
        return PinResult(ids=ids, pinned=pinned)

    def search(
        self, session_id: str, query: str, filters: StashFilter, limit: int, offset: int
    ) -> SearchResult:
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

    def restore(self, session_id: str, ids: list[str], force: bool) -> RestoreResult:
        budget = self.settings.budget()
        restored, tokens = self.engine.restore(OWNER, session_id, ids, budget, force)
        back = self.engine.chunks(OWNER, session_id, restored)
        return RestoreResult(
            restored=restored, session_tokens=tokens, originals={c.id: c.text for c in back}
        )

    def _candidates(self, session_id: str, decisions: Sequence[Decision]) -> list[Candidate]:
        ids = [d.chunk_id for d in decisions]
        chunks = self.engine.chunks(OWNER, session_id, ids) if ids else []
        kinds = {c.id: _kind_name(c.kind) for c in chunks}
        return [Candidate(**_change(d).model_dump(), kind=kinds[d.chunk_id]) for d in decisions]


def _chunk(c: ChunkIn) -> Chunk:
    return Chunk(
        id=c.id,
        role=Role[c.role.upper()],
        kind=ChunkKind[c.kind.upper()],
        text=c.text,
        tokens=c.tokens,
        turn=c.turn,
        pinned=c.pinned,
        policy=GcPolicy.UNSPECIFIED if c.policy == "auto" else GcPolicy[c.policy.upper()],
        group_id=c.group_id,
        parent_id=c.parent_id,
        references=tuple(c.references),
        file_path=c.file_path,
        tags=tuple(c.tags),
        task_id=c.task_id,
        boost=c.boost,
    )


def _kind_name(kind: ChunkKind) -> KindName:
    return kind.name.lower()  # type: ignore[return-value]  # KindName lists every kind


def _change(decision: Decision) -> Change:
    return Change(
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

    @server.tool()
    def context_append(
        chunks: list[ChunkIn], session_id: SessionId = DEFAULT_SESSION
    ) -> AppendSummary:
        """Register chunks of the agent's context (upsert by id; the session is
        created on first use)."""
        return tools.call(lambda: tools.append(session_id, chunks))

    @server.tool()
    def context_gc_analyze(query: Query = "", session_id: SessionId = DEFAULT_SESSION) -> Analysis:
        """Usage against the soft (threshold) and hard (context window) limits, and
        the chunks a collection to the target would change, with kind, tokens,
        score and reasons. Changes nothing."""
        return tools.call(lambda: tools.analyze(session_id, query))

    @server.tool()
    def context_gc_prune(
        ids: Annotated[list[str] | None, Field(description="for stash and delete")] = None,
        strategy: PruneStrategy = "stash",
        query: Query = "",
        session_id: SessionId = DEFAULT_SESSION,
    ) -> PruneResult:
        """Remove chunks: `stash` (default, restorable) or `delete` (gone for good)
        the given ids, or `auto`: run the collection context_gc_analyze shows
        (query steers relevance). LOCKED and pinned chunks are refused."""
        return tools.call(lambda: tools.prune(session_id, ids or [], strategy, query))

    @server.tool()
    def context_gc_pin(ids: list[str], session_id: SessionId = DEFAULT_SESSION) -> PinResult:
        """Pin chunks: no collection or prune touches them until unpinned."""
        return tools.call(lambda: tools.pin(session_id, ids, True))

    @server.tool()
    def context_gc_unpin(ids: list[str], session_id: SessionId = DEFAULT_SESSION) -> PinResult:
        """Unpin chunks: collections may remove them again."""
        return tools.call(lambda: tools.pin(session_id, ids, False))

    @server.tool()
    def context_gc_configure(
        context_limit_tokens: Annotated[
            WindowTokens | None, Field(description="the hard limit: the context window")
        ] = None,
        threshold_percent: Annotated[
            Percent | None, Field(description="the soft limit: a collection triggers here")
        ] = None,
        target_percent: Annotated[
            Percent | None, Field(description="a collection lands here")
        ] = None,
        pressure_percent: Annotated[
            Percent | None, Field(description="PRESERVABLE chunks go only above this")
        ] = None,
        recent_turns: Annotated[
            Count | None, Field(description="the latest turns are roots, never removed")
        ] = None,
        batch_size: Annotated[
            Count | None,
            Field(description="0: auto is a full collection; N: a minor one of at most N steps"),
        ] = None,
        weight_bm25: Annotated[Weight | None, Field(description="relevance to the query")] = None,
        weight_recency: Annotated[Weight | None, Field(description="how recent")] = None,
        weight_gc: Annotated[
            Weight | None, Field(description="structure: kind, references, generation")
        ] = None,
        weight_boost: Annotated[Weight | None, Field(description="the chunks' own boost")] = None,
    ) -> GcSettings:
        """Change the limits, thresholds, recency window, batch size and weights
        that later analyze, prune and restore calls of this process use (for every
        session). Omitted settings keep their value; returns the settings in force."""
        given = {
            "context_limit_tokens": context_limit_tokens,
            "threshold_percent": threshold_percent,
            "target_percent": target_percent,
            "pressure_percent": pressure_percent,
            "recent_turns": recent_turns,
            "batch_size": batch_size,
            "weight_bm25": weight_bm25,
            "weight_recency": weight_recency,
            "weight_gc": weight_gc,
            "weight_boost": weight_boost,
        }
        changes = {name: value for name, value in given.items() if value is not None}
        return tools.call(lambda: tools.configure(changes))

    @server.tool()
    def context_stash_search(
        query: str = "",
        kinds: list[KindName] | None = None,
        tags: list[str] | None = None,
        file_path: str = "",
        task_id: str = "",
        limit: Annotated[int, Field(ge=0, le=validate.MAX_SEARCH_LIMIT)] = 10,
        offset: Annotated[int, Field(ge=0)] = 0,
        session_id: SessionId = DEFAULT_SESSION,
    ) -> SearchResult:
        """Full-text search of what was stashed, trimmed or masked, best first,
        with snippets; filters narrow it."""
        filters = StashFilter(
            kinds=tuple(ChunkKind[k.upper()] for k in kinds or []),
            tags=tuple(tags or []),
            file_path=file_path,
            task_id=task_id,
        )
        return tools.call(lambda: tools.search(session_id, query, filters, limit, offset))

    @server.tool()
    def context_stash_restore(
        ids: list[str], force: bool = False, session_id: SessionId = DEFAULT_SESSION
    ) -> RestoreResult:
        """Bring stashed chunks (and the rest of their groups) back byte for byte;
        refused when that would pass the target unless `force`."""
        return tools.call(lambda: tools.restore(session_id, ids, force))

    _refuse_unknown_arguments(server)
    return server


def _refuse_unknown_arguments(server: MCPServer) -> None:
    """An argument a tool does not take is refused by name, not ignored (a typo
    like `strateg` must not silently run the default). The SDK builds each tool's
    argument model leniently and offers no option, so tighten the models it built."""
    for tool in server._tool_manager.list_tools():
        model = tool.fn_metadata.arg_model
        model.model_config["extra"] = "forbid"
        model.model_rebuild(force=True)
        tool.parameters = model.model_json_schema(by_alias=True)


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


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _close_on_signal(tools: ContextTools) -> None:
    """SIGTERM/SIGINT: let the running tool call finish, close the store, exit 0.

    Unwinding the server instead would wait for the SDK's stdin reader, a worker
    thread blocked in read() that no cancellation reaches, until the host closed
    the pipe; so this exits the process once the store is closed."""

    def handler(_signum: int, _frame: object) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        with tools.lock:
            tools.engine.close()
        sys.stderr.flush()
        os._exit(0)

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)


def serve_http(engine: Engine, config: Config) -> ContextTools:
    """Serve the MCP tools over streamable HTTP at `config.mcp_addr` (path /mcp),
    on a daemon thread, over an engine the gRPC server also uses; returns the
    tools, whose lock the caller takes to close the engine under them.

    The tools act as owner "" and check no token, so this is refused with auth
    on or off loopback."""
    host, _, port = config.mcp_addr.rpartition(":")
    if config.auth_token:
        raise FailedPrecondition(
            "mcp_addr", config.mcp_addr, "the MCP tools check no token: not with auth on"
        )
    if host not in ("127.0.0.1", "localhost", "::1", "[::1]") or not port.isdigit():
        raise FailedPrecondition("mcp_addr", config.mcp_addr, "must be a loopback HOST:PORT")
    tools = ContextTools(engine, initial_settings(config))
    server = build_server(tools)

    def run() -> None:
        anyio.run(partial(server.run_streamable_http_async, host=host.strip("[]"), port=int(port)))

    threading.Thread(target=run, name="ctxopt-mcp-http", daemon=True).start()
    return tools


def serve_stdio(config: Config) -> None:
    """Run the MCP tools over stdin/stdout on the configured data directory.

    Returns when the host closes stdin; exits on SIGTERM/SIGINT. Either way the
    store is flushed and closed first, which releases the data directory.
    Raises FailedPrecondition when another ctxopt process holds the directory.
    """
    engine = Engine(config)
    tools = ContextTools(engine, initial_settings(config))
    _close_on_signal(tools)
    try:
        build_server(tools).run("stdio")
    finally:
        for sig in STOP_SIGNALS:  # closing now: a late signal must not close twice
            signal.signal(sig, signal.SIG_IGN)
        with tools.lock:
            engine.close()
