"""The TypeScript-client leg: `ts-client/dist/bench/latency.js`, rebuilt with
`npm run build` when it is missing or older than its sources."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from benchmarks.bench_grpc import summary

TS_CLIENT = Path(__file__).resolve().parents[2] / "ts-client"
TS_LATENCY = TS_CLIENT / "dist" / "bench" / "latency.js"
TIMEOUT_S = 3_600.0

Latency = dict[str, float]


def ensure_built() -> None:
    sources = [*TS_CLIENT.glob("src/**/*.ts"), TS_CLIENT / "bench" / "latency.ts"]
    newest = max(path.stat().st_mtime for path in sources)
    if not TS_LATENCY.exists() or TS_LATENCY.stat().st_mtime < newest:
        subprocess.run(["npm", "run", "--silent", "build"], cwd=TS_CLIENT, check=True)


def over_typescript(
    address: str, session_id: str, repeats: int, context_limit: int, query: str
) -> dict[str, Latency]:
    """`Score` and `Optimize` (forced dry run) through `CtxoptClient`, per call."""
    ensure_built()
    result = subprocess.run(
        ["node", str(TS_LATENCY), address, session_id, str(repeats), str(context_limit), query],
        capture_output=True,
        text=True,
        check=True,
        timeout=TIMEOUT_S,
    )
    measured = json.loads(result.stdout)
    return {"score": summary(measured["score_ms"]), "optimize": summary(measured["optimize_ms"])}
