"""`ctxopt gain`: its options and what it prints (the call itself is `cli.client`'s)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta

from ctxopt.errors import InvalidArgument
from ctxopt.usage.report import GroupBy, Report, Totals

_SPAN = re.compile(r"^(\d+)\s*([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def since_ms(text: str | None, now: datetime) -> int:
    """`--since`: a span back from `now` (`30m`, `12h`, `7d`, `2w`) or a local date
    or time (`2026-11-20`, `2026-11-20T09:30`); None is everything.

    >>> now = datetime(2026, 11, 27, 12, 0).astimezone()
    >>> since_ms("1d", now) == int((now - timedelta(days=1)).timestamp() * 1000)
    True
    """
    if not text:
        return 0
    span = _SPAN.match(text.strip().lower())
    if span:
        start = now - timedelta(**{_UNITS[span[2]]: int(span[1])})
    else:
        try:
            start = datetime.fromisoformat(text.strip()).astimezone()
        except ValueError:
            raise InvalidArgument(
                "--since", text, "expected a span (30m, 12h, 7d, 2w) or a date (2026-11-20)"
            ) from None
    return int(start.timestamp() * 1000)


def render(report: Report, *, as_json: bool) -> str:
    """The JSON document, or a table with one line per group and the total."""
    if as_json:
        return json.dumps(report.as_json(), indent=2)
    if not report.total.calls:
        return "no calls recorded in this period"
    head = report.by.value
    width = max(len(head), *(len(r.key) for r in report.rows), len("total"))
    lines = [
        f"{head:<{width}}  {'calls':>7}  {'optimized':>9}  {'sent':>13}  {'forwarded':>13}"
        f"  {'saved':>13}  {'saved %':>7}  {'billed $':>10}  {'saved $':>9}",
    ]
    for totals in [*report.rows, report.total]:
        if totals is report.total:
            lines.append("-" * len(lines[0]))
        lines.append(_line(totals, width))
    priced = report.total.priced_calls
    lines += [
        "",
        "tokens: ctxopt's counts of the prompt as the host sent it and as it was forwarded",
        f"$: input at list prices (checked {report.prices_checked}) over the {priced:,} of "
        f"{report.total.calls:,} calls whose response reported usage;",
        "   saved against the same calls sent unpruned, under the same cache rules",
    ]
    return "\n".join(lines)


def _line(t: Totals, width: int) -> str:
    share = f"{100 * t.tokens_saved / t.tokens_sent:.1f}%" if t.tokens_sent else "-"
    billed = f"{t.billed_input_usd:,.4f}" if t.priced_calls else "-"
    saved = f"{t.saved_usd:,.4f}" if t.priced_calls else "-"
    return (
        f"{t.key:<{width}}  {t.calls:>7,}  {t.calls_optimized:>9,}  {t.tokens_sent:>13,}"
        f"  {t.tokens_forwarded:>13,}  {t.tokens_saved:>13,}  {share:>7}  {billed:>10}"
        f"  {saved:>9}"
    )


GROUP_CHOICES = [g.value for g in GroupBy]
