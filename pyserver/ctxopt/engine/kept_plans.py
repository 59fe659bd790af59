"""A session's last plan, kept with the session as the process closes, so that
a restart answers the same call on the unchanged session as a warm engine
does: with that plan, made by nobody again.

A plan is a function of the session's rows, its collection count, the
request, the engine's knobs (`Config`'s planner fields and `Tuning`), the
token counter and the code (`Collector.plan` memoises it on the first three
in memory). At a clean close each session whose last plan was made from its
state as it is (no change since) writes it (`LiveSessions.close`) with a
digest of the rest. A restart trusts the blob only when its format, the
engine's digest (the package's version and source, the knobs, the counter's mode
and its count of a probe text), the digest of the session's rows
(`made_from`: every column of every live row but the term and line caches;
any write since, a crash after one, an import or another session's blob
differs) and its checksum match; and answers with it only a
call whose collection count and request (a digest of the options' `repr`)
are the plan's, before any change of the session. Anything else: the plan
is made as before. Nothing in it names code: plain data, `marshal`ed.

With the plan, the session's line book (`LineBook.state`: its lines, marks
and cached answers, the live book's, kept only when a fresh book would mark
the same) and the sizes its outputs had (`planner/kept_sizes.py`): a
restart's first plan of another call (after an append, another query)
starts from them as a warm engine's would; read only on the session's first
change or other plan (`restore_lines`), never by the call the plan answers.

Layout: magic `CP`, format (1 byte), the engine's digest (8), the rows'
digest (16), the collection count (uint64), the request's digest (8), the
marshalled pair of the marshalled plan and the marshalled pair of the book
and the sizes (None when the last plan made none), and a checksum (8) of
everything before it.
Format 1 (the plan alone) is not read: its restart plans again.
"""

from __future__ import annotations

import hashlib
import marshal
import struct
import threading
from contextlib import suppress
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

import ctxopt
from ctxopt.config import Config
from ctxopt.model import (
    Action,
    Breakdown,
    Decisions,
    OptimizeOptions,
    Plan,
    PlanOutcome,
    Repair,
)
from ctxopt.planner.kept_sizes import kept_sizes, restore_sizes
from ctxopt.planner.knobs import Tuning
from ctxopt.planner.line_levels import TokenCount
from ctxopt.session import Session
from ctxopt.text.sealed import DIGEST, digest, opened, seal
from ctxopt.tokens import TokenCounter

FORMAT = 2
_MAGIC = b"CP"
ROWS_DIGEST = 16  # bytes of `made_from`
_HEAD = struct.Struct(f"<2sB{DIGEST}s{ROWS_DIGEST}sQ{DIGEST}s")
_PROBE = "def total(x):\n    return x * 1.25  # naïve 日本語 🙂\n\n   The end. "


@cache
def code_digest() -> bytes:
    """A digest of the package's version and source (~8 ms, once per process):
    a plan kept by other code may decide otherwise."""
    root = Path(ctxopt.__file__).parent
    made = hashlib.blake2b(ctxopt.__version__.encode(), digest_size=DIGEST)
    for path in sorted(root.rglob("*.py")):
        made.update(str(path.relative_to(root)).encode())
        made.update(path.read_bytes())
    return made.digest()


def made_from(rows: bytes, chunks: bytes) -> bytes:
    """What a kept plan was made from: the digests of the session's rows less
    their texts (`store.rows.rows_digest`) and of its live chunks' slots and
    texts (`text/indexblob.chunks_digest`, which a restart makes anyway)."""
    return hashlib.blake2b(rows + chunks, digest_size=ROWS_DIGEST).digest()


def request_digest(options: OptimizeOptions) -> bytes:
    """The request's digest: its `repr` names every field, floats exactly."""
    return digest(repr(options).encode("utf-8", "surrogatepass"))


