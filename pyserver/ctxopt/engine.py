"""The engine: the one in-process API both fronts (gRPC, MCP) call.

Every method validates its input and raises a `ctxopt.errors` error naming the
field; a failed call leaves the session unchanged. `owner` scopes sessions and
stash entries to the credential that created them ("" when auth is off).

Durability: every write is one `store.Change`, committed to the store in one
transaction and only then applied to memory (`_commit`), so an acknowledged
call survives a crash and a refused one changed nothing.

Locks, always taken in this order (a thread holding one never waits for an
earlier one): the MCP front's tool lock, `Engine._load_lock` (bringing a
stored session into memory, importing), a session's `lock` (every read and
write of that session), then the leaf locks that guard one structure each and
call nothing that locks: the store's connection lock, the trimmer's excerpt
cache, the stateless-session cache, the token counter's cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

from ctxopt import validate
from ctxopt.config import Config
from ctxopt.errors import (
    CtxoptError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from ctxopt.model import (
    Action,
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
    Strategy,
    UpsertStatus,
    Weights,
)
from ctxopt.pruner import TextTools, Tuning, idle_plan, is_triggered, plan_session
from ctxopt.registry import Entry, Registry, Session, SessionView
from ctxopt.roots import Marks, mark
from ctxopt.scoring.analyzer import Analyzer
from ctxopt.scoring.hybrid import Scores, score_session
from ctxopt.scoring.lines import line_book
from ctxopt.shrink import Trimmer, stash_id
from ctxopt.store import (
    Change,
    Restash,
    StashEntry,
    Store,
    StoredChunk,
    StoredSession,
    read_export,
)
from ctxopt.tokens import TokenCounter

log = logging.getLogger(__name__)

STATELESS_SESSIONS = 8  # warm OptimizeContext conversations kept in memory


def _now_ms() -> int:
    return int(time.time() * 1000)


class Engine:
    def __init__(self, config: Config, tuning: Tuning | None = None) -> None:
        self.config = config
        self.tuning = tuning or Tuning()
        self.counter = TokenCounter(config.tokenizer, config.token_cache_size)
        self.analyzer = Analyzer()
        self.trimmer = Trimmer(self.analyzer.terms)
        self.registry = Registry(self.analyzer)
        self.store = Store(
            config.data_dir or config.resolved_data_dir,
            fsync=config.fsync,
            stash_max_entries=config.stash_max_entries,
            stash_max_bytes=config.stash_max_bytes,
            analyzer=self.analyzer,
        )
        self._load_lock = threading.Lock()
        self._stateless: OrderedDict[str, Session] = OrderedDict()
        self._stateless_lock = threading.Lock()

    def close(self) -> None:
        """Flush and close storage."""
        self.store.close()

    # ---- sessions ------------------------------------------------------

    def _session(self, owner: str, session_id: str, *, create: bool = False) -> Session:
        validate.validate_session_id(session_id)
        session = self.registry.get(session_id)
        if session is None:
            session = self._load(session_id)
        if session is None:
            if not create:
                raise NotFound("session_id", session_id, "no such session")
            if self.store.owners(session_id) - {owner}:
                raise PermissionDenied(
                    "session_id", session_id, "session belongs to another client"
                )
            if len(self.registry) >= self.config.max_sessions:
                raise validate.too_many(
                    "session_id", session_id, "sessions", self.config.max_sessions
                )
            session = self.registry.create(session_id, owner)
        if session.owner != owner:
            raise PermissionDenied("session_id", session_id, "session belongs to another client")
        return session

    def _load(self, session_id: str) -> Session | None:
        """Bring a stored session into memory on first use after a restart."""
        with self._load_lock:
            session = self.registry.get(session_id)
            if session is not None:
                return session
            stored = self.store.load_session(session_id)
            if stored is None:
                return None
            return self.registry.put(self._hydrate(stored))

    def _hydrate(self, stored: StoredSession) -> Session:
        session = Session(stored.session_id, stored.owner, self.analyzer)
        session.collections = stored.collections
        for item in stored.chunks:
            session.restore_entry(_entry(item))
        return session

    def _commit(self, session: Session, change: Change) -> None:
        """The one write path: the store first, then memory."""
        self.store.commit(change)
        for chunk_id in change.removals:
            session.remove(chunk_id)
        for item in change.upserts:
            session.restore_entry(_entry(item))
        if change.collections is not None:
            session.collections = change.collections
        if change.removals and session.needs_compaction():
            self._compact(session, change.owner)

    def _compact(self, session: Session, owner: str) -> None:
        """Renumber the live chunks densely, in the store and then in memory. The
        write that led here already committed: a failure only leaves the slots as
        they were, so it is logged, not raised."""
        entries = session.compacted()
        try:
            self.store.commit(Change(session.id, owner, upserts=[_stored(e) for e in entries]))
        except CtxoptError as err:
            log.warning("session %r not compacted: %s", session.id, err)
            return
        session.compact(entries)

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
        session = self._session(owner, session_id, create=True)
        with session.lock:
            self._check_capacity(session, chunks)
            self._check_embeddings(session, chunks)
            existed = {c.id for c in chunks if c.id in session.entries}
            staged = session.staged(chunks, tokens, _now_ms())
            if staged:
                upserts = [_stored(e) for e in staged]
                self._commit(session, Change(session_id, owner, upserts=upserts))
            changed = {e.chunk.id for e in staged}
            results = [
                ChunkTokens(c.id, session.entries[c.id].tokens, _status(c.id, changed, existed))
                for c in chunks
            ]
            return AppendResult(results, session.tokens_total, len(session))

    def _check_capacity(self, session: Session, chunks: Sequence[Chunk]) -> None:
        new = sum(1 for c in {c.id for c in chunks} if c not in session.entries)
        limit = self.config.max_chunks_per_session
        if len(session) + new > limit:
            raise validate.too_many("chunks", len(session) + new, "chunks in the session", limit)

    def _check_embeddings(self, session: Session, chunks: Sequence[Chunk]) -> None:
        """One embedding dimension per session."""
        dim = session.embedding_dim
        for i, chunk in enumerate(chunks):
            if not chunk.embedding:
                continue
            if dim and len(chunk.embedding) != dim:
                raise InvalidArgument(
                    f"chunks[{i}].embedding",
                    len(chunk.embedding),
                    f"dimension differs from the session's {dim}",
                )
            dim = len(chunk.embedding)

    def update(self, owner: str, session_id: str, updates: Sequence[ChunkUpdate]) -> int:
        """Apply updates all or nothing; returns how many chunks changed."""
        validate.validate_updates(updates)
        session = self._session(owner, session_id)
        with session.lock:
            for i, update in enumerate(updates):
                if update.id not in session.entries:
                    raise NotFound(f"updates[{i}].id", update.id, "no such chunk in the session")
            now = _now_ms()
            upserts = [
                replace(
                    _stored(entry := session.entries[u.id]),
                    chunk=self._updated(entry.chunk, u),
                    last_touched_ms=now if u.touch else entry.last_touched_ms,
                )
                for u in updates
            ]
            self._commit(session, Change(session_id, owner, upserts=upserts))
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
        self, owner: str, session_id: str, chunk_ids: Sequence[str], stash_originals: bool
    ) -> tuple[int, int]:
        """The client dropped these chunks from its history: remove them, their
        originals stashed when asked; returns (removed, session_tokens)."""
        validate.validate_ids(chunk_ids, "chunk_ids")
        session = self._session(owner, session_id)
        with session.lock:
            self._require_known(session, chunk_ids, "chunk_ids")
            return self._remove(session, owner, chunk_ids, stash_originals, "removed_by_client")

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
        session = self._session(owner, session_id)
        with session.lock:
            self._check_removable(session, chunk_ids, roots, "ids")
            return self._remove(session, owner, chunk_ids, stash_originals, "pruned_on_request")

    def _remove(
        self,
        session: Session,
        owner: str,
        chunk_ids: Sequence[str],
        stash_originals: bool,
        reason: str,
    ) -> tuple[int, int]:
        originals = _Originals(session.id, owner, _now_ms())
        if stash_originals:
            for chunk_id in chunk_ids:
                originals.keep(session.entries[chunk_id], Action.STASH, (reason,), 0.0)
        change = Change(
            session.id,
            owner,
            removals=list(chunk_ids),
            stash=originals.stash,
            restash=originals.restash,
        )
        self._commit(session, change)
        return len(chunk_ids), session.tokens_total

    def chunks(self, owner: str, session_id: str, chunk_ids: Sequence[str]) -> list[Chunk]:
        """The live chunks of these ids, as registered (NotFound names unknown ids)."""
        validate.validate_ids(chunk_ids, "chunk_ids")
        session = self._session(owner, session_id)
        with session.lock:
            self._require_known(session, chunk_ids, "chunk_ids")
            return [session.entries[i].chunk for i in chunk_ids]

    def whole(self, owner: str, session_id: str, chunk_ids: Sequence[str]) -> list[str]:
        """Which of these ids the session holds with their original text (restored
        since they were stashed or shortened); unknown ids are not whole."""
        session = self._session(owner, session_id)
        with session.lock:
            entries = session.entries
            return [i for i in chunk_ids if i in entries and not entries[i].origin]

    @staticmethod
    def _require_known(session: Session, chunk_ids: Sequence[str], field: str) -> None:
        unknown = [i for i in chunk_ids if i not in session.entries]
        if unknown:
            raise NotFound(field, unknown, "no such chunks in the session")

    # ---- planning ------------------------------------------------------

    @staticmethod
    def _check_embedding(session: Session, embedding: Sequence[float]) -> None:
        if embedding and session.embedding_dim and len(embedding) != session.embedding_dim:
            raise InvalidArgument(
                "query_embedding",
                len(embedding),
                f"dimension differs from the session's {session.embedding_dim}",
            )

    def _scores(
        self,
        session: SessionView,
        terms: list[str],
        embedding: Sequence[float],
        marks: Marks,
        weights: Weights,
    ) -> Scores:
        return score_session(
            session,
            terms,
            tuple(embedding),
            marks,
            weights,
            self.config.recency_half_life_turns,
            self.config.old_generation_after,
            self.config.neighbour_share,
        )

    def _plan(self, session: Session, options: OptimizeOptions) -> Plan:
        """Mark; below the threshold that is all, else score and plan. Marking,
        scoring and planning read one snapshot of the session."""
        if options.strategy == Strategy.UNSPECIFIED:
            options = replace(options, strategy=Strategy.HYBRID)
        self._check_embedding(session, options.query_embedding)
        view = session.view()
        marks = mark(view, options.roots)
        if not is_triggered(view, options):
            return idle_plan(view, options, marks, self.tuning)
        terms = self.analyzer.terms(options.query)
        scores = self._scores(view, terms, options.query_embedding, marks, options.weights)
        query_terms = frozenset(terms)

        def trim(chunk_id: str, text: str, stash: str, goal: int, tokens: int) -> str:
            return self.trimmer.trim(chunk_id, text, stash, query_terms, goal, tokens)

        book = line_book(session) if options.strategy != Strategy.TRUNCATE else None
        return plan_session(
            view,
            options,
            scores,
            TextTools(trim, self.counter.count, book),
            self.tuning,
            options.incremental_batch or self.config.incremental_batch,
            self.config.old_generation_after,
        )

    def optimize(self, owner: str, session_id: str, options: OptimizeOptions) -> Plan:
        """Plan the prompt; unless dry_run, stash originals durably and apply."""
        started = time.perf_counter()
        validate.validate_options(options, self.config)
        session = self._session(owner, session_id)
        with session.lock:
            self._check_removable(session, options.delete_ids, options.roots, "delete_ids")
            plan = self._plan(session, options)
            if plan.triggered and not options.dry_run:
                self._apply(session, owner, plan)
        plan.server_ms = (time.perf_counter() - started) * 1000
        return plan

    def _check_removable(
        self, session: Session, chunk_ids: Sequence[str], roots: Roots, field: str
    ) -> None:
        """The one rule for removal asked for by id (`Optimize.delete_ids`, the MCP
        prune tool): LOCKED, pinned and root chunks are refused, each named with why.
        (`remove` is the client dropping chunks from its own history: no rule.)"""
        self._require_known(session, chunk_ids, field)
        if not chunk_ids:
            return
        is_root = mark(session.view(), roots).root
        refused = []
        for chunk_id in chunk_ids:
            entry = session.entries[chunk_id]
            if entry.chunk.gc_policy == GcPolicy.LOCKED:
                refused.append(f"{chunk_id} (LOCKED)")
            elif entry.chunk.pinned:
                refused.append(f"{chunk_id} (pinned)")
            elif is_root[entry.slot]:
                refused.append(f"{chunk_id} (root)")
        if refused:
            raise FailedPrecondition(
                field,
                refused,
                "LOCKED, pinned and root chunks are never removed on request "
                "(unpin a pinned one first)",
            )

    def _apply(self, session: Session, owner: str, plan: Plan) -> None:
        """Keep every original, then change the session, as one committed change."""
        originals = _Originals(session.id, owner, _now_ms(), plan_fingerprint(session.id, plan))
        d = plan.decisions
        upserts: list[StoredChunk] = []
        removals: list[str] = []
        shrinks = {Action.TRIM, Action.MASK}
        for i, action in enumerate(d.actions):
            if action in shrinks:
                entry = session.entries[d.chunk_ids[i]]
                origin = originals.keep(entry, action, d.reasons[i], d.scores[i])
                shrunk = replace(entry.chunk, text=d.replacement_texts[i], tokens=d.tokens_after[i])
                upserts.append(replace(_stored(entry), chunk=shrunk, origin=origin))
        for i, action in enumerate(d.actions):
            if action not in shrinks:
                entry = session.entries[d.chunk_ids[i]]
                removals.append(entry.chunk.id)
                if action != Action.DELETE:
                    originals.keep(entry, action, d.reasons[i], d.scores[i])
        change = Change(
            session.id,
            owner,
            upserts=upserts,
            removals=removals,
            stash=originals.stash,
            restash=originals.restash,
            collections=session.collections + 1,
        )
        self._commit(session, change)

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
        session = self._session(owner, session_id)
        with session.lock:
            self._check_embedding(session, query_embedding)
            view = session.view()
            terms = self.analyzer.terms(query)
            marks = mark(view, roots)
            scores = self._scores(view, terms, query_embedding, marks, weights)
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
        """
        started = time.perf_counter()
        validate.validate_chunks(chunks, self.config)
        validate.validate_options(options, self.config)
        tokens = self._count(chunks)
        session = self._stateless_session(chunks)
        with session.lock:
            session = self._sync_stateless(session, chunks, tokens)
            self._check_embeddings(session, chunks)
            self._check_removable(session, options.delete_ids, options.roots, "delete_ids")
            plan = self._plan(session, replace(options, dry_run=True))
        plan.server_ms = (time.perf_counter() - started) * 1000
        return plan

    def _stateless_session(self, chunks: Sequence[Chunk]) -> Session:
        first = f"{chunks[0].id}\0{chunks[0].text}" if chunks else ""
        key = hashlib.blake2b(first.encode(), digest_size=16).hexdigest()
        with self._stateless_lock:
            session = self._stateless.pop(key, None) or Session(key, "", self.analyzer)
            self._stateless[key] = session
            while len(self._stateless) > STATELESS_SESSIONS:
                self._stateless.popitem(last=False)
            return session

    def _sync_stateless(
        self, session: Session, chunks: Sequence[Chunk], tokens: list[int]
    ) -> Session:
        """A session holding exactly `chunks` in their order: the warm one
        brought up to date, or a fresh one when the order changed."""
        wanted = [c.id for c in chunks]
        present = set(wanted)
        for stale in [i for i in session.entries if i not in present]:
            session.remove(stale)
        for chunk, count in zip(chunks, tokens, strict=True):
            session.upsert(chunk, count, 0)
        if [session.slot_ids[s] for s in session.live_slots()] == wanted:
            return session
        fresh = Session(session.id, "", self.analyzer)
        for chunk, count in zip(chunks, tokens, strict=True):
            fresh.upsert(chunk, count, 0)
        with self._stateless_lock:
            self._stateless[session.id] = fresh
        return fresh

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
            self._stash_owner(owner, session_id)
        return self.store.search(owner, session_id, query, filters, limit, offset)

    def _stash_owner(self, owner: str, session_id: str) -> None:
        """A session's stash answers to its owner, live session or not."""
        validate.validate_session_id(session_id)
        owners = self.store.owners(session_id)
        session = self.registry.get(session_id)
        if session is not None:
            owners.add(session.owner)
        if not owners:
            raise NotFound("session_id", session_id, "no such session")
        if owners - {owner}:
            raise PermissionDenied("session_id", session_id, "session belongs to another client")

    def restore(
        self,
        owner: str,
        session_id: str,
        chunk_ids: Sequence[str],
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
        self._stash_owner(owner, session_id)
        session = self._session(owner, session_id, create=True)
        with session.lock:
            originals = self._originals(session, owner, chunk_ids)
            missing = [i for i in chunk_ids if i not in originals]
            if missing:
                raise NotFound("chunk_ids", missing, "not in the session's stash")
            groups = sorted({e.chunk.group_id for e in originals.values() if e.chunk.group_id})
            members = self.store.stashed_group_members(owner, session_id, groups)
            originals.update(self._originals(session, owner, members))
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
            now = _now_ms()
            # ids the session no longer places (after a restart or a compaction) come
            # back at the end, in conversation order
            returning = sorted(
                (e.chunk for e in back if e.chunk.id not in session),
                key=lambda c: (c.turn, c.created_at_ms),
            )
            slots = session.slots_for([c.id for c in returning])
            upserts = []
            for stashed, count in zip(back, counts, strict=True):
                current = session.entries.get(stashed.chunk.id)
                upserts.append(
                    StoredChunk(
                        replace(stashed.chunk, tokens=count),
                        current.slot if current else slots[stashed.chunk.id],
                        current.born if current else session.collections,
                        now,
                    )
                )
            unstash = [e.stash_id for e in back]
            self._commit(session, Change(session_id, owner, upserts=upserts, unstash=unstash))
            return sorted(originals), session.tokens_total

    def _originals(
        self, session: Session, owner: str, chunk_ids: Sequence[str]
    ) -> dict[str, StashEntry]:
        """The original a restore brings back for each of these ids that has one."""
        shown = {
            session.entries[i].origin: i
            for i in chunk_ids
            if i in session.entries and session.entries[i].origin
        }
        found: dict[str, StashEntry] = {}
        for origin, entry in self.store.stash_entries(owner, session.id, list(shown)).items():
            found[shown[origin]] = entry
        gone = [i for i in chunk_ids if i not in session.entries]
        found.update(self.store.latest_stashed(owner, session.id, gone))
        return found

    # ---- session level -----------------------------------------------------

    def stats(self, owner: str, session_id: str) -> SessionStats:
        session = self._session(owner, session_id)
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

    def delete_session(self, owner: str, session_id: str, purge_stash: bool) -> bool:
        session = self._session(owner, session_id)
        with session.lock:
            deleted = self.store.delete_session(owner, session_id, purge_stash)
            self.registry.drop(session_id)
            return deleted

    def export_session(self, owner: str, session_id: str) -> str:
        """The session and its stash as JSON (round-trips through import)."""
        self._stash_owner(owner, session_id)
        return json.dumps(
            self.store.export_session(owner, session_id), ensure_ascii=False, indent=2
        )

    def import_session(self, owner: str, data: str, overwrite: bool) -> tuple[str, int]:
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
        empty = Session(exported.session.session_id, owner, self.analyzer)
        self._check_capacity(empty, chunks)
        self._check_embeddings(empty, chunks)
        counts = self._count(chunks)
        counted = [
            replace(c, chunk=replace(c.chunk, tokens=n))
            for c, n in zip(exported.session.chunks, counts, strict=True)
        ]
        exported = replace(exported, session=replace(exported.session, chunks=counted))
        session_id = exported.session.session_id
        live = self.registry.get(session_id)
        with self._load_lock, live.lock if live is not None else nullcontext():
            self.store.import_session(exported, overwrite)
            self.registry.drop(session_id)
        session = self._session(owner, session_id)
        return session_id, len(session)


@dataclass
class _Originals:
    """The stash side of one change: originals to store, and stored originals
    whose excerpt or placeholder got a newer decision."""

    session_id: str
    owner: str
    now_ms: int
    plan_id: str = ""
    stash: list[StashEntry] = field(default_factory=list)
    restash: list[Restash] = field(default_factory=list)

    def keep(self, entry: Entry, action: Action, reasons: tuple[str, ...], score: float) -> str:
        """Keep the original of a chunk leaving the window or shrinking: a new
        entry, or, when its text is already an excerpt or placeholder, the newer
        decision on the entry holding its original. Returns that stash id."""
        if entry.origin:
            self.restash.append(
                Restash(entry.origin, action, reasons, score, self.now_ms, self.plan_id)
            )
            return entry.origin
        stash_id = entry.stash_id()
        self.stash.append(
            StashEntry(
                stash_id,
                self.session_id,
                self.owner,
                entry.chunk,
                action,
                reasons,
                score,
                self.now_ms,
                self.plan_id,
            )
        )
        return stash_id


def _entry(item: StoredChunk) -> Entry:
    return Entry(
        item.chunk, item.seq, item.chunk.tokens, item.born, item.last_touched_ms, item.origin
    )


def _stored(entry: Entry) -> StoredChunk:
    return StoredChunk(entry.chunk, entry.slot, entry.born, entry.last_touched_ms, entry.origin)


def _status(chunk_id: str, changed: set[str], existed: set[str]) -> UpsertStatus:
    if chunk_id not in changed:
        return UpsertStatus.UNCHANGED
    return UpsertStatus.UPDATED if chunk_id in existed else UpsertStatus.ADDED


def stash_id_of(chunk: Chunk) -> str:
    return stash_id(chunk.id, chunk.text)


def plan_fingerprint(session_id: str, plan: Plan) -> str:
    """A stable id of a plan: the same state and request give the same id."""
    digest = hashlib.blake2b(digest_size=8)
    digest.update(session_id.encode())
    decisions = plan.decisions
    for chunk_id, action in zip(decisions.chunk_ids, decisions.actions, strict=True):
        digest.update(f"{chunk_id}:{action}".encode())
    return digest.hexdigest()
