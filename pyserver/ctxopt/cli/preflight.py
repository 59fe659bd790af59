"""Start-up checks, run before the slow imports (gRPC, numpy, the tokenizer):
a mistake in a setting is reported at once, in one line that names the
setting as the user gave it (`--addr` or `CTXOPT_ADDR`), and before anything
is created or bound.

gRPC would otherwise take `127.0.0.1:99999` modulo 65536, `127.0.0.1` as port
443, report a busy port or a bad key in its own log lines, and the store would
report a data directory that is a file as "File exists".
"""

from __future__ import annotations

import errno
import os
import re
import socket
import ssl
import typing
from dataclasses import fields
from pathlib import Path

from ctxopt.config import Config
from ctxopt.errors import FailedPrecondition, InvalidArgument

MAX_PORT = 65535
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
_IPV6 = re.compile(r"^\[[0-9A-Fa-f:.]+\]$")

# The least value each numeric setting may take (the rest are checked where used).
_AT_LEAST: dict[str, float] = {
    "workers": 1,
    "max_message_bytes": 1,
    "grace_seconds": 0,
    "drain_notice_seconds": 0,
    "stash_max_entries": 1,
    "stash_max_bytes": 1,
    "usage_retention_days": 1,
    "max_text_chars": 1,
    "max_chunks_per_request": 1,
    "max_chunks_per_session": 1,
    "max_sessions": 1,
    "max_query_chars": 1,
    "max_embedding_dim": 1,
    "token_cache_size": 0,
    "recency_half_life_turns": 0,
    "neighbour_share": 0,
    "old_generation_after": 0,
    "incremental_batch": 1,
    "gateway_window_tokens": 0,
    "gateway_trigger_percent": 1,
    "gateway_landing_percent": 0,
    "gateway_full_landing_percent": 0,
    "gateway_arrival_share": 0,
    "gateway_recent_share": 0,
    "gateway_recent_turns": 0,
    "gateway_engine_deadline_ms": 0,
}
# The most a numeric setting may take: percents of a window, shares of a size.
_AT_MOST: dict[str, float] = {
    "gateway_trigger_percent": 100,
    "gateway_landing_percent": 100,
    "gateway_full_landing_percent": 100,
    "gateway_arrival_share": 1,
    "gateway_recent_share": 1,
}
# Settings that must lie below another: a collection lands under where it starts,
# a full one no higher than a minor one.
_BELOW: tuple[tuple[str, str], ...] = (
    ("gateway_landing_percent", "gateway_trigger_percent"),
    ("gateway_full_landing_percent", "gateway_landing_percent"),
)


class Names:
    """How the user gave each setting: the flag when given, else the variable."""

    def __init__(self, flags: set[str]) -> None:
        self._flags = flags

    def __call__(self, field: str) -> str:
        if field in self._flags:
            return "--" + field.replace("_", "-")
        return f"CTXOPT_{field.upper()}"


def parse_address(setting: str, value: str) -> tuple[str, int]:
    """HOST:PORT with a host and a port 0-65535 (0: any free port).

    >>> parse_address("--addr", "127.0.0.1:0")
    ('127.0.0.1', 0)
    >>> parse_address("--addr", "[::1]:50051")
    ('[::1]', 50051)
    """
    host, colon, port = value.rpartition(":")
    if not colon:
        raise InvalidArgument(setting, value, "no port: expected HOST:PORT, e.g. 127.0.0.1:50051")
    if ":" in host and not host.startswith("["):
        raise InvalidArgument(setting, value, "an IPv6 host goes in brackets: [::1]:50051")
    if not host:
        raise InvalidArgument(setting, value, "no host: expected HOST:PORT, e.g. 127.0.0.1:50051")
    if not (_HOSTNAME.match(host) or _IPV6.match(host)):
        raise InvalidArgument(setting, value, f"{host!r} is not a host name or IP address")
    if not port.isdigit():
        raise InvalidArgument(setting, value, "the port must be a number from 0 to 65535")
    if int(port) > MAX_PORT:
        raise InvalidArgument(setting, value, f"port {int(port)} is above {MAX_PORT}")
    return host, int(port)


