"""A gateway call as the usage ledger keeps it: what the headers said, what the
provider reported, and how long the gateway took."""

from __future__ import annotations

import time

from ctxopt.api.gateway.hosts import host_of
from ctxopt.api.gateway.prepared import Prepared
from ctxopt.api.gateway.usage import Reported
from ctxopt.usage.ledger import UsageRow


def call_row(
    prepared: Prepared,
    *,
    owner: str,
    provider: str,
    status: int,
    reported: Reported,
    user_agent: str,
) -> UsageRow:
    """The row of one model call. In shadow mode the original went upstream, so
    the tokens forwarded are the tokens sent (the headers report the plan)."""
    log = prepared.log
    forwarded = prepared.tokens_before if log.get("mode") == "shadow" else prepared.tokens_after
    added = log.get("ms")
    return UsageRow(
        at_ms=int(time.time() * 1000),
        front="gateway",
        host=str(log.get("host") or host_of(user_agent).value),
        provider=provider,
        model=str(log.get("model") or ""),
        session_id=prepared.session_id,
        owner=owner,
        outcome=prepared.outcome.value,
        status=status,
        tokens_sent=prepared.tokens_before,
        tokens_forwarded=forwarded,
        input_tokens=reported.prompt,
        cached_tokens=reported.cached,
        output_tokens=reported.output,
        added_ms=float(added) if isinstance(added, int | float) else 0.0,
    )
