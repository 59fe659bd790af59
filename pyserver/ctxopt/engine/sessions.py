"""Live sessions: the registry in memory, backed by the store.

A stored session comes into memory on first use after a restart; every
write goes through `commit` (the store first, then memory), and a session
whose dead slots pile up is compacted. Ownership is the store's one rule
(`store.require_owner`), asked of the store and of memory alike.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from itertools import islice, pairwise
from operator import attrgetter
from weakref import WeakKeyDictionary

from ctxopt import validate
from ctxopt.config import Config
from ctxopt.engine.collector import Collector
from ctxopt.engine.kept_facts import KeptFacts, lacking, stored_facts
from ctxopt.engine.kept_plans import made_from
from ctxopt.engine.quiet import QuietWriter
from ctxopt.errors import CtxoptError, NotFound
from ctxopt.scoring import line_value
from ctxopt.scoring.lineblob import LineBlobs, TextFacts, read_kept, remembered, tell
from ctxopt.session import Registry, Session
from ctxopt.session.columns import Entry
from ctxopt.store import (
    Change,
    StashEntry,
    Store,
    StoredChunk,
    StoredSession,
    entry_of,
    require_owner,
    stored_of,
)
from ctxopt.text.bm25 import BM25Index
from ctxopt.text.countblob import CountBlobs
from ctxopt.text.indexblob import IndexBlobs, chunks_digest, read_state
from ctxopt.text.termblob import DocTerms, TermBlobs
from ctxopt.tokens import count_key

log = logging.getLogger(__name__)

KEPT_COUNTS_PER_CHUNK = 4
MIN_KEPT_COUNTS = 1024


def _live(session: Session) -> tuple[list[Entry], bytes]:
    """The session's live entries in slot order, and their `chunks_digest`."""
    live = sorted(session.entries.values(), key=attrgetter("slot"))
    return live, chunks_digest([e.slot for e in live], [e.chunk.text for e in live])


def _kept_counts(session: Session) -> int:
    """How many token counts a session keeps: a plan counts at most a few
    excerpts per live chunk, and older ones are of texts gone or changed."""
    return max(MIN_KEPT_COUNTS, KEPT_COUNTS_PER_CHUNK * len(session.entries))