def plain_plan(plan: Plan) -> tuple[Any, ...]:
    """`plan` as `marshal`-able plain data (its timing left out)."""
    d = plan.decisions
    breakdowns = None if d.breakdowns is None else [tuple(b) for b in d.breakdowns]
    return (
        plan.kept_ids,
        d.chunk_ids,
        [int(a) for a in d.actions],
        d.tokens,
        d.tokens_after,
        d.scores,
        breakdowns,
        d.reasons,
        d.replacement_texts,
        d.stash_ids,
        plan.tokens_before,
        plan.tokens_after,
        plan.target_tokens,
        plan.outcome.value,
        [(r.rule, r.chunk_id, r.detail) for r in plan.repairs],
        plan.explanation,
        plan.mandatory_tokens,
    )


def plan_of(plain: tuple[Any, ...]) -> Plan:
    """The plan `plain_plan` wrote (ValueError, TypeError when it is not one)."""
    (kept, ids, actions, tokens, after, scores, breakdowns, reasons, texts, stash) = plain[:10]
    columns = (actions, tokens, after, scores, reasons, texts, stash)
    if any(len(c) != len(ids) for c in columns) or (
        breakdowns is not None and len(breakdowns) != len(ids)
    ):
        raise ValueError("decision columns differ in length")
    decisions = Decisions(
        chunk_ids=ids,
        actions=[Action(a) for a in actions],
        tokens=tokens,
        tokens_after=after,
        scores=scores,
        breakdowns=None if breakdowns is None else [Breakdown(*b) for b in breakdowns],
        reasons=reasons,
        replacement_texts=texts,
        stash_ids=stash,
    )
    before, tokens_after, target, outcome, repairs, explanation, mandatory = plain[10:]
    return Plan(
        kept_ids=kept,
        decisions=decisions,
        tokens_before=before,
        tokens_after=tokens_after,
        target_tokens=target,
        outcome=PlanOutcome(outcome),
        repairs=[Repair(*r) for r in repairs],
        explanation=explanation,
        mandatory_tokens=mandatory,
    )


@dataclass(frozen=True, slots=True)
class _Made:
    """What a plan was made from, besides the rows: the session's revision (its
    state in this process), collection count and the request."""

    revision: int
    collections: int
    request: bytes


