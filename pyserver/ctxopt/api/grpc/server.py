"""The gRPC server: ContextOptimizer plus standard health and reflection.

Lifecycle: `start()` binds and marks every service SERVING; `stop()` marks
them NOT_SERVING, gives load balancers `drain_notice_seconds` to notice, stops
accepting calls, lets in-flight calls finish within `grace_seconds`, then
flushes the store. `serve()` runs that from SIGTERM/SIGINT.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from ctxopt.api.auth import Tokens
from ctxopt.api.grpc.interceptors import AuthInterceptor, DecodeInterceptor
from ctxopt.api.grpc.service import ContextOptimizerService
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.errors import FailedPrecondition
from ctxopt.usage.log import UsageLog
from ctxopt.v1 import ctxopt_pb2 as pb
from ctxopt.v1 import ctxopt_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from ctxopt.api.gateway.server import GatewayServer

log = logging.getLogger("ctxopt.server")

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ContextOptimizer"].full_name
_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}


class Server:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.tokens = Tokens(config.auth_token)
        credentials = _credentials(config)
        self.engine = Engine(config)
        self.usage = UsageLog(self.engine.store.db_path, retention_days=config.usage_retention_days)
        self._mcp = None
        self.mcp_url = ""
        try:
            if config.mcp_addr:
                # imported only when asked for: the MCP SDK takes a second to import
                from ctxopt.api.mcp.server import serve_http

                self._mcp, self.mcp_url = serve_http(self.engine, self.usage, config)
        except BaseException:
            self._close_storage()
            raise
        self.health = health.HealthServicer(experimental_non_blocking=True)
        self._grpc = grpc.server(
            futures.ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="ctxopt"),
            # outermost first: see interceptors.py
            interceptors=[DecodeInterceptor(), AuthInterceptor(self.tokens, f"/{SERVICE_NAME}/")],
            options=[
                ("grpc.max_receive_message_length", config.max_message_bytes),
                ("grpc.max_send_message_length", config.max_message_bytes),
                ("grpc.so_reuseport", 0),  # a busy port is an error, not a shared one
            ],
        )
        # grpcio-tools writes no stubs for the *_grpc module, hence the ignore
        pb_grpc.add_ContextOptimizerServicer_to_server(  # type: ignore[no-untyped-call]
            ContextOptimizerService(self.engine, self.usage), self._grpc
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._grpc)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self._grpc
        )
        host = config.addr.rsplit(":", 1)[0]
        try:
            if credentials is None:
                port = self._grpc.add_insecure_port(config.addr)
            else:
                port = self._grpc.add_secure_port(config.addr, credentials)
        except RuntimeError:  # gRPC's text names GRPC_VERBOSITY, not the cause
            self._close_storage()
            raise FailedPrecondition(
                "addr", config.addr, "cannot bind: the address is in use or not on this machine"
            ) from None
        self.address = f"{host}:{port}"
        self.gateway: GatewayServer | None = None
        try:
            if config.gateway_addr:
                # imported only when asked for, as the MCP front (the HTTP stack)
                from ctxopt.api.gateway.server import GatewayServer

                self.gateway = GatewayServer(self.engine, config, self.tokens, self.usage)
        except BaseException:
            self._close_storage()
            raise
        self._stopped = threading.Event()

    def _close_storage(self) -> None:
        self.usage.close()
        self.engine.close()

    def start(self) -> None:
        self._grpc.start()
        if self.gateway is not None:
            self.gateway.start()
        for service in ("", SERVICE_NAME):
            self.health.set(service, health_pb2.HealthCheckResponse.SERVING)

    def stop(self) -> None:
        """Drain and stop; safe to call twice."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.health.enter_graceful_shutdown()  # every service NOT_SERVING
        time.sleep(self.config.drain_notice_seconds)
        self._grpc.stop(self.config.grace_seconds).wait()
        if self.gateway is not None:
            self.gateway.stop()
        self.usage.close()  # after the fronts: every call they answered has its row
        if self._mcp is None:
            self.engine.close()
        else:
            with self._mcp.lock:  # a running tool call finishes first
                self.engine.close()


def _credentials(config: Config) -> grpc.ServerCredentials | None:
    """TLS when configured; plaintext only on loopback unless --insecure."""
    if config.tls_cert or config.tls_key:
        if not (config.tls_cert and config.tls_key):
            raise FailedPrecondition("tls_cert", config.tls_cert, "TLS needs both cert and key")
        pair = (Path(config.tls_key).read_bytes(), Path(config.tls_cert).read_bytes())
        return grpc.ssl_server_credentials([pair])
    host = config.addr.rsplit(":", 1)[0]
    if host not in _LOOPBACK_HOSTS and not config.insecure:
        raise FailedPrecondition(
            "addr",
            config.addr,
            "plaintext off loopback: give --tls-cert/--tls-key, or --insecure to accept it",
        )
    return None


def serve(config: Config) -> None:
    """Run in the foreground until SIGTERM or SIGINT."""
    started = time.perf_counter()
    server = Server(config)
    server.start()
    requested = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: requested.set())
    # stdout: one line per listener, gRPC first; scripts and tests read the addresses
    print(f"ctxopt listening on {server.address}", flush=True)
    if server.gateway is not None:
        print(f"ctxopt gateway listening on {server.gateway.url}", flush=True)
    if server.mcp_url:
        print(f"ctxopt mcp listening on {server.mcp_url}", flush=True)
    log.info(
        "serving %s (data dir %s, %d workers, auth %s) in %.0f ms",
        SERVICE_NAME,
        config.resolved_data_dir,
        config.workers,
        "on" if server.tokens.required else "off",
        (time.perf_counter() - started) * 1000,
    )
    # Wake up now and then: the kernel may deliver SIGTERM to one of gRPC's
    # threads, and Python runs handlers only when the main thread runs again
    # (an untimed wait could sleep through it).
    while not requested.wait(0.2):
        pass
    log.info("draining (grace %.1f s)", config.grace_seconds)
    server.stop()
    log.info("stopped")
    sys.stdout.flush()