class LiveSessions:
    """Sessions by id, loaded on first use; `load_lock` guards bringing a stored
    session into memory (and an import replacing one)."""

    def __init__(self, config: Config, store: Store, collector: Collector) -> None:
        self.config = config
        self.store = store
        self.analyzer = analyzer = collector.analyzer  # the collector's: a plan reads the index
        self.counter = counter = collector.counter
        self.plans = collector.kept
        self.count_tokens = collector.noted.count  # what plans count with (kept sizes)
        self.count_blobs = CountBlobs(counter)
        self.registry = Registry(analyzer)
        self.term_blobs = TermBlobs(analyzer)
        self.line_blobs = LineBlobs()
        self.index_blobs = IndexBlobs(self.term_blobs.analyzer_digest)
        self.writer = QuietWriter("ctxopt-line-facts")
        self._kept: WeakKeyDictionary[Session, KeptFacts] = WeakKeyDictionary()
        self.load_lock = threading.Lock()

    def get(self, owner: str, session_id: str, *, create: bool = False) -> Session:
        """The session, loaded when stored, created when `create`; NotFound
        otherwise, PermissionDenied when another owner holds the id."""
        validate.validate_session_id(session_id)
        session = self.registry.get(session_id)
        if session is None:
            session = self._load(session_id)
        if session is None:
            if not create:
                raise NotFound("session_id", session_id, "no such session")
            require_owner(self.store.owners(session_id), owner, session_id)
            if len(self.registry) >= self.config.max_sessions:
                raise validate.too_many(
                    "session_id", session_id, "sessions", self.config.max_sessions
                )
            session = self.registry.create(session_id, owner)
        require_owner({session.owner}, owner, session_id)
        return session

    def check_stash_owner(self, owner: str, session_id: str) -> None:
        """A session's stash answers to its owner, live session or not."""
        validate.validate_session_id(session_id)
        owners = self.store.owners(session_id)
        session = self.registry.get(session_id)
        if session is not None:
            owners.add(session.owner)
        if not owners:
            raise NotFound("session_id", session_id, "no such session")
        require_owner(owners, owner, session_id)

    def stashed_originals(
        self, session: Session, owner: str, chunk_ids: Sequence[str]
    ) -> dict[str, StashEntry]:
        """The original a restore brings back for each of these ids that has one:
        the one a shown excerpt names, else the newest stashed."""
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

    def _load(self, session_id: str) -> Session | None:
        """Bring a stored session into memory on first use after a restart."""
        with self.load_lock:
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
        entries = [entry_of(item) for item in stored.chunks]
        texts = [item.chunk.text for item in stored.chunks]
        kept_any = (stored.index, stored.facts, stored.plan) != (None, None, None)
        chunks = chunks_digest([e.slot for e in entries], texts) if kept_any else b""
        plan = self.plans.opened(stored.plan, made_from(stored.rows, chunks))
        index_body, facts_body = self._kept_bodies(stored, entries, chunks)
        if index_body is not None and facts_body is not None and plan is not None:
            # the kept plan may answer the first call, which then reads neither
            # (~15 ms per 1,000 chunks): read them on the index's first use
            kept = (index_body, facts_body)
            read = partial(self._read_kept, session, stored.counts, kept, entries, texts)
            session.restore_kept(entries, read)
        else:
            self._read_rows(session, stored, entries, texts, (index_body, facts_body))
        # the rows path (the session settled) reads no kept book
        self.plans.restore(session, plan, lines=not session.settled)
        return session

    def _read_rows(
        self,
        session: Session,
        stored: StoredSession,
        entries: list[Entry],
        texts: list[str],
        kept: tuple[bytes | None, bytes | None],
    ) -> None:
        """Restore the session from its rows, with what the last process kept
        of it where trusted (`kept`: the bodies `_kept_bodies` trusted), each
        text's own blobs elsewhere."""
        self._tell_counts(stored.counts)
        index = None if kept[0] is None else read_state(kept[0])
        facts = None if kept[1] is None else read_kept(texts, kept[1])
        whole = index is not None and facts is not None  # as kept: nothing to keep again
        if facts is None:
            decode = self.line_blobs.decode
            facts = [decode(t, i.line_blob) for t, i in zip(texts, stored.chunks, strict=True)]
        if index is not None:
            session.restore_kept(entries, index)
        else:
            decode_terms = self.term_blobs.decode
            docs = [decode_terms(t, i.term_blob) for t, i in zip(texts, stored.chunks, strict=True)]
            session.restore_entries(entries, docs)
        self._tell_facts(session, entries, texts, facts)
        if whole and index is not None:
            self._as_kept(session, index)

    def _read_kept(
        self,
        session: Session,
        counts: bytes | None,
        kept: tuple[bytes, bytes],
        entries: list[Entry],
        texts: list[str],
    ) -> BM25Index:
        """The index of a session restored by `restore_kept` with no index yet,
        its counts and line facts told (`kept`: the bodies `_kept_bodies`
        trusted), and the line book and output sizes kept with its plan. An index
        that does not hold together after all is made from the texts, as a new
        one is; facts that do not, by the plans that read them."""
        self._tell_counts(counts)
        index, facts = read_state(kept[0]), read_kept(texts, kept[1])
        if facts is not None:
            self._tell_facts(session, entries, texts, facts)
        self.plans.restore_lines(session, self.count_tokens)
        if index is None:
            index = BM25Index()
            docs = [DocTerms.of(self.analyzer.terms(t)) for t in texts]
            slots = [e.slot for e in entries]
            index.set_docs_counts(slots, [d.terms for d in docs], [d.counts for d in docs])
        elif facts is not None:  # as kept: nothing to keep again
            self._as_kept(session, index)
        return index

    def _as_kept(self, session: Session, index: BM25Index) -> None:
        """Note the session's index and facts as the store keeps them (a
        close need not write them again)."""
        kept = self._kept.setdefault(session, KeptFacts())
        kept.snapshot = (index.version, bytes(kept.by_slot))

    def _tell_counts(self, blob: bytes | None) -> None:
        counts = self.count_blobs.decode(blob)
        if counts is not None:
            self.counter.tell(counts)

    def _tell_facts(
        self,
        session: Session,
        entries: list[Entry],
        texts: list[str],
        facts: Sequence[TextFacts | None],
    ) -> None:
        """Tell the line-fact caches the facts stored of these texts, and note
        which the store holds."""
        kept = self._kept.setdefault(session, KeptFacts())
        told: list[tuple[str, TextFacts]] = []
        for entry, text, made in zip(entries, texts, facts, strict=True):
            if made is not None:
                told.append((text, made))
                kept.hold(session.slot_by_id[entry.chunk.id], made.held)
        tell(told)

    def _kept_bodies(
        self, stored: StoredSession, entries: list[Entry], chunks: bytes
    ) -> tuple[bytes | None, bytes | None]:
        """The bodies of the index and the line facts the last process kept of
        the session as it closed (text/indexblob.py, scoring/lineblob.py;
        `chunks`: the live chunks' digest), not decoded yet; each None when
        absent or not to be trusted (format, analyzer, rules, chunks, checksum)."""
        if any(a.slot >= b.slot for a, b in pairwise(entries)):  # `restore_kept`'s rule
            return None, None
        return (
            self.index_blobs.state(stored.index, chunks),
            self.line_blobs.kept_facts(stored.facts, chunks),
        )

    def keep_line_facts(self, session: Session) -> None:
        """Store the line facts a plan made of the session's live texts (each
        text's once), so a restart reads them (scoring/lineblob.py). Skipped
        when the process made none since the last look. Encoding and writing
        them was ~10% of a session's first plan: a background thread does it
        after the plan returns (one at a time, in order: a later text's facts
        land after an earlier one's). A failed write only costs a restart the
        work, so it is logged, not raised. The caller holds the session's lock."""
        if not session.settled:  # a plan that made facts has read the index
            return
        made = (
            line_value.names_memo.misses,
            line_value.cited_memo.misses,
            line_value.profile_memo.misses,
        )
        kept = self._kept.setdefault(session, KeptFacts())
        if made == kept.made:
            return
        kept.made = made
        pending: list[tuple[str, str, TextFacts]] = []
        for slot, wanted in zip(*lacking(session, kept), strict=True):
            chunk = session.entry_at(slot).chunk
            facts = remembered(chunk.text)
            if not facts.held & wanted or facts.held & ~kept.held(slot) == 0:
                continue
            pending.append((chunk.id, chunk.text, facts))
            kept.hold(slot, facts.held)  # a failed write only costs a restart
        if pending:
            self.writer.submit(self._write_line_facts, session.id, pending)

    def keep_counts(self, session: Session, counted: Mapping[str, int]) -> None:
        """Store the token counts a plan of the session asked for, beside those
        of its earlier plans (the last `KEPT_COUNTS_PER_CHUNK` per live chunk),
        so a restart's first plan reads them (text/countblob.py). The
        background thread merges them into the stored ones, as it writes the
        line facts: no copy stays in memory. The caller holds the session's lock."""
        if counted:
            self.writer.submit(self._write_counts, session.id, counted, _kept_counts(session))

    def _write_counts(self, session_id: str, counted: Mapping[str, int], keep: int) -> None:
        try:
            counts = self.count_blobs.decode(self.store.plan_counts(session_id)) or {}
            new = False
            for text, n in counted.items():
                key = count_key(text)
                new = new or key not in counts
                counts.pop(key, None)  # noted again: the latest
                counts[key] = n
            if not new:
                return
            for key in list(islice(counts, max(0, len(counts) - keep))):
                del counts[key]
            self.store.keep_counts(session_id, self.count_blobs.encode(counts))
        except CtxoptError as err:
            log.warning("session %r: token counts not kept: %s", session_id, err)

    def _write_line_facts(self, session_id: str, pending: list[tuple[str, str, TextFacts]]) -> None:
        encode = self.line_blobs.encode
        rows = [(i, blob) for i, text, facts in pending if (blob := encode(text, facts))]
        try:
            self.store.keep_line_facts(session_id, rows)
        except CtxoptError as err:
            log.warning("session %r: line facts not kept: %s", session_id, err)

    def close(self) -> None:
        """Let the line facts under way reach the store, then keep each session
        whose index or stored line facts changed since it was loaded or kept:
        its index and its texts' line facts in one piece each
        (text/indexblob.py, `LineBlobs.encode_kept`), before the store closes.
        On close, not after each plan: every append changes the index, and
        writing it is ~9 ms per 1,000 chunks a request would wait for or
        share the CPU with."""
        self.writer.shutdown()
        for session in self.registry.sessions():
            with session.lock:
                self._keep_session(session)

    def _keep_session(self, session: Session) -> None:
        live: tuple[list[Entry], bytes] | None = None  # made once, by whichever needs it
        if self.plans.pending(session) and session.book_as_fresh():
            live = _live(session)
            try:
                rows = made_from(self.store.rows_digest(session.id), live[1])
                self.store.keep_plan(session.id, self.plans.encode(session, rows))
                self.plans.written(session)
            except CtxoptError as err:
                log.warning("session %r: last plan not kept: %s", session.id, err)
        if not session.settled:  # the index and facts read back are as kept
            return
        kept = self._kept.setdefault(session, KeptFacts())
        now = (session.index.version, bytes(kept.by_slot))
        if kept.snapshot == now:
            return
        entries, chunks = live or _live(session)
        facts = [stored_facts(e.chunk.text, kept.held(e.slot)) for e in entries]
        try:
            self.store.keep_session(
                session.id,
                self.index_blobs.encode(session.index, chunks),
                self.line_blobs.encode_kept(facts, chunks),
            )
        except CtxoptError as err:
            log.warning("session %r not kept: %s", session.id, err)
            return
        kept.snapshot = now

    def commit(self, session: Session, change: Change) -> None:
        """The one write path: the store first, then memory. A new text is
        analysed once, and its terms are stored with it (so a restart reads
        them instead of analysing it again)."""
        session.settle()  # what a restart read back is of the session before this change
        change, docs = self._with_terms(session, change)
        self.store.commit(change)
        self._forget_kept_facts(session, change)
        for chunk_id in change.removals:
            session.remove(chunk_id)
        decode = self.term_blobs.decode
        session.restore_entries(
            [entry_of(item) for item in change.upserts],
            [docs.get(i.chunk.id) or decode(i.chunk.text, i.term_blob) for i in change.upserts],
        )
        if change.collections is not None:
            session.collections = change.collections
        if change.removals and session.needs_compaction():
            self._compact(session, change.owner)

    def _forget_kept_facts(self, session: Session, change: Change) -> None:
        """The stored line facts of a chunk that goes or whose text changes
        name another text: they are no longer kept (a restart refuses them)."""
        kept = self._kept.get(session)
        if kept is None or not kept.by_slot:
            return
        for chunk_id in change.removals:
            entry = session.entries.get(chunk_id)
            if entry is not None:
                kept.hold(entry.slot, 0)
        for item in change.upserts:
            old = session.entries.get(item.chunk.id)
            if old is not None and old.chunk.text != item.chunk.text:
                kept.hold(old.slot, 0)

    def _with_terms(self, session: Session, change: Change) -> tuple[Change, dict[str, DocTerms]]:
        """`change` with the terms of each upserted text the session does not hold
        yet, and those terms by chunk id; a text it holds keeps its stored terms."""
        blobs = self.term_blobs
        docs: dict[str, DocTerms] = {}
        upserts: list[StoredChunk] = []
        for item in change.upserts:
            c, old = item.chunk, session.entries.get(item.chunk.id)
            if item.term_blob is None and (old is None or old.chunk.text != c.text):
                doc = docs[c.id] = blobs.analyse(c.text)
                blob = blobs.encode(c.text, doc)
                item = StoredChunk(c, item.seq, item.born, item.last_touched_ms, item.origin, blob)
            upserts.append(item)
        return (replace(change, upserts=upserts) if docs else change), docs

    def _compact(self, session: Session, owner: str) -> None:
        """Renumber the live chunks densely, in the store and then in memory. The
        write that led here already committed: a failure only leaves the slots as
        they were, so it is logged, not raised."""
        entries = session.compacted()
        try:
            self.store.commit(Change(session.id, owner, upserts=[stored_of(e) for e in entries]))
        except CtxoptError as err:
            log.warning("session %r not compacted: %s", session.id, err)
            return
        kept = self._kept.get(session)
        if kept is not None:
            moved = bytearray(len(entries))
            for e in entries:
                moved[e.slot] = kept.held(session.entries[e.chunk.id].slot)
            kept.by_slot = moved
        session.compact(entries)
