"""What the ledger's rows add up to: calls, tokens and money per day, host, model or session.

Tokens are ctxopt's counts, as the `x-ctxopt-tokens-before/-after` headers give
them: sent is the prompt as the host sent it, forwarded as it went on, saved the
difference. Money is input only, at list prices (`ctxopt.prices`), and only for
calls whose response reported the provider's usage ("priced" calls):

- billed: the provider's reported input at its cache rules, the cached part at
  the cache-read share and the rest at the write share
  (`ModelPrice.input_cost`);
- unpruned: the same call as the host sent it, under the same rules. While a
  session's calls went on unchanged (this one and the one before it), that is
  exactly what was billed. Otherwise the host's prompt is sized in the
  provider's tokens (sent x the provider's count / ours for this call), and its
  cached prefix is the previous unpruned prompt of the session when that came
  less than the cache's lifetime before, was at least the cacheable minimum,
  and the prompt did not shrink (a host that compacted starts cold), and when
  the session's calls have shown a cache read so far (a host that marks no
  cache breakpoints is never cached, pruned or not);
- saved: unpruned less billed (negative when collections cost more cache
  writes than they saved).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from enum import Enum

from ctxopt.errors import InvalidArgument
from ctxopt.prices import CHECKED, price_of
from ctxopt.usage.ledger import UsageRow

MAX_UTC_OFFSET_MINUTES = 24 * 60  # time zones span -12 h to +14 h
# Outcomes of a call whose prompt ctxopt changed (the gateway's, then a plan's)
OPTIMIZED_OUTCOMES = frozenset({"optimized", "landed", "over_target"})


class GroupBy(Enum):
    DAY = "day"
    HOST = "host"
    MODEL = "model"
    SESSION = "session"


@dataclass(slots=True)
class Totals:
    """One row of a report, or its total."""

    key: str = ""
    calls: int = 0
    calls_optimized: int = 0
    tokens_sent: int = 0
    tokens_forwarded: int = 0
    tokens_saved: int = 0
    priced_calls: int = 0
    input_tokens: int = 0  # the provider's counts, over the priced calls
    cached_tokens: int = 0
    output_tokens: int = 0
    billed_input_usd: float = 0.0
    unpruned_input_usd: float = 0.0
    saved_usd: float = 0.0

    def add(self, row: UsageRow, billed: float | None, unpruned: float | None) -> None:
        self.calls += 1
        self.calls_optimized += row.outcome in OPTIMIZED_OUTCOMES
        self.tokens_sent += row.tokens_sent
        self.tokens_forwarded += row.tokens_forwarded
        self.tokens_saved += row.tokens_saved
        if billed is None or unpruned is None:
            return
        self.priced_calls += 1
        self.input_tokens += row.input_tokens or 0
        self.cached_tokens += row.cached_tokens or 0
        self.output_tokens += row.output_tokens or 0
        self.billed_input_usd += billed
        self.unpruned_input_usd += unpruned
        self.saved_usd = self.unpruned_input_usd - self.billed_input_usd

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("billed_input_usd", "unpruned_input_usd", "saved_usd"):
            out[name] = round(float(getattr(self, name)), 6)
        return out


@dataclass(slots=True)
class Report:
    by: GroupBy
    since_ms: int
    rows: list[Totals] = field(default_factory=list)
    total: Totals = field(default_factory=Totals)
    prices_checked: str = CHECKED

    def as_json(self) -> dict[str, object]:
        """The `ctxopt gain --json` document."""
        return {
            "by": self.by.value,
            "since_unix_ms": self.since_ms,
            "prices_checked": self.prices_checked,
            "rows": [r.as_json() for r in self.rows],
            "total": self.total.as_json(),
        }


def report(
    rows: Sequence[UsageRow], by: GroupBy, *, since_ms: int = 0, utc_offset_minutes: int = 0
) -> Report:
    """Totals per `by` key (days in the caller's time zone, `utc_offset_minutes`),
    most saved first (days: in date order), over the rows from `since_ms` on.
    `rows` are oldest first and may start earlier: those only warm the cache
    estimate of the calls after them.

    >>> row = UsageRow(0, "gateway", "other", "openai", "gpt-5", "s", "", "optimized", 200,
    ...                2_000_000, 1_000_000, 1_000_000, 0, 100)
    >>> r = report([row], GroupBy.MODEL)
    >>> r.total.tokens_saved, r.total.billed_input_usd, r.total.saved_usd
    (1000000, 1.25, 1.25)
    """
    if abs(utc_offset_minutes) > MAX_UTC_OFFSET_MINUTES:
        raise InvalidArgument("utc_offset_minutes", utc_offset_minutes, "not a time zone's offset")
    offset = timedelta(minutes=utc_offset_minutes)
    groups: dict[str, Totals] = {}
    total = Totals(key="total")
    for row, billed, unpruned in priced(rows):
        if row.at_ms < since_ms:
            continue
        key = _key(row, by, offset)
        group = groups.get(key)
        if group is None:
            group = groups[key] = Totals(key=key)
        group.add(row, billed, unpruned)
        total.add(row, billed, unpruned)
    if by == GroupBy.DAY:
        ordered = sorted(groups.values(), key=lambda t: t.key)
    else:
        ordered = sorted(groups.values(), key=lambda t: (-t.tokens_saved, t.key))
    return Report(by, since_ms, ordered, total)


def priced(rows: Iterable[UsageRow]) -> Iterable[tuple[UsageRow, float | None, float | None]]:
    """Each row with its billed and unpruned input in dollars (None: not priced);
    see the module doc for the rules."""
    last: dict[tuple[str, str], tuple[UsageRow, int | None]] = {}  # session -> row, unpruned
    caching: set[tuple[str, str]] = set()  # sessions whose calls have read a cache
    for row in rows:
        session = (row.owner, row.session_id)
        previous = last.get(session)
        if row.cached_tokens:
            caching.add(session)
        if not row.provider or row.input_tokens is None:
            last[session] = (row, None)
            yield row, None, None
            continue
        price = price_of(row.model, row.provider)
        cached = min(row.cached_tokens or 0, row.input_tokens)
        billed = price.input_cost(uncached=row.input_tokens - cached, cached=cached)
        rules = price.cache
        fresh = previous is not None and row.at_ms - previous[0].at_ms <= rules.ttl_seconds * 1000
        unchanged = row.tokens_sent == row.tokens_forwarded
        if unchanged and (not fresh or _unchanged(previous)):
            last[session] = (row, row.input_tokens)
            yield row, billed, billed
            continue
        scale = row.input_tokens / row.tokens_forwarded if row.tokens_forwarded > 0 else 1.0
        size = round(row.tokens_sent * scale)
        prefix = 0
        warm = fresh and session in caching
        if warm and previous is not None and row.tokens_sent >= previous[0].tokens_sent:
            before = previous[1]
            prefix = round(previous[0].tokens_sent * scale) if before is None else before
            prefix = min(prefix, size) if prefix >= rules.min_cacheable_tokens else 0
        last[session] = (row, size)
        yield row, billed, price.input_cost(uncached=size - prefix, cached=prefix)


def _unchanged(previous: tuple[UsageRow, int | None] | None) -> bool:
    return previous is None or previous[0].tokens_sent == previous[0].tokens_forwarded


def _key(row: UsageRow, by: GroupBy, offset: timedelta) -> str:
    if by == GroupBy.DAY:
        return (datetime.fromtimestamp(row.at_ms / 1000, UTC) + offset).date().isoformat()
    if by == GroupBy.HOST:
        return row.host or "-"
    if by == GroupBy.MODEL:
        return row.model or "-"
    return row.session_id or "-"