def check_settings(config: Config, name: Names) -> None:
    """Every setting in range and every choice one of its values."""
    hints = typing.get_type_hints(Config)
    for f in fields(config):
        value = getattr(config, f.name)
        choices = _choices(hints[f.name])
        if choices and value not in choices:
            raise InvalidArgument(name(f.name), value, f"expected one of {', '.join(choices)}")
        least, most = _AT_LEAST.get(f.name), _AT_MOST.get(f.name)
        if least is not None and value < least:
            raise InvalidArgument(name(f.name), value, f"must be at least {least:g}")
        if most is not None and value > most:
            raise InvalidArgument(name(f.name), value, f"must be at most {most:g}")
    for lower, upper in _BELOW:
        if getattr(config, lower) > getattr(config, upper):
            raise InvalidArgument(
                name(lower), getattr(config, lower), f"must not be above {name(upper)}"
            )


def check_serve(config: Config, name: Names) -> None:
    """What `ctxopt serve` needs before it binds or creates anything."""
    check_settings(config, name)
    listeners = {
        field: parse_address(name(field), value)
        for field, value in (
            ("addr", config.addr),
            ("mcp_addr", config.mcp_addr),
            ("gateway_addr", config.gateway_addr),
        )
        if field == "addr" or value
    }
    check_data_dir(config, name)
    _check_tls(config, name)
    for field, (host, port) in listeners.items():
        _check_free(name(field), getattr(config, field), host, port)


def check_data_dir(config: Config, name: Names) -> None:
    """The data directory is a directory, or can be made one (nothing is created here)."""
    if config.data_dir == ":memory:":
        return
    path = Path(config.resolved_data_dir)
    setting = name("data_dir") if config.data_dir else "data directory"
    if path.exists() and not path.is_dir():
        raise FailedPrecondition(setting, str(path), "is a file, not a directory")
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise FailedPrecondition(setting, str(path), f"{existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise FailedPrecondition(setting, str(path), f"{existing} is not writable")


def _check_tls(config: Config, name: Names) -> None:
    if not (config.tls_cert or config.tls_key):
        return
    if not (config.tls_cert and config.tls_key):
        missing = "tls_key" if config.tls_cert else "tls_cert"
        flag = "--" + missing.replace("_", "-")
        raise FailedPrecondition(
            name(missing), "", f"TLS needs both a certificate and a key: give {flag} too"
        )
    for field in ("tls_cert", "tls_key"):
        path = Path(getattr(config, field))
        if not path.is_file():
            raise FailedPrecondition(name(field), str(path), "no such file")
        if not os.access(path, os.R_OK):
            raise FailedPrecondition(name(field), str(path), "not readable")
    try:
        ssl.create_default_context(cafile=config.tls_cert)
    except ssl.SSLError:
        raise FailedPrecondition(
            name("tls_cert"), config.tls_cert, "not a PEM certificate"
        ) from None
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(config.tls_cert, config.tls_key)
    except ssl.SSLError:
        raise FailedPrecondition(
            name("tls_key"), config.tls_key, "not a PEM private key of that certificate"
        ) from None


def _check_free(setting: str, value: str, host: str, port: int) -> None:
    """The address resolves to a local interface and its port is free."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        raise FailedPrecondition(setting, value, f"unknown host {host}") from None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
            try:
                probe.bind(address)
            except OSError as err:
                if err.errno == errno.EADDRINUSE:
                    raise FailedPrecondition(
                        setting,
                        value,
                        "address already in use: another process listens there "
                        "(stop it, or choose another port; port 0 picks a free one)",
                    ) from None
                if err.errno == errno.EADDRNOTAVAIL:
                    raise FailedPrecondition(
                        setting, value, f"no network interface of this machine has {host}"
                    ) from None
                if err.errno == errno.EACCES:
                    raise FailedPrecondition(
                        setting, value, f"port {port} needs privileges (use 1024 or above)"
                    ) from None
                raise FailedPrecondition(setting, value, f"cannot bind ({err.strerror})") from None


def _choices(annotation: object) -> tuple[str, ...]:
    """The values of a `Literal[...]` setting, () for the others."""
    if typing.get_origin(annotation) is typing.Literal:
        return tuple(str(a) for a in typing.get_args(annotation))
    return ()
