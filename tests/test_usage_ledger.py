"""Issue 32: the usage ledger (background writer, retention), its report (tokens
and money at list prices), its Prometheus metrics and `ctxopt gain`'s options."""

from __future__ import annotations

import doctest
import sqlite3
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from ctxopt.errors import InvalidArgument
from ctxopt.prices import price_of
from ctxopt.usage import gain, report
from ctxopt.usage.ledger import DAY_MS, Ledger, UsageRow
from ctxopt.usage.metrics import UsageMetrics
from ctxopt.usage.report import GroupBy

NOW_MS = 1_795_000_000_000


def row(
    at_s: float = 0,
    *,
    sent: int = 10_000,
    forwarded: int = 10_000,
    reported: int | None = None,
    cached: int = 0,
    session: str = "s",
    host: str = "claude-code",
    outcome: str = "below-threshold",
) -> UsageRow:
    """A call of `session` at NOW + `at_s`; the provider reports `reported` input
    tokens (default: what was forwarded)."""
    return UsageRow(
        at_ms=NOW_MS + int(at_s * 1000),
        front="gateway",
        host=host,
        provider="anthropic",
        model="claude-sonnet-4-6",
        session_id=session,
        owner="",
        outcome=outcome,
        status=200,
        tokens_sent=sent,
        tokens_forwarded=forwarded,
        input_tokens=forwarded if reported is None else reported,
        cached_tokens=cached,
        output_tokens=50,
        added_ms=3.0,
    )


def test_the_docstring_examples_hold() -> None:
    for module in (report, gain):
        assert doctest.testmod(module).failed == 0


def count_on_disk(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM usage").fetchone()[0])


def test_the_writer_commits_by_itself_and_close_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "ctxopt.db"
    ledger = Ledger(str(path), retention_days=90, clock=lambda: NOW_MS / 1000)
    ledger.record(row(1))
    deadline = time.monotonic() + 10
    while count_on_disk(path) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert count_on_disk(path) == 1, "written without a flush or a reader"
    for i in range(500):
        ledger.record(row(2 + i))
    ledger.close()
    assert count_on_disk(path) == 501
    again = Ledger(str(path), retention_days=90, clock=lambda: NOW_MS / 1000)
    assert [r.at_ms for r in again.rows("")] == [r.at_ms for r in map(row, range(1, 502))]
    assert again.rows("someone else") == []
    again.close()


def test_rows_past_the_retention_go_at_open(tmp_path: Path) -> None:
    path = str(tmp_path / "ctxopt.db")
    ledger = Ledger(path, retention_days=90, clock=lambda: NOW_MS / 1000)
    ledger.record(row(-91 * DAY_MS / 1000))
    ledger.record(row(-89 * DAY_MS / 1000))
    ledger.close()
    later = Ledger(path, retention_days=90, clock=lambda: NOW_MS / 1000)
    assert [r.at_ms for r in later.every_row()] == [NOW_MS - 89 * DAY_MS]
    later.close()


PRICE = price_of("claude-sonnet-4-6", "anthropic")


def test_a_session_sent_unchanged_saves_nothing_whatever_its_cache() -> None:
    rows = [row(0), row(10, sent=12_000, forwarded=12_000, cached=10_000)]
    totals = report.report(rows, GroupBy.SESSION).total
    billed = PRICE.input_cost(uncached=10_000, cached=0) + PRICE.input_cost(
        uncached=2_000, cached=10_000
    )
    assert totals.billed_input_usd == pytest.approx(billed)
    assert totals.saved_usd == 0 and totals.tokens_saved == 0


def test_a_pruned_call_is_priced_against_the_unpruned_prompt_in_the_providers_tokens() -> None:
    # the provider counts 10% more than ctxopt; the first call warmed a cache of 11,000
    rows = [
        row(0, reported=11_000, cached=0),
        row(60, sent=20_000, forwarded=8_000, reported=8_800, cached=2_000, outcome="optimized"),
    ]
    totals = report.report(rows, GroupBy.HOST).total
    unpruned = PRICE.input_cost(uncached=22_000 - 11_000, cached=11_000)
    billed = PRICE.input_cost(uncached=6_800, cached=2_000)
    assert totals.tokens_saved == 12_000 and totals.calls_optimized == 1
    assert totals.unpruned_input_usd - PRICE.input_cost(uncached=11_000, cached=0) == (
        pytest.approx(unpruned)
    )
    assert totals.saved_usd == pytest.approx(unpruned - billed)


def test_without_a_cache_read_in_the_session_the_unpruned_prompt_is_not_cached() -> None:
    rows = [row(0), row(60, sent=20_000, forwarded=8_000, outcome="optimized")]
    totals = report.report(rows, GroupBy.DAY).total
    assert totals.saved_usd == pytest.approx(PRICE.input_cost(uncached=12_000, cached=0))


def test_a_cache_older_than_its_lifetime_is_cold() -> None:
    gap = PRICE.cache.ttl_seconds + 1
    rows = [row(0, cached=1), row(gap, sent=20_000, forwarded=8_000, cached=0)]
    totals = report.report(rows, GroupBy.DAY).total
    assert totals.saved_usd == pytest.approx(PRICE.input_cost(uncached=12_000, cached=0))


def test_groups_days_in_the_callers_time_zone_and_calls_before_the_period_only_warm() -> None:
    midnight = datetime(2026, 11, 27, 23, 30).timestamp() * 1000 - NOW_MS
    rows = [row(midnight / 1000, session="a"), row(midnight / 1000 + 3600, session="b")]
    offset = datetime.now().astimezone().utcoffset() or timedelta()
    minutes = int(offset.total_seconds() // 60)
    local = report.report(rows, GroupBy.DAY, utc_offset_minutes=minutes)
    assert [r.key for r in local.rows] == ["2026-11-27", "2026-11-28"]
    later = report.report(rows, GroupBy.SESSION, since_ms=rows[1].at_ms)
    assert [r.key for r in later.rows] == ["b"] and later.total.calls == 1


def test_metrics_seeded_from_rows_equal_metrics_that_saw_them_live() -> None:
    rows = [row(i, sent=100 + i, forwarded=90, host=h) for i, h in enumerate(["codex", "other"])]
    live = UsageMetrics()
    for r in rows:
        live.observe(r)
    assert UsageMetrics(rows).exposition() == live.exposition()
    text = live.exposition().decode()
    assert 'ctxopt_gateway_tokens_saved_total{host="codex"} 10.0' in text
    assert 'ctxopt_gateway_added_seconds_bucket{host="other",le="0.005"} 1.0' in text


def test_since_takes_spans_and_dates() -> None:
    now = datetime(2026, 11, 27, 12, 0).astimezone()
    assert gain.since_ms("2w", now) == int((now - timedelta(weeks=2)).timestamp() * 1000)
    assert gain.since_ms(None, now) == 0
    assert gain.since_ms("2026-11-20", now) == int(
        datetime(2026, 11, 20).astimezone().timestamp() * 1000
    )
    with pytest.raises(InvalidArgument, match="--since"):
        gain.since_ms("last tuesday", now)


def test_an_offset_no_time_zone_has_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="utc_offset_minutes"):
        report.report([row(0)], GroupBy.DAY, utc_offset_minutes=2_000_000_000)
