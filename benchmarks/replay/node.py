"""The Node legs (benchmarks/replay/replay.mjs): Gemini CLI 0.61's own path
from @google/gemini-cli-core, and ctxopt against a real `ctxopt serve` on
127.0.0.1 port 0. ctxopt goes through the
adapter's `optimizeContents` (ctxopt-client/genai). Both packages come from
ts-client/ (gemini-cli-core is its dev dependency); the client is rebuilt when
its build is missing or older than its sources."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.latency.typescript import TS_CLIENT, ensure_built
from benchmarks.replay.sessions import Prompt, Session
from tests.serverproc import start_server

SCRIPT = Path(__file__).with_name("replay.mjs")
# ctxopt.v1.Strategy values the adapter may ask for
STRATEGIES = {"hybrid": 1, "budget": 2}
# ctxopt.v1.GcPolicy values for a tool-calling turn's text (UNSPECIFIED: its kind's policy)
STEP_TEXT_POLICIES = {"ephemeral": 4, "kind": 0}
GEMINI_CORE = TS_CLIENT / "node_modules" / "@google" / "gemini-cli-core" / "package.json"
MODEL = "gemini-2.5-pro"
NODE_TIMEOUT_S = 7_200
# Gemini CLI's summary (a <state_snapshot>) replaced by a fixed text of a typical summary's length.
SUMMARY_CHARS = 4_000
SUMMARY_TEXT = (
    "<state_snapshot>\n"
    + ("placeholder for the LLM summary of the compressed history; " * 80)[: SUMMARY_CHARS - 36]
    + "\n</state_snapshot>"
)


class NodeUnavailable(Exception):
    """Node, the built client or gemini-cli-core is missing; the message says what."""


@dataclass(frozen=True, slots=True)
class Job:
    """One session replayed by one Node method under one window."""

    method: str  # "gemini-cli-native" or "ctxopt"
    label: str  # where its figures go: the method's name, or a ctxopt setting of the sweep
    window_label: str
    session: Session
    window: int
    threshold_percent: float | None = None  # None: the adapter's default
    target_percent: float | None = None
    recent_turns: int | None = None
    strategy: str | None = None  # a key of STRATEGIES; None: the adapter's default
    step_text: str | None = None  # a key of STEP_TEXT_POLICIES; None: the adapter's default
    # gemini-cli-native: its tool-output masking thresholds (absolute tokens) scaled by
    # window / tokenLimit, as the window scales its compression threshold
    scaled_masking: bool = False

    def request(self, index: int) -> dict[str, Any]:
        return {
            "method": self.method,
            "session": f"replay-{index}-{self.session.instance_id}",
            "trajectory": self.session.instance_id,
            "window": self.window,
            "calls": list(self.session.calls),
            "thresholdPercent": self.threshold_percent,
            "targetPercent": self.target_percent,
            "recentTurns": self.recent_turns,
            "strategy": None if self.strategy is None else STRATEGIES[self.strategy],
            "stepTextPolicy": None
            if self.step_text is None
            else STEP_TEXT_POLICIES[self.step_text],
            "scaledMasking": self.scaled_masking,
        }


@dataclass(frozen=True, slots=True)
class NodeResult:
    prompts: list[Prompt]
    ms: list[float]
    outcomes: list[str]  # per call: what the method did (compression status, adapter outcome)
    setting: dict[str, float]  # ctxopt: the threshold and target percent in effect
    fates: list[dict[int, str]]  # ctxopt, per call: tool outputs not sent as is, by message index
    chunks: list[int]  # ctxopt, per call: the chunks the adapter maps


def check_node(ts_client: Path) -> None:
    """Node is there and `ts_client` is a built client with gemini-cli-core
    installed; the repository's own client is rebuilt when stale."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise NodeUnavailable("node and npm are not on PATH")
    core = ts_client / GEMINI_CORE.relative_to(TS_CLIENT)
    if not core.exists():
        raise NodeUnavailable(f"{core} is missing: run `make install` (ts-client npm install)")
    if ts_client.resolve() == TS_CLIENT.resolve():
        ensure_built()
    elif not (ts_client / "dist" / "src" / "index.js").exists():
        raise NodeUnavailable(f"{ts_client} is not built: run `npm run build` there")


@contextmanager
def ctxopt_server() -> Iterator[str]:
    """A real server as a user starts it: `ctxopt serve --addr 127.0.0.1:0`,
    its own data directory; yields its address."""
    with tempfile.TemporaryDirectory(prefix="ctxopt-replay-") as work:
        server = start_server(Path(work) / "data", Path(work) / "server.log")
        try:
            yield server.address
        finally:
            try:
                server.terminate()
            except subprocess.TimeoutExpired:
                server.process.kill()


def run_jobs(
    jobs: Sequence[Job], address: str, ts_client: Path = TS_CLIENT
) -> Iterator[tuple[Job, NodeResult]]:
    """Every job in one Node process, through the client at `ts_client`;
    results as they arrive."""
    if not jobs:
        return
    trajectories = {j.session.instance_id: j.session.raw() for j in jobs}
    request = {
        "address": address,
        "tsClient": str(ts_client.resolve()),
        "model": MODEL,
        "summaryText": SUMMARY_TEXT,
        "trajectories": trajectories,
        "jobs": [job.request(i) for i, job in enumerate(jobs)],
    }
    with tempfile.TemporaryDirectory(prefix="ctxopt-replay-gemini-") as home:
        env = {**os.environ, "GEMINI_CLI_HOME": home, "NO_COLOR": "1"}
        with (
            tempfile.TemporaryFile("w+", encoding="utf-8") as stdin,
            tempfile.TemporaryFile("w+", encoding="utf-8") as stderr,
        ):
            json.dump(request, stdin)
            stdin.seek(0)
            process = subprocess.Popen(
                ["node", str(SCRIPT)],
                cwd=home,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=env,
            )
            assert process.stdout is not None
            try:
                for line in process.stdout:
                    answer = json.loads(line)
                    yield jobs[answer["job"]], result_of(answer)
                if process.wait(NODE_TIMEOUT_S) != 0:
                    stderr.seek(0)
                    raise RuntimeError(
                        f"node {SCRIPT.name} failed: {stderr.read().strip()[-2000:]}"
                    )
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()


def result_of(answer: dict[str, Any]) -> NodeResult:
    texts = [(str(role), str(text)) for role, text in answer["texts"]]
    prompts = [tuple(texts[i] for i in ids) for ids in answer["prompts"]]
    return NodeResult(
        prompts,
        [float(ms) for ms in answer["ms"]],
        [str(o) for o in answer["outcomes"]],
        {str(k): float(v) for k, v in answer.get("setting", {}).items()},
        [{int(i): str(code) for i, code in call} for call in answer.get("fates", [])],
        [int(n) for n in answer.get("chunks", [])],
    )
