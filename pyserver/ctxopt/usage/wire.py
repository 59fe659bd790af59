"""A usage report on the wire (GetUsage) and back, for the server and `ctxopt gain`."""

from __future__ import annotations

from dataclasses import fields

from ctxopt.usage.report import GroupBy, Report, Totals
from ctxopt.v1 import ctxopt_pb2 as pb

GROUPS = {
    GroupBy.DAY: pb.USAGE_GROUP_DAY,
    GroupBy.HOST: pb.USAGE_GROUP_HOST,
    GroupBy.MODEL: pb.USAGE_GROUP_MODEL,
    GroupBy.SESSION: pb.USAGE_GROUP_SESSION,
}
_BY_WIRE: dict[int, GroupBy] = {int(v): k for k, v in GROUPS.items()}
_NAMES = [f.name for f in fields(Totals)]


def group_from_pb(value: int) -> GroupBy:
    """The grouping of a request (an unknown value groups by day, as unset does)."""
    return _BY_WIRE.get(value, GroupBy.DAY)


def report_to_pb(report: Report, retention_days: int) -> pb.GetUsageResponse:
    return pb.GetUsageResponse(
        rows=[_totals_to_pb(t) for t in report.rows],
        total=_totals_to_pb(report.total),
        prices_checked=report.prices_checked,
        retention_days=retention_days,
    )


def report_from_pb(answer: pb.GetUsageResponse, by: GroupBy, since_ms: int) -> Report:
    return Report(
        by,
        since_ms,
        [_totals_from_pb(t) for t in answer.rows],
        _totals_from_pb(answer.total),
        answer.prices_checked,
    )


def _totals_to_pb(totals: Totals) -> pb.UsageTotals:
    return pb.UsageTotals(**{name: getattr(totals, name) for name in _NAMES})


def _totals_from_pb(message: pb.UsageTotals) -> Totals:
    return Totals(**{name: getattr(message, name) for name in _NAMES})
