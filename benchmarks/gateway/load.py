"""Gateway under load: calls/s, added latency and RSS for a number of clients.

    python -m benchmarks.gateway.load [--smoke] [--clients 1,4,16,32] [--seconds 60] [--out PATH]

For each number of clients, the same traffic (tests/gateway/load.py: every
wire format, streamed and unary, conversations growing to 21 turns) goes for
`--seconds` straight to the fake provider, then through a fresh `ctxopt serve
--gateway-addr`; what the gateway adds is the difference of the two runs' p50
and p99. Clients, the server and the fake share the machine's cores. Prints a
table; writes JSON.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from tests.gateway.conftest import upstream_env
from tests.gateway.load import drive, percentile
from tests.gateway.upstream import fake_upstream
from tests.serverproc import serving

RESULTS = Path(__file__).resolve().parents[1] / "results"


def measure(clients: int, seconds: float) -> dict[str, Any]:
    with fake_upstream() as upstream, tempfile.TemporaryDirectory() as tmp:
        direct = drive(
            upstream.url, upstream, clients=clients, seconds=seconds, through_gateway=False
        )
        env = upstream_env(upstream)
        with serving(Path(tmp), "--gateway-addr", "127.0.0.1:0", env=env) as server:
            gateway = drive(
                server.gateway_url,
                upstream,
                clients=clients,
                seconds=seconds,
                server_pid=server.process.pid,
                grpc_address=server.address,
            )
    p50, p99 = (percentile(gateway.latencies_ms, q) for q in (0.5, 0.99))
    direct_p50, direct_p99 = (percentile(direct.latencies_ms, q) for q in (0.5, 0.99))
    return {
        "clients": clients,
        "seconds": round(gateway.seconds, 1),
        "calls": gateway.calls,
        "calls_per_s": round(gateway.calls_per_s, 1),
        "direct_calls_per_s": round(direct.calls_per_s, 1),
        "errors": len(gateway.errors) + len(direct.errors),
        "p50_ms": round(p50, 1),
        "p99_ms": round(p99, 1),
        "added_p50_ms": round(p50 - direct_p50, 1),
        "added_p99_ms": round(p99 - direct_p99, 1),
        "rss_start_mb": round(gateway.rss_mb[0], 1) if gateway.rss_mb else None,
        "rss_peak_mb": round(max(gateway.rss_mb), 1) if gateway.rss_mb else None,
        "health": sorted(set(gateway.health)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="2 clients for 2 s")
    parser.add_argument("--clients", default="1,4,16,32")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=RESULTS / "gateway_load.json")
    args = parser.parse_args()
    counts = [2] if args.smoke else [int(c) for c in args.clients.split(",")]
    seconds = 2.0 if args.smoke else args.seconds
    rows = [measure(clients, seconds) for clients in counts]
    head = ("clients", "calls/s", "direct/s", "errors", "p50", "+p50", "p99", "+p99", "RSS MB")
    print(" ".join(f"{h:>9}" for h in head))
    for r in rows:
        cells = (
            r["clients"],
            r["calls_per_s"],
            r["direct_calls_per_s"],
            r["errors"],
            r["p50_ms"],
            r["added_p50_ms"],
            r["p99_ms"],
            r["added_p99_ms"],
            f"{r['rss_start_mb']}-{r['rss_peak_mb']}",
        )
        print(" ".join(f"{c:>9}" for c in cells))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"smoke": args.smoke, "runs": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
