"""The engine: the one in-process API every front (gRPC, MCP, the gateway) calls.

Every method that takes a client's input validates it and raises a
`ctxopt.errors` error naming the field (`held_whole`, which only the gateway
calls with ids it made, does not); a failed call leaves the session unchanged.
`owner` scopes sessions and stash entries to the credential that created them
("" when auth is off).

Durability: every write is one `store.Change`, committed to the store in one
transaction and only then applied to memory (`LiveSessions.commit`), so an
acknowledged call survives a crash and a refused one changed nothing.

The lock order is in the package's docstring (`ctxopt.engine`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import replace

from ctxopt import validate
from ctxopt.config import Config
from ctxopt.engine.collector import Collector
from ctxopt.engine.plan_report import LastPlans, PlanReport, build_report, stash_ids_of
from ctxopt.engine.quiet import marked_calls
from ctxopt.engine.session_checks import (
    check_capacity,
    check_embeddings,
    check_query_embedding,
    check_removable,
    require_known,
)
from ctxopt.engine.sessions import LiveSessions
from ctxopt.engine.warm import WarmSessions
from ctxopt.errors import FailedPrecondition, InvalidArgument, NotFound
from ctxopt.model import (
    AppendResult,
    Budget,
    Chunk,
    ChunkScore,
    ChunkTokens,
    ChunkUpdate,
    GcPolicy,
    OptimizeOptions,
    Plan,
    Roots,
    SessionStats,
    StashFilter,
    StashHit,
    UpsertStatus,
    Weights,
)
from ctxopt.planner.knobs import Tuning
from ctxopt.roots import mark
from ctxopt.session import Session
from ctxopt.store import (
    Change,
    SessionSummary,
    Store,
    plan_change,
    read_export,
    removal_change,
    restore_change,
    stored_of,
)
from ctxopt.text.analyzer import Analyzer
from ctxopt.tokens import TokenCounter

log = logging.getLogger(__name__)

DEFAULT_SESSION_LIST = 100  # ListSessions answers this many when asked for 0


def _now_ms() -> int:
    return int(time.time() * 1000)


@marked_calls
class Engine:
    def __init__(self, config: Config, tuning: Tuning | None = None) -> None:
        self.config = config
        self.tuning = tuning or Tuning()
        self.counter = TokenCounter(config.tokenizer, config.token_cache_size)
        self.analyzer = Analyzer()
        self.store = Store(
            config.data_dir or config.resolved_data_dir,
            fsync=config.fsync,
            stash_max_entries=config.stash_max_entries,
            stash_max_bytes=config.stash_max_bytes,
            analyzer=self.analyzer.with_identifier_parts(),  # the stash finds name parts
        )
        self.collector = Collector(config, self.tuning, self.analyzer, self.counter)
        self.sessions = LiveSessions(config, self.store, self.collector)
        self.registry = self.sessions.registry
        self._warm = WarmSessions(self.analyzer)
        self.last_plans = LastPlans()

    def close(self) -> None:
        """Flush and close storage."""
        self.sessions.close()
        self.store.close()

    # ---- chunks ----------------------------------------------------------

    def _count(self, chunks: Sequence[Chunk]) -> list[int]:
        """Client counts are honoured; the rest are counted (cached by content)."""
        missing = [c.text for c in chunks if c.tokens <= 0]
        counted = iter(self.counter.count_many(missing)) if missing else iter(())
        return [c.tokens if c.tokens > 0 else next(counted) for c in chunks]

    def append(self, owner: str, session_id: str, chunks: Sequence[Chunk]) -> AppendResult:
        """Upsert chunks by id (creates the session on first append)."""
        validate.validate_session_id(session_id)
        validate.validate_chunks(chunks, self.config)
        tokens = self._count(chunks)
        session = self.sessions.get(owner, session_id, create=True)
        with session.lock:
            check_capacity(session.entries.keys(), chunks, self.config.max_chunks_per_session)
            check_embeddings(session.embedding_dim, chunks)
            existed = {c.id for c in chunks if c.id in session.entries}
            staged = session.staged(chunks, tokens, _now_ms())
            if staged:
                upserts = [stored_of(e) for e in staged]
                self.sessions.commit(session, Change(session_id, owner, upserts=upserts))
            changed = {e.chunk.id for e in staged}
            results = [
                ChunkTokens(c.id, session.entries[c.id].tokens, _status(c.id, changed, existed))
                for c in chunks
            ]
            return AppendResult(results, session.tokens_total, len(session))

    def update(self, owner: str, session_id: str, updates: Sequence[ChunkUpdate]) -> int:
        """Apply updates all or nothing; returns how many chunks changed."""
        validate.validate_updates(updates)
        session = self.sessions.get(owner, session_id)
        with session.lock:
            for i, update in enumerate(updates):
                if update.id not in session.entries:
                    raise NotFound(f"updates[{i}].id", update.id, "no such chunk in the session")
            now = _now_ms()
            upserts = [
                replace(
                    stored_of(entry := session.entries[u.id]),
                    chunk=self._updated(entry.chunk, u),
                    last_touched_ms=now if u.touch else entry.last_touched_ms,
                )
                for u in updates
            ]
            self.sessions.commit(session, Change(session_id, owner, upserts=upserts))
            return len(updates)

    @staticmethod
    def _updated(chunk: Chunk, update: ChunkUpdate) -> Chunk:
        return replace(
            chunk,
            pinned=chunk.pinned if update.pinned is None else update.pinned,
            policy=chunk.policy if update.policy == GcPolicy.UNSPECIFIED else update.policy,
            references=chunk.references if update.references is None else update.references,
            boost=chunk.boost if update.boost is None else update.boost,
        )

    def remove(
        self, owner: str, session_id: str, chunk_ids: Sequence[str], *, stash_originals: bool
    ) -> tuple[int, int]:
        """The client dropped these chunks from its history: remove them, their
        originals stashed when asked; returns (removed, session_tokens)."""
        validate.validate_ids(chunk_ids, "chunk_ids")
        session = self.sessions.get(owner, session_id)
        with session.lock:
            require_known(session.entries.keys(), chunk_ids, "chunk_ids")
            stash_reason = "removed_by_client" if stash_originals else None
            return self._remove(session, owner, chunk_ids, stash_reason)

    def prune(
        self,
        owner: str,
        session_id: str,
        chunk_ids: Sequence[str],
        *,
        stash_originals: bool,
        roots: Roots,
    ) -> tuple[int, int]:
        """Remove chunks someone asked to prune, by the rule of `_check_removable`;
        returns (removed, session_tokens)."""
        validate.validate_ids(chunk_ids, "ids")
        validate.validate_roots(roots)
        session = self.sessions.get(owner, session_id)
        with session.lock:
            check_removable(session.view(), chunk_ids, roots, "ids")
            stash_reason = "pruned_on_request" if stash_originals else None
            return self._remove(session, owner, chunk_ids, stash_reason)

    def _remove(
        self,
        session: Session,
        owner: str,
        chunk_ids: Sequence[str],
        stash_reason: str | None,  # None: the originals are not stashed
    ) -> tuple[int, int]:
        change = removal_change(
            session.id,
            owner,
            [session.entries[chunk_id] for chunk_id in chunk_ids],
            stash_reason=stash_reason,
            now_ms=_now_ms(),
        )
        self.sessions.commit(session, change)
        return len(chunk_ids), session.tokens_total

    def chunks(self, owner: str, session_id: str, chunk_ids: Sequence[str]) -> list[Chunk]:
        """The live chunks of these ids, as registered (NotFound names unknown ids)."""
        validate.validate_ids(chunk_ids, "chunk_ids")
        session = self.sessions.get(owner, session_id)
        with session.lock:
            require_known(session.entries.keys(), chunk_ids, "chunk_ids")
            return [session.entries[i].chunk for i in chunk_ids]

    def held_whole(self, owner: str, session_id: str, chunk_ids: Sequence[str]) -> list[str]:
        """Which of these ids the session holds with their original text (restored
        since they were stashed or shortened); unknown ids are not whole."""
        session = self.sessions.get(owner, session_id)
        with session.lock:
            entries = session.entries
            return [i for i in chunk_ids if i in entries and not entries[i].origin]

    # ---- planning ------------------------------------------------------

    def optimize(self, owner: str, session_id: str, options: OptimizeOptions) -> Plan:
        """Plan the prompt; unless dry_run, stash originals durably and apply.

        >>> from ctxopt.model import Budget, Chunk, ChunkKind, Role, Roots
        >>> engine = Engine(Config(data_dir=":memory:"))
        >>> def turn(i: int) -> Chunk:
        ...     return Chunk(f"c{i}", Role.USER, ChunkKind.MESSAGE, f"step {i}", tokens=300, turn=i)
        >>> engine.append("", "s", [turn(i) for i in range(4)]).session_tokens
        1200
        >>> options = OptimizeOptions(budget=Budget(1000), roots=Roots(recent_turns=1))
        >>> plan = engine.optimize("", "s", options)
        >>> plan.outcome.name, plan.kept_ids, plan.tokens_after, plan.target_tokens
        ('LANDED', ['c2', 'c3'], 600, 600)
        >>> [(d.chunk_id, d.action.name) for d in plan.decisions]
        [('c0', 'STASH'), ('c1', 'STASH')]
        >>> engine.stats("", "s").stashed_count  # restorable with `restore`
        2
        >>> engine.close()
        """
        started = time.perf_counter()
        validate.validate_options(options, self.config)
        session = self.sessions.get(owner, session_id)
        with session.lock:
            if options.delete_ids:
                check_removable(session.view(), options.delete_ids, options.roots, "delete_ids")
            with self.collector.noted.noting() as counted:
                plan = self.collector.plan(session, options)
            if plan.triggered and not options.dry_run:
                change = plan_change(
                    session.id,
                    owner,
                    plan,
                    session.entries,
                    collections=session.collections,
                    now_ms=_now_ms(),
                )
                self.sessions.commit(session, change)
            if plan.triggered:
                self.last_plans.record(owner, session_id, plan, dry_run=options.dry_run)
            self.sessions.keep_line_facts(session)
            self.sessions.keep_counts(session, counted)
        plan.server_ms = (time.perf_counter() - started) * 1000
        return plan

    def score(
        self,
        owner: str,
        session_id: str,
        query: str,
        query_embedding: Sequence[float],
        roots: Roots,
        weights: Weights,
    ) -> list[ChunkScore]:
        """Every chunk's score breakdown, in prompt order."""
        validate.validate_query(query, self.config)
        validate.validate_roots(roots)
        validate.validate_weights(weights)
        validate.validate_query_embedding(query_embedding, self.config)
        session = self.sessions.get(owner, session_id)
        with session.lock:
            check_query_embedding(session.embedding_dim, query_embedding)
            view = session.view()
            terms = self.analyzer.terms(query)
            marks = mark(view, roots)
            scores = self.collector.scores(view, terms, query_embedding, marks, weights)
            live = view.live
            return [
                ChunkScore(session.slot_ids[s], tokens, breakdown)
                for s, tokens, breakdown in zip(
                    live.tolist(),
                    session.columns.tokens[live].tolist(),
                    scores.breakdowns(live),
                    strict=True,
                )
            ]

    def optimize_context(self, chunks: Sequence[Chunk], options: OptimizeOptions) -> Plan:
        """Stateless plan over inline chunks; nothing is stored.

        A conversation sent again (same first chunk) reuses its warm in-memory
        index, so each call only pays for the chunks that changed.

        >>> from ctxopt.model import Budget, Chunk, ChunkKind, Role, Roots
        >>> engine = Engine(Config(data_dir=":memory:"))
        >>> chunks = [
        ...     Chunk(f"c{i}", Role.USER, ChunkKind.MESSAGE, f"step {i}", tokens=300, turn=i)
        ...     for i in range(4)
        ... ]
        >>> roots = Roots(recent_turns=1)
        >>> options = OptimizeOptions(budget=Budget(1000), query="step 1", roots=roots)
        >>> plan = engine.optimize_context(chunks, options)
        >>> plan.outcome.name, plan.kept_ids  # the query keeps c1
        ('LANDED', ['c1', 'c3'])
        >>> engine.optimize_context(chunks[:1], options).outcome.name  # below the threshold
        'IDLE'
        >>> engine.close()
        """
        started = time.perf_counter()
        validate.validate_chunks(chunks, self.config)
        validate.validate_options(options, self.config)
        tokens = self._count(chunks)
        conversation = self._warm.conversation_of(chunks)
        with conversation.lock:
            session = conversation.synced(chunks, tokens)
            check_embeddings(session.embedding_dim, chunks)
            if options.delete_ids:
                check_removable(session.view(), options.delete_ids, options.roots, "delete_ids")
            plan = self.collector.plan(session, replace(options, dry_run=True))
        plan.server_ms = (time.perf_counter() - started) * 1000
        return plan

    # ---- stash -----------------------------------------------------------

    def search_stash(
        self,
        owner: str,
        session_id: str,
        query: str,
        filters: StashFilter,
        limit: int,
        offset: int,
    ) -> tuple[list[StashHit], int | None]:
        """Ranked stash hits and the next offset (None on the last page)."""
        validate.validate_query(query, self.config)
        validate.validate_search(limit, offset)
        if session_id:
            self.sessions.check_stash_owner(owner, session_id)
        return self.store.search(owner, session_id, query, filters, limit, offset)

    def restore(
        self,
        owner: str,
        session_id: str,
        chunk_ids: Sequence[str],
        *,
        budget: Budget | None,
        force: bool,
    ) -> tuple[list[str], int]:
        """Bring stashed originals back into the window, with the rest of their
        groups; returns (ids, session_tokens).

        A chunk out of the window comes back as its newest stashed original; a
        chunk shown as an excerpt or placeholder comes back as the original it
        names; a chunk already whole in the window has nothing to restore. Only
        the entries brought back leave the stash."""
        validate.validate_ids(chunk_ids, "chunk_ids")
        if budget is not None:
            validate.validate_budget(budget)
        self.sessions.check_stash_owner(owner, session_id)
        session = self.sessions.get(owner, session_id, create=True)
        with session.lock:
            originals = self.sessions.stashed_originals(session, owner, chunk_ids)
            missing = [i for i in chunk_ids if i not in originals]
            if missing:
                raise NotFound("chunk_ids", missing, "not in the session's stash")
            groups = sorted({e.chunk.group_id for e in originals.values() if e.chunk.group_id})
            members = self.store.stashed_group_members(owner, session_id, groups)
            originals.update(self.sessions.stashed_originals(session, owner, members))
            back = [originals[i] for i in sorted(originals)]
            counts = self._count([replace(e.chunk, tokens=max(e.chunk.tokens, 0)) for e in back])
            growth = sum(counts) - sum(
                session.entries[e.chunk.id].tokens for e in back if e.chunk.id in session.entries
            )
            if budget is not None and not force and session.tokens_total + growth > budget.target:
                raise FailedPrecondition(
                    "budget",
                    budget.target,
                    f"restoring {growth} tokens would bring the session to "
                    f"{session.tokens_total + growth}, above the target; "
                    "set force to restore anyway",
                )
            change = restore_change(session, owner, back, counts, now_ms=_now_ms())
            self.sessions.commit(session, change)
            return sorted(originals), session.tokens_total

    # ---- session level -----------------------------------------------------

    def stats(self, owner: str, session_id: str) -> SessionStats:
        session = self.sessions.get(owner, session_id)
        with session.lock:
            live = session.live_slots()
            cols = session.columns
            by_policy: dict[str, int] = {}
            for policy in GcPolicy:
                if policy == GcPolicy.UNSPECIFIED:
                    continue
                tokens = int(cols.tokens[live][cols.policy[live] == policy].sum())
                if tokens:
                    by_policy[f"GC_POLICY_{policy.name}"] = tokens
            stashed, stashed_tokens = self.store.stash_stats(session_id)
            survived = session.view().survived()
            old = int((survived[live] >= self.config.old_generation_after).sum())
            return SessionStats(
                len(session),
                session.tokens_total,
                stashed,
                stashed_tokens,
                session.collections,
                by_policy,
                old,
            )

    def delete_session(self, owner: str, session_id: str, *, purge_stash: bool) -> bool:
        session = self.sessions.get(owner, session_id)
        with session.lock:
            deleted = self.store.delete_session(owner, session_id, purge_stash=purge_stash)
            self.registry.drop(session_id)
            self.last_plans.forget(owner, session_id)
            return deleted

    def list_sessions(self, owner: str, limit: int) -> tuple[list[SessionSummary], int]:
        """The owner's sessions, most recently used first, and how many it holds."""
        validate.validate_page_size(limit, "limit")
        return self.store.list_sessions(owner, limit or DEFAULT_SESSION_LIST)

    def last_plan(self, owner: str, session_id: str, top: int) -> PlanReport | None:
        """The last collection Optimize ran on the session since start (None: none)."""
        validate.validate_page_size(top, "top")
        session = self.sessions.get(owner, session_id)
        recorded = self.last_plans.get(owner, session_id)
        if recorded is None:
            return None
        with session.lock:
            live = {chunk_id: entry.chunk for chunk_id, entry in session.entries.items()}
        stashed = self.store.stash_entries(owner, session_id, stash_ids_of(recorded))
        return build_report(recorded, live, stashed, top)

    def export_session(self, owner: str, session_id: str) -> str:
        """The session and its stash as JSON (round-trips through import)."""
        self.sessions.check_stash_owner(owner, session_id)
        return json.dumps(
            self.store.export_session(owner, session_id), ensure_ascii=False, indent=2
        )

    def import_session(self, owner: str, data: str, *, overwrite: bool) -> tuple[str, int]:
        """Load an exported session; returns (session_id, chunk_count).

        Every chunk, live or stashed, passes the checks of an append, the
        session's limits and one embedding dimension; positions are renumbered
        in their order, and nothing is written when anything is refused."""
        try:
            parsed = json.loads(data)
        except json.JSONDecodeError as err:
            raise InvalidArgument(
                "json", f"line {err.lineno} column {err.colno}", f"not valid JSON: {err.msg}"
            ) from None
        exported = validate.validate_export(read_export(parsed, owner), self.config)
        chunks = [c.chunk for c in exported.session.chunks]
        check_capacity((), chunks, self.config.max_chunks_per_session)
        check_embeddings(0, chunks)
        counts = self._count(chunks)
        counted = [
            replace(c, chunk=replace(c.chunk, tokens=n))
            for c, n in zip(exported.session.chunks, counts, strict=True)
        ]
        exported = replace(exported, session=replace(exported.session, chunks=counted))
        session_id = exported.session.session_id
        live = self.registry.get(session_id)
        with self.sessions.load_lock, live.lock if live is not None else nullcontext():
            self.store.import_session(exported, replace=overwrite)
            self.registry.drop(session_id)
        session = self.sessions.get(owner, session_id)
        return session_id, len(session)


def _status(chunk_id: str, changed: set[str], existed: set[str]) -> UpsertStatus:
    if chunk_id not in changed:
        return UpsertStatus.UNCHANGED
    return UpsertStatus.UPDATED if chunk_id in existed else UpsertStatus.ADDED
