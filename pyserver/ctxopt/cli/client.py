"""The `ctxopt` subcommands that ask a running server: `sessions`, `show`,
`stash search`, `stash restore`, `gain`, and `export` / `import` when a server
answers.

They dial `CTXOPT_ADDR` (or `--addr`) with the first token of
`CTXOPT_AUTH_TOKEN` (the server's own setting: `owner=secret` sends `secret`)
and, when `CTXOPT_TLS_CERT` is set, TLS trusting that certificate. Each prints a
table, or JSON with `--json`. gRPC is imported only when a command runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ctxopt.cli.preflight import parse_address
from ctxopt.config import Config
from ctxopt.usage.gain import GROUP_CHOICES

if TYPE_CHECKING:
    import grpc
    from google.protobuf.message import Message

    from ctxopt.v1 import ctxopt_pb2_grpc as pb_grpc

CALL_TIMEOUT_S = 30.0
COMMANDS = ("sessions", "show", "stash", "gain")


class ServerError(Exception):
    """A call to the server failed; the message says what to do."""


class Unavailable(ServerError):
    """No server answers at the address."""


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> dict[str, argparse.ArgumentParser]:
    """Register the client subcommands; returns each one's parser by name."""
    sessions = commands.add_parser("sessions", help="list the sessions of a running server")
    sessions.add_argument("--limit", type=int, default=0, help="most sessions shown (0: 100)")
    show = commands.add_parser("show", help="the last collection of a session: what went, why")
    show.add_argument("session_id")
    show.add_argument("--top", type=int, default=10, help="largest chunks shown")
    stash = commands.add_parser("stash", help="search or restore stashed originals")
    actions = stash.add_subparsers(dest="stash_command", required=True)
    search = actions.add_parser("search", help="stashed originals matching a query")
    search.add_argument("session_id", help='session ("" searches all of yours)')
    search.add_argument("query")
    search.add_argument("--limit", type=int, default=10, help="most hits (at most 100)")
    restore = actions.add_parser("restore", help="put stashed chunks back into their session")
    restore.add_argument("session_id")
    restore.add_argument("chunk_ids", nargs="+", metavar="CHUNK_ID")
    gain = commands.add_parser("gain", help="what the gateway and Optimize saved, from the ledger")
    gain.add_argument("--by", choices=GROUP_CHOICES, default="day", help="rows per (day)")
    gain.add_argument("--since", help="a span back (30m, 12h, 7d, 2w) or a date (2026-11-20)")
    parsers = {"sessions": sessions, "show": show, "stash search": search, "gain": gain}
    parsers["stash restore"] = restore
    for parser in (sessions, show, search, restore, gain):
        add_connection(parser)
        parser.add_argument("--json", action="store_true", help="print JSON")
    return parsers


def add_connection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--addr", help="the server's HOST:PORT (CTXOPT_ADDR)")


def run(args: argparse.Namespace, config: Config, setting: str) -> None:
    """Run one client subcommand against the server at `config.addr`."""
    stub = _stub(config, setting)
    if args.command == "sessions":
        _print(args, _call(config, stub.ListSessions, _pb().ListSessionsRequest(limit=args.limit)))
    elif args.command == "show":
        request = _pb().GetLastPlanRequest(session_id=args.session_id, top=args.top)
        _print(args, _call(config, stub.GetLastPlan, request))
    elif args.command == "gain":
        _gain(args, config, stub)
    elif args.stash_command == "search":
        request = _pb().SearchStashRequest(
            session_id=args.session_id, query=args.query, limit=args.limit
        )
        _print(args, _call(config, stub.SearchStash, request))
    else:
        request = _pb().RestoreRequest(session_id=args.session_id, chunk_ids=args.chunk_ids)
        _print(args, _call(config, stub.Restore, request))


def export_session(config: Config, setting: str, session_id: str) -> str:
    request = _pb().ExportSessionRequest(session_id=session_id)
    answer = _call(config, _stub(config, setting).ExportSession, request)
    return str(answer.json)


def import_session(config: Config, setting: str, data: str, *, replace: bool) -> tuple[str, int]:
    request = _pb().ImportSessionRequest(json=data, replace=replace)
    answer = _call(config, _stub(config, setting).ImportSession, request)
    return str(answer.session_id), int(answer.chunk_count)


