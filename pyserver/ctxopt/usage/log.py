"""The one door the fronts record a call through: the ledger and its metrics."""

from __future__ import annotations

import time
from typing import Literal

from ctxopt.model import Plan
from ctxopt.prices import MODEL_PRICES
from ctxopt.usage.ledger import Ledger, UsageRow
from ctxopt.usage.metrics import UsageMetrics
from ctxopt.usage.report import GroupBy, Report, report

# A report reads this much before its period: the calls that warm its first calls' cache.
WARMUP_MS = max(p.cache.ttl_seconds for p in MODEL_PRICES.values()) * 1000
CALLS_SHOWN = 1000  # a session's latest calls the dashboard charts


class UsageLog:
    """The usage ledger of a server's data directory, and its metrics."""

    def __init__(self, db_path: str, *, retention_days: int) -> None:
        """`db_path`: the store's database file (":memory:" for tests)."""
        self.ledger = Ledger(db_path, retention_days=retention_days)
        self.metrics = UsageMetrics(self.ledger.every_row())

    def record(self, row: UsageRow) -> None:
        """Queue the call's row (written off the caller's path) and count it."""
        self.ledger.record(row)
        self.metrics.observe(row)

    def record_plan(
        self, owner: str, session_id: str, plan: Plan, *, front: Literal["grpc", "mcp"]
    ) -> None:
        """One gRPC Optimize or OptimizeContext call, or an MCP `prune auto`: a plan
        with no model call behind it (its host is the front)."""
        self.record(
            UsageRow(
                at_ms=int(time.time() * 1000),
                front=front,
                host=front,
                provider="",
                model="",
                session_id=session_id,
                owner=owner,
                outcome=plan.outcome.value,
                status=0,
                tokens_sent=plan.tokens_before,
                tokens_forwarded=plan.tokens_after,
                added_ms=plan.server_ms,
            )
        )

    def report(
        self, owner: str, by: GroupBy, *, since_ms: int = 0, utc_offset_minutes: int = 0
    ) -> Report:
        """`owner`'s calls from `since_ms` on, per `by` (see `usage.report`)."""
        rows = self.ledger.rows(owner, since_ms=max(0, since_ms - WARMUP_MS))
        return report(rows, by, since_ms=since_ms, utc_offset_minutes=utc_offset_minutes)

    def calls(self, owner: str, session_id: str) -> list[UsageRow]:
        """The session's latest calls (at most CALLS_SHOWN), oldest first."""
        return self.ledger.rows(owner, session_id=session_id)[-CALLS_SHOWN:]

    def close(self) -> None:
        """Write every row recorded (a clean shutdown loses none)."""
        self.ledger.close()
