"""The gateway under load: many clients, every wire format, streamed and unary.

Every answer reaches its client byte for byte (so event for event) as the fake
provider sent it, the server's memory stays bounded and its gRPC health stays
SERVING throughout. `CTXOPT_LOAD_SECONDS` (default 20) lengthens the run, e.g.
to 60 for the full minute.
"""

from __future__ import annotations

import os

from tests.gateway.load import drive
from tests.gateway.upstream import FakeUpstream
from tests.serverproc import ServerProcess

CLIENTS = 16
SECONDS = float(os.environ.get("CTXOPT_LOAD_SECONDS", "20"))
# What the server may grow by once warm (after the first quarter of the run): its
# sessions' indexes and token caches fill as conversations grow, a leak grows on
WARM_GROWTH_MB = 96.0


def test_many_clients_in_every_format_get_what_the_provider_sent(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    report = drive(
        gateway.gateway_url,
        upstream,
        clients=CLIENTS,
        seconds=SECONDS,
        server_pid=gateway.process.pid,
        grpc_address=gateway.address,
    )
    assert report.calls >= CLIENTS * 4, "the load never got going"
    assert report.errors == [], f"{len(report.errors)} of {report.calls}: {report.errors[:5]}"
    assert report.health and set(report.health) == {"SERVING"}
    warm = report.rss_mb[len(report.rss_mb) // 4]
    assert max(report.rss_mb) <= warm + WARM_GROWTH_MB, (warm, max(report.rss_mb))