def _gain(args: argparse.Namespace, config: Config, stub: pb_grpc.ContextOptimizerStub) -> None:
    from ctxopt.usage import gain, wire
    from ctxopt.usage.report import GroupBy

    now = datetime.now().astimezone()
    by, since = GroupBy(args.by), gain.since_ms(args.since, now)
    offset = now.utcoffset()
    request = _pb().GetUsageRequest(
        group_by=wire.GROUPS[by],
        since_unix_ms=since,
        utc_offset_minutes=int(offset.total_seconds() // 60) if offset else 0,
    )
    answer = _call(config, stub.GetUsage, request)
    print(gain.render(wire.report_from_pb(answer, by, since), as_json=args.json))


# ---- the connection -------------------------------------------------------------


def _pb() -> Any:
    from ctxopt.v1 import ctxopt_pb2

    return ctxopt_pb2


def _stub(config: Config, setting: str) -> pb_grpc.ContextOptimizerStub:
    import grpc

    from ctxopt.v1 import ctxopt_pb2_grpc

    parse_address(setting, config.addr)
    if config.tls_cert:
        with open(config.tls_cert, "rb") as cert:
            credentials = grpc.ssl_channel_credentials(root_certificates=cert.read())
        channel = grpc.secure_channel(config.addr, credentials)
    else:
        channel = grpc.insecure_channel(config.addr)
    return ctxopt_pb2_grpc.ContextOptimizerStub(channel)  # type: ignore[no-untyped-call]


def _token(config: Config) -> str:
    first = next((t.strip() for t in config.auth_token.split(",") if t.strip()), "")
    return first.rpartition("=")[2]


def _call(config: Config, method: Callable[..., Any], request: Message) -> Any:
    import grpc

    token = _token(config)
    metadata = [("authorization", f"Bearer {token}")] if token else []
    try:
        return method(request, timeout=CALL_TIMEOUT_S, metadata=metadata)
    except grpc.RpcError as err:
        unanswered = err.code() == grpc.StatusCode.UNAVAILABLE
        raise (Unavailable if unanswered else ServerError)(_explain(config, err)) from None


def _explain(config: Config, err: grpc.RpcError) -> str:
    import grpc

    code: grpc.StatusCode = err.code()
    details: str = err.details() or ""
    if code == grpc.StatusCode.UNAVAILABLE:
        return (
            f"no ctxopt server answers at {config.addr} "
            "(start one with `ctxopt serve`, or give its --addr / CTXOPT_ADDR)"
        )
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return f"the server at {config.addr} refused the call: set CTXOPT_AUTH_TOKEN to its token"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"the server at {config.addr} did not answer within {CALL_TIMEOUT_S:.0f} s"
    return details or code.name


# ---- output ---------------------------------------------------------------------


def _print(args: argparse.Namespace, answer: Message) -> None:
    if args.json:
        from google.protobuf.json_format import MessageToJson

        print(
            MessageToJson(
                answer,
                preserving_proto_field_name=True,
                always_print_fields_with_no_presence=True,
                indent=2,
            )
        )
        return
    name = type(answer).__name__
    lines = _TABLES[name](answer, args) if name in _TABLES else [str(answer)]
    print("\n".join(lines))


def _when(unix_ms: int) -> str:
    if not unix_ms:
        return "-"
    return datetime.fromtimestamp(unix_ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def _enum(answer: Message, enum: str, value: int, prefix: str) -> str:
    name = str(answer.DESCRIPTOR.file.enum_types_by_name[enum].values_by_number[value].name)
    return name.removeprefix(prefix).lower()


def _sessions(answer: Any, _args: argparse.Namespace) -> list[str]:
    if not answer.sessions:
        return ["no sessions"]
    width = max(7, *(len(s.session_id) for s in answer.sessions))
    header = f"{'session':<{width}}  {'chunks':>7}  {'tokens':>11}  {'stashed':>7}"
    lines = [header + f"  {'stashed tokens':>14}  last use"]
    for s in answer.sessions:
        lines.append(
            f"{s.session_id:<{width}}  {s.chunk_count:>7,}  {s.tokens:>11,}  "
            f"{s.stashed_count:>7,}  {s.stashed_tokens:>14,}  {_when(s.last_used_unix_ms)}"
        )
    if answer.total > len(answer.sessions):
        lines.append(f"({len(answer.sessions)} of {answer.total} sessions: --limit shows more)")
    return lines


def _last_plan(answer: Any, args: argparse.Namespace) -> list[str]:
    if not answer.found:
        return [
            f"{args.session_id}: no collection has run on this session since the server started"
        ]
    applied = "dry run, nothing applied" if answer.dry_run else "applied"
    lines = [
        f"{args.session_id}: last collection {_when(answer.planned_unix_ms)} ({applied}): "
        f"{answer.tokens_before:,} -> {answer.tokens_after:,} tokens "
        f"(target {answer.target_tokens:,})",
        "",
        f"{'kind':<14}{'chunks':>8}{'tokens':>11}{'after':>11}",
    ]
    for k in answer.kinds:
        kind = _enum(answer, "ChunkKind", k.kind, "CHUNK_KIND_")
        lines.append(f"{kind:<14}{k.chunk_count:>8,}{k.tokens:>11,}{k.tokens_after:>11,}")
    lines += [
        "",
        "largest chunks:",
        f"{'tokens':>9}{'after':>9}  {'decision':<9}chunk / reasons / preview",
    ]
    for c in answer.largest:
        action = _enum(answer, "Action", c.action, "ACTION_").upper()
        reasons = f"[{', '.join(c.reasons)}] " if c.reasons else ""
        lines.append(f"{c.tokens:>9,}{c.tokens_after:>9,}  {action:<9}{c.chunk_id}")
        lines.append(f"{'':>20}{reasons}{c.preview}")
    return lines


def _hits(answer: Any, _args: argparse.Namespace) -> list[str]:
    if not answer.hits:
        return ["no stashed original matches"]
    lines = []
    for h in answer.hits:
        action = _enum(answer, "Action", h.action, "ACTION_").upper()
        when = _when(h.stashed_at_ms)
        lines.append(f"{h.chunk_id}  ({h.session_id}, {h.tokens:,} tokens, {action} {when})")
        lines.append(f"    {h.snippet}")
    return lines


def _restored(answer: Any, _args: argparse.Namespace) -> list[str]:
    ids = ", ".join(answer.restored_ids) or "nothing"
    return [f"restored {ids}; the session holds {answer.session_tokens:,} tokens"]


_TABLES: dict[str, Callable[[Any, argparse.Namespace], list[str]]] = {
    "ListSessionsResponse": _sessions,
    "GetLastPlanResponse": _last_plan,
    "SearchStashResponse": _hits,
    "RestoreResponse": _restored,
}
