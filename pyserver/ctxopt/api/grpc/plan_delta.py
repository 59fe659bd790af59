"""Plan deltas: an Optimize answer that sends only what changed since the
plan the client holds.

A warm session's plans repeat: the same 1,000 kept ids and the same excerpt
texts, every call (a 167 KB response at 1,000 chunks, most of the call's
transport time and most of the client's decoding). A client that sets
`keep_plan` gets an id for each plan; the servicer keeps the last few per
session here (`PlanBook`, bounded); naming one as `base_plan_id` gets back the
kept ids and decisions as copy runs over that plan plus the entries it lacks
(`delta_to_pb`). As a session grows, most decisions change in their score
alone (recency moves), so scores travel as one packed list and a decision
whose other fields are unchanged is copied.

A delta is a function of the kept plan's content only, never of the session's
state, so it is right whatever happened to the session since; ids are random,
so one a restarted server never issued finds nothing and gets a full plan.
"""

from __future__ import annotations

import re
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ctxopt.api.grpc.convert import add_decisions, plan_header_pb
from ctxopt.errors import InvalidArgument
from ctxopt.model import Plan
from ctxopt.v1 import ctxopt_pb2 as pb

PLANS_PER_SESSION = 2  # the plan a client holds, and the one before if a reply was lost
# Bound on what all kept plans weigh together (bytes, roughly: ids, rows and
# excerpt texts); the least recently used plan goes first. ~150 plans of the
# TS builder's benchmark (1,000 chunks, 232 excerpts, ~210 KB each).
MAX_BOOK_BYTES = 32 * 1024 * 1024
_ID_BYTES = 64  # a kept id: list slot, str object
_ROW_BYTES = 200  # a decision's row tuple and its fields besides the text
_PLAN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_LITERAL = -1  # a run's start that takes entries from the response itself

# A decision without its score: what must match for it to be copied from the
# base plan (chunk id, action, tokens, tokens after, reasons, text, stash id,
# breakdown or None).
Row = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class KeptPlan:
    """What a client holds of one plan: the wire's kept ids and decisions."""

    kept_ids: list[str]
    rows: list[Row]
    scores: list[float]
    weight: int


def kept_plan(plan: Plan) -> KeptPlan:
    """The plan as the book keeps it and deltas compare it."""
    d = plan.decisions
    breakdowns = d.breakdowns if d.breakdowns is not None else [None] * len(d.chunk_ids)
    rows = list(
        zip(
            d.chunk_ids, d.actions, d.tokens, d.tokens_after, d.reasons,
            d.replacement_texts, d.stash_ids, breakdowns, strict=True,
        )
    )  # fmt: skip
    weight = (
        _ID_BYTES * len(plan.kept_ids)
        + _ROW_BYTES * len(rows)
        + sum(len(text) for text in d.replacement_texts)
    )
    return KeptPlan(list(plan.kept_ids), rows, list(d.scores), weight)


def check_request(keep_plan: bool, base_plan_id: str) -> None:
    """Rejects a base plan id no server could have issued, or one sent without keep_plan."""
    if not base_plan_id:
        return
    if not keep_plan:
        raise InvalidArgument("base_plan_id", base_plan_id, "needs keep_plan")
    if _PLAN_ID.fullmatch(base_plan_id) is None:
        raise InvalidArgument(
            "base_plan_id", base_plan_id, "not a plan id (1-64 letters, digits, '-' or '_')"
        )


class PlanBook:
    """The last `PLANS_PER_SESSION` plans of each (owner, session), within
    `MAX_BOOK_BYTES` overall; safe across the server's worker threads."""

    def __init__(self, max_bytes: int = MAX_BOOK_BYTES) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        # (owner, session, plan id) -> plan, least recently used first
        self._plans: OrderedDict[tuple[str, str, str], KeptPlan] = OrderedDict()
        self._by_session: dict[tuple[str, str], list[str]] = {}
        self._bytes = 0

    def get(self, owner: str, session_id: str, plan_id: str) -> KeptPlan | None:
        key = (owner, session_id, plan_id)
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None:
                self._plans.move_to_end(key)
            return plan

    def keep(self, owner: str, session_id: str, plan: KeptPlan) -> str:
        """Keeps `plan` and returns its new id."""
        plan_id = secrets.token_hex(8)
        with self._lock:
            self._plans[(owner, session_id, plan_id)] = plan
            self._bytes += plan.weight
            ids = self._by_session.setdefault((owner, session_id), [])
            ids.append(plan_id)
            while len(ids) > PLANS_PER_SESSION:
                self._drop((owner, session_id, ids[0]))
            while self._bytes > self.max_bytes and len(self._plans) > 1:
                self._drop(next(iter(self._plans)))
        return plan_id

    def _drop(self, key: tuple[str, str, str]) -> None:
        plan = self._plans.pop(key)
        self._bytes -= plan.weight
        session = key[:2]
        ids = self._by_session[session]
        ids.remove(key[2])
        if not ids:
            del self._by_session[session]


def _encode(base: list[Any], now: list[Any]) -> tuple[list[int], list[int]]:
    """`now` as (start, count) runs over `base`, and the indexes of its items
    the base lacks (the response's own entries, `_LITERAL` runs)."""
    if now == base:  # a repeated plan: element by element, mostly by identity
        return ([0, len(now)] if now else []), []
    index = {item: i for i, item in enumerate(base)}
    runs: list[int] = []
    literals: list[int] = []
    previous = -2  # no item before
    for i, item in enumerate(now):
        at = index.get(item, _LITERAL)
        if at == _LITERAL:
            literals.append(i)
        copy_on = at != _LITERAL and previous != _LITERAL and at == previous + 1
        if runs and (copy_on or at == _LITERAL == previous):
            runs[-1] += 1
        else:
            runs += (at, 1)
        previous = at
    return runs, literals


def delta_to_pb(plan: Plan, now: KeptPlan, base: KeptPlan) -> pb.OptimizeResponse:
    """`plan` as a delta against `base` (`now` is `kept_plan(plan)`); the
    caller sets plan_id and base_plan_id."""
    response = plan_header_pb(plan)
    runs, literals = _encode(base.kept_ids, now.kept_ids)
    response.kept_runs.extend(runs)
    response.kept_ids.extend([now.kept_ids[i] for i in literals])
    runs, literals = _encode(base.rows, now.rows)
    response.decision_runs.extend(runs)
    add_decisions(response, plan, literals)
    if now.scores != base.scores and _copied_score_moved(runs, base.scores, now.scores):
        response.decision_scores.extend(now.scores)
    return response


def _copied_score_moved(runs: list[int], base: list[float], now: list[float]) -> bool:
    """A copied decision comes with the base's score: did one of them move?"""
    at = 0
    for start, count in zip(runs[::2], runs[1::2], strict=True):
        if start != _LITERAL and base[start : start + count] != now[at : at + count]:
            return True
        at += count
    return False