class KeptPlans:
    """Each session's last plan as the collector made it, and the one a
    restart read back (thread-safe)."""

    def __init__(self, config: Config, tuning: Tuning, counter: TokenCounter) -> None:
        knobs = (
            config.recency_half_life_turns,
            config.old_generation_after,
            config.neighbour_share,
            config.incremental_batch,
            tuning,
            counter.mode,
            counter.count(_PROBE),
        )
        self._engine = digest(code_digest() + repr(knobs).encode())
        self._last: WeakKeyDictionary[Session, tuple[_Made, Plan]] = WeakKeyDictionary()
        self._read: WeakKeyDictionary[Session, tuple[_Made, bytes]] = WeakKeyDictionary()
        # the kept book and sizes of a session whose kept plan was trusted, not read yet
        self._lines: WeakKeyDictionary[Session, bytes] = WeakKeyDictionary()
        # what the plan in the store was made from (a plan is a function of it)
        self._written: WeakKeyDictionary[Session, _Made] = WeakKeyDictionary()
        self._lock = threading.Lock()

    def note(self, session: Session, options: OptimizeOptions, plan: Plan) -> None:
        """The plan just made of `session` as it is, for `options`."""
        made = _Made(session.revision, session.collections, request_digest(options))
        with self._lock:
            self._last[session] = (made, plan)

    def read_back(self, session: Session, options: OptimizeOptions) -> Plan | None:
        """The plan the last process kept, when it answers `options` on the
        session as loaded (not changed since)."""
        with self._lock:
            found = self._read.get(session)
        if found is None:
            return None
        made, body = found
        if (made.revision, made.collections) != (session.revision, session.collections):
            with self._lock:
                self._read.pop(session, None)  # changed: it can no longer answer
            return None
        if made.request != request_digest(options):
            return None
        try:
            plan = plan_of(marshal.loads(body))
        except (ValueError, TypeError, EOFError):
            return None
        with self._lock:
            self._read.pop(session, None)  # the collector holds it now, as a warm engine would
            self._written[session] = made  # in the store already
        return plan

    def pending(self, session: Session) -> bool:
        """Whether the session's last plan is of its state as it is and not kept yet."""
        with self._lock:
            last, written = self._last.get(session), self._written.get(session)
        return (
            last is not None
            and last[0] != written
            and (last[0].revision, last[0].collections) == (session.revision, session.collections)
        )

    def encode(self, session: Session, rows: bytes) -> bytes | None:
        """The blob of the session's last plan (`pending`), made from `rows`
        (`made_from`); None when there is none or it is not plain data."""
        with self._lock:
            last = self._last.get(session)
        if last is None:
            return None
        made, plan = last
        try:
            body = marshal.dumps(plain_plan(plan))
        except ValueError:  # not plain data: a restart makes it again
            return None
        try:
            sizes = kept_sizes(session.lines, partial(_text_at, session))
            body = marshal.dumps((body, marshal.dumps((session.lines.state(), sizes))))
        except ValueError:  # not plain data: a restart makes the book and sizes again
            body = marshal.dumps((body, None))
        head = _HEAD.pack(_MAGIC, FORMAT, self._engine, rows, made.collections, made.request)
        return seal(head + body)

    def written(self, session: Session) -> None:
        """The session's last plan is now in the store."""
        with self._lock:
            last = self._last.get(session)
            if last is not None:
                self._written[session] = last[0]

    def opened(self, blob: bytes | None, rows: bytes) -> bytes | None:
        """The body of a kept plan of this engine made from `rows` (its
        checksum holds), else None: what `restore` takes."""
        body = opened(blob, head_size=_HEAD.size)
        if body is None:
            return None
        head = _HEAD.unpack_from(body)[:4]
        return body if head == (_MAGIC, FORMAT, self._engine, rows) else None

    def restore(self, session: Session, body: bytes | None, *, lines: bool) -> None:
        """Hold the kept plan of a session just loaded (`body`: what `opened`
        gave of its blob, checked once: the blob is mostly the line book),
        and its book and sizes when `lines` (`restore_lines` will read them)."""
        if body is None:
            return
        collections, request = _HEAD.unpack_from(body)[4:]
        made = _Made(session.revision, collections, request)
        try:
            plan, kept_lines = marshal.loads(body[_HEAD.size :])
        except (ValueError, TypeError, EOFError):
            return
        if not isinstance(plan, bytes) or not isinstance(kept_lines, bytes | None):
            return
        with self._lock:
            self._read[session] = (made, plan)
            if kept_lines is not None and lines:
                self._lines[session] = kept_lines

    def restore_lines(self, session: Session, count_tokens: TokenCount) -> None:
        """Hold the line book kept with the session's plan as the session's,
        and remember the output sizes kept with it as that book's last plan's,
        once, before the session's first change or any plan that reads its
        index (`Session.settle`): the session is as loaded, so each text is
        the one they were made of. What is not what a close wrote is made
        again by the next plan, the book and the sizes each on its own."""
        with self._lock:
            body = self._lines.pop(session, None)
        if body is None:
            return
        try:
            book, sizes = marshal.loads(body)
        except (ValueError, TypeError, EOFError):
            return
        texts = {entry.slot: entry.chunk.text for entry in session.entries.values()}
        # else the book stays empty: its first sync fills it
        with suppress(ValueError, TypeError, KeyError, IndexError):
            session.lines.restore(book, texts)
        if sizes is None:
            return
        try:
            restore_sizes(
                session.lines,
                sizes,
                partial(_live_text, session),
                session.n_slots,
                session.analyzer,
                count_tokens,
            )
        except (ValueError, TypeError, KeyError, IndexError):
            return  # the next plan remakes every size


def _text_at(session: Session, slot: int) -> str | None:
    """The text of the live chunk at `slot`, None when none is live there."""
    chunk_id = session.slot_ids[slot] if slot < session.n_slots else None
    entry = session.entries.get(chunk_id) if chunk_id is not None else None
    return None if entry is None or entry.slot != slot else entry.chunk.text


def _live_text(session: Session, slot: int) -> str:
    """`_text_at`, KeyError when no chunk is live at `slot`."""
    text = _text_at(session, slot)
    if text is None:
        raise KeyError(slot)
    return text
