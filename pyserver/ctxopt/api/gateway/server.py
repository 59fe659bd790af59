"""The gateway's HTTP server: uvicorn on a daemon thread beside gRPC.

The socket is bound before the thread starts, so a busy port or a bad address
fails `ctxopt serve` at once with one line, and port 0 is known at once.
Plaintext only on loopback unless TLS is configured or `--insecure` is given,
as for gRPC.
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from ctxopt.api.auth import Tokens
from ctxopt.api.gateway.app import build_app
from ctxopt.api.gateway.pipeline import Pipeline
from ctxopt.config import GATEWAY_MODES, Config
from ctxopt.engine import Engine
from ctxopt.errors import FailedPrecondition
from ctxopt.usage.log import UsageLog

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
STARTUP_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0


class GatewayServer:
    def __init__(
        self, engine: Engine, config: Config, tokens: Tokens, usage: UsageLog | None = None
    ) -> None:
        if config.gateway_mode not in GATEWAY_MODES:
            raise FailedPrecondition(
                "gateway_mode", config.gateway_mode, f"must be one of {', '.join(GATEWAY_MODES)}"
            )
        host, _, port = config.gateway_addr.rpartition(":")
        tls = bool(config.tls_cert and config.tls_key)
        if not host or not port.isdigit():
            raise FailedPrecondition("gateway_addr", config.gateway_addr, "must be HOST:PORT")
        if host not in LOOPBACK_HOSTS and not tls and not config.insecure:
            raise FailedPrecondition(
                "gateway_addr",
                config.gateway_addr,
                "plaintext off loopback: give --tls-cert/--tls-key, or --insecure to accept it",
            )
        bare = host.strip("[]")
        family = socket.AF_INET6 if ":" in bare else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            # accepted sockets inherit it: uvicorn writes a response's head and body
            # apart, and without it the body waits for the client's delayed ACK (40 ms)
            self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socket.bind((bare, int(port)))
            self._socket.listen(128)
        except OSError as e:
            self._socket.close()
            raise FailedPrecondition(
                "gateway_addr", config.gateway_addr, f"cannot bind: {e.strerror or e}"
            ) from None
        bound = self._socket.getsockname()[1]
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://{host}:{bound}"
        self.pipeline = Pipeline(engine, config)
        app = build_app(self.pipeline, config, tokens, usage)
        self._server = uvicorn.Server(
            uvicorn.Config(
                app,
                # uvloop and httptools (C) over asyncio and h11 (Python): the event
                # loop and the HTTP parsing are most of a relayed call's own CPU
                loop="uvloop",
                http="httptools",
                log_level="warning",
                access_log=False,
                lifespan="on",
                ssl_certfile=config.tls_cert or None,
                ssl_keyfile=config.tls_key or None,
                timeout_graceful_shutdown=int(config.grace_seconds) or 1,
            )
        )
        self._thread = threading.Thread(target=self._run, name="ctxopt-gateway", daemon=True)

    def _run(self) -> None:
        self._server.run(sockets=[self._socket])

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self._server.started and self._thread.is_alive():
            if time.monotonic() > deadline:
                raise FailedPrecondition("gateway_addr", self.url, "did not start in time")
            time.sleep(0.01)
        if not self._server.started:
            raise FailedPrecondition("gateway_addr", self.url, "failed to start")

    def stop(self) -> None:
        """Stop accepting, let running relays finish (within the grace time)."""
        self._server.should_exit = True
        self._thread.join(STOP_TIMEOUT_S)
        self._socket.close()
