"""Many clients at once through the gateway (or straight to the fake provider),
every wire format, streamed and unary; each answer checked byte for byte
against what the provider sent, the server's RSS and gRPC health sampled.

Each client keeps one conversation per format that grows by two turns a call
and starts over after `MAX_TURNS`, so sessions are extended, shortened and
replanned as an agent's are. Shared by tests/gateway/test_load.py and
benchmarks/gateway/load.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.gateway.traffic import FORMATS, conversation, send
from tests.gateway.upstream import FakeUpstream

MAX_TURNS = 21
SAMPLE_S = 0.25
HEALTH_TIMEOUT_S = 5.0


@dataclass
class LoadReport:
    clients: int
    seconds: float = 0.0
    calls: int = 0
    errors: list[str] = field(default_factory=list)  # what went wrong, one line each
    latencies_ms: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)  # the server's, every SAMPLE_S
    health: list[str] = field(default_factory=list)  # gRPC health, every SAMPLE_S

    @property
    def calls_per_s(self) -> float:
        return self.calls / self.seconds if self.seconds else 0.0


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def drive(
    base: str,
    upstream: FakeUpstream,
    *,
    clients: int,
    seconds: float,
    through_gateway: bool = True,
    server_pid: int | None = None,
    grpc_address: str = "",
) -> LoadReport:
    """`clients` threads sending for `seconds` to `base` (the gateway's URL, or the
    fake's with `through_gateway` False); with `server_pid`/`grpc_address`, the
    server's RSS and health are sampled meanwhile."""
    report = LoadReport(clients)
    lock = threading.Lock()
    stop = threading.Event()
    end = time.monotonic() + seconds

    def client(number: int) -> None:
        limits = httpx.Limits(max_keepalive_connections=1)
        with httpx.Client(timeout=120, limits=limits) as http:
            n = 0
            while time.monotonic() < end:
                fmt = FORMATS[n % len(FORMATS)]
                turns = 3 + 2 * ((n // len(FORMATS)) % ((MAX_TURNS - 1) // 2))
                call = conversation(fmt, turns, streamed=(n // 2) % 2 == 0, seed=number)
                if not through_gateway:  # the provider's own path: the prefix goes
                    call = type(call)(call.path.split("/", 1)[1], call.body)
                test_id = f"{number}.{n}.{through_gateway}"
                started = time.perf_counter()
                try:
                    status, answer = send(http, base, call, test_id)
                    problem = "" if status == 200 else f"{fmt}: status {status}"
                    if not problem and answer != upstream.answers.get(test_id):
                        problem = f"{fmt}: the answer differs from what the provider sent"
                except httpx.HTTPError as error:
                    problem = f"{fmt}: {type(error).__name__}: {error}"
                elapsed = (time.perf_counter() - started) * 1000
                with lock:
                    report.calls += 1
                    report.latencies_ms.append(elapsed)
                    if problem:
                        report.errors.append(problem)
                n += 1

    def sample(what: Callable[[], None]) -> None:
        while not stop.is_set():
            what()
            stop.wait(SAMPLE_S)

    samplers: list[Callable[[], None]] = []
    if server_pid is not None:
        samplers.append(lambda: report.rss_mb.append(rss_mb(server_pid)))
    channel = grpc.insecure_channel(grpc_address) if grpc_address else None
    if channel is not None:
        health = health_pb2_grpc.HealthStub(channel)

        def check() -> None:
            try:
                answer = health.Check(health_pb2.HealthCheckRequest(), timeout=HEALTH_TIMEOUT_S)
                report.health.append(
                    health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
                )
            except grpc.RpcError as error:
                report.health.append(str(error.code()))

        samplers.append(check)
    started = time.monotonic()
    with ThreadPoolExecutor(clients + len(samplers)) as pool:
        watching = [pool.submit(sample, what) for what in samplers]
        for done in [pool.submit(client, number) for number in range(clients)]:
            done.result()
        report.seconds = time.monotonic() - started
        stop.set()
        for watcher in watching:
            watcher.result()
    if channel is not None:
        channel.close()
    return report


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0
