"""A real `ctxopt serve` process on loopback (port 0) for integration tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from ctxopt.v1 import ctxopt_pb2_grpc as pb_grpc

CTXOPT = Path(sys.executable).parent / "ctxopt"
STARTUP_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


@dataclass
class ServerProcess:
    process: subprocess.Popen[str]
    address: str
    log: Path
    gateway_url: str = ""  # with --gateway-addr: the `ctxopt gateway listening on` URL

    def stub(self, channel: grpc.Channel) -> pb_grpc.ContextOptimizerStub:
        return pb_grpc.ContextOptimizerStub(channel)  # type: ignore[no-untyped-call]

    def terminate(self) -> int:
        """SIGTERM (graceful drain) and the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(STOP_TIMEOUT_S)

    def log_text(self) -> str:
        return self.log.read_text()


def start_server(
    data_dir: Path, log: Path, *args: str, env: dict[str, str] | None = None
) -> ServerProcess:
    """Start `ctxopt serve` and wait for the `ctxopt listening on` line."""
    command = [str(CTXOPT), "serve", "--addr", "127.0.0.1:0", "--data-dir", str(data_dir), *args]
    with log.open("a") as stderr:
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, **(env or {})},
        )
    watchdog = threading.Timer(STARTUP_TIMEOUT_S, process.kill)
    watchdog.start()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("ctxopt listening on "):
                address = line.split()[-1]
                gateway = ""
                if "--gateway-addr" in args:
                    gateway = process.stdout.readline().split()[-1]
                # keep draining stdout so the server never blocks on a full pipe
                threading.Thread(target=process.stdout.read, daemon=True).start()
                return ServerProcess(process, address, log, gateway)
    finally:
        watchdog.cancel()
    process.wait(STOP_TIMEOUT_S)
    code = process.returncode
    raise AssertionError(f"server exited ({code}) before listening:\n{log.read_text()}")


@contextmanager
def serving(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[ServerProcess]:
    """A server for the block; stopped gracefully afterwards (killed if stuck)."""
    server = start_server(tmp_path / "data", tmp_path / "server.log", *args, env=env)
    try:
        yield server
    finally:
        try:
            server.terminate()
        except subprocess.TimeoutExpired:
            server.process.kill()
            raise
