"""The `ctxopt gain` run in docs/savings.md: three SWE-agent trajectories sent
through a real gateway in three wire formats (as Claude Code, an OpenAI client and
Gemini CLI), to the test suite's fake provider; prints the headers' sums, then
`ctxopt gain --by host` and `/metrics`' request and saving counters.

    PYTHONPATH=. .venv/bin/python scripts/gain_demo.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from benchmarks.gateway.histories import load, request
from tests.gateway.checks import PREFIX_PATHS
from tests.gateway.conftest import upstream_env
from tests.gateway.upstream import fake_upstream
from tests.serverproc import serving

AGENTS = {
    "anthropic": "claude-cli/2.1.332 (external, sdk-cli)",
    "openai-chat": "python-httpx/0.28",
    "gemini": "GeminiCLI/0.61.0/gemini-2.5-pro",
}
STEPS, EVERY, WINDOW_SHARE = 30, 3, 8  # calls every 3 steps; window 1/8 of the last prompt


def main() -> None:
    ctxopt = str(Path(sys.executable).parent / "ctxopt")
    tmp = Path(tempfile.mkdtemp())
    with (
        fake_upstream() as upstream,
        serving(tmp, "--gateway-addr", "127.0.0.1:0", env=upstream_env(upstream)) as server,
    ):
        sums = [0, 0, 0]
        for trajectory in load(limit=3):
            for fmt, agent in AGENTS.items():
                last = min(len(trajectory.steps), STEPS)
                window = len(json.dumps(request(fmt, trajectory, last))) // WINDOW_SHARE
                prefix, path = PREFIX_PATHS[fmt]
                headers = {
                    "x-ctxopt-session": f"{trajectory.instance_id[:18]}-{fmt}",
                    "x-ctxopt-window-tokens": str(window),
                    "user-agent": agent,
                }
                for steps in range(0, last + 1, EVERY):
                    body = request(fmt, trajectory, steps)
                    answer = httpx.post(
                        f"{server.gateway_url}/{prefix}/{path}", json=body, headers=headers
                    )
                    before = int(answer.headers["x-ctxopt-tokens-before"])
                    after = int(answer.headers["x-ctxopt-tokens-after"])
                    sums = [sums[0] + 1, sums[1] + before, sums[2] + after]
        calls, sent, forwarded = sums
        saved = sent - forwarded
        print(f"headers: {calls} calls, sent {sent:,}, forwarded {forwarded:,}, saved {saved:,}")
        gain = [ctxopt, "gain", "--addr", server.address, "--by", "host"]
        print(subprocess.run(gain, capture_output=True, text=True, check=True).stdout)
        metrics = httpx.get(f"{server.gateway_url}/metrics").text.splitlines()
        wanted = ("ctxopt_gateway_requests_total", "ctxopt_gateway_tokens_saved_total")
        print("\n".join(line for line in metrics if line.startswith(wanted)))


if __name__ == "__main__":
    main()
