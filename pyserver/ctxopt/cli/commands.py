"""`ctxopt`: serve gRPC, serve MCP over stdio, run an agent through the gateway,
look into a running server, export or import a session.

Every setting is a `CTXOPT_*` environment variable (config.py); the flags
below override the ones people change at the command line. Settings are
checked (preflight.py) before the slow imports, and before anything is
created, so a mistake shows at once in one line.
"""

from __future__ import annotations

import argparse
import fcntl
import gc
import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from ctxopt import __version__
from ctxopt.cli import client, launch
from ctxopt.cli.launch import DEFAULT_GATEWAY_ADDR, HOSTS
from ctxopt.cli.preflight import Names, check_data_dir, check_serve, check_settings
from ctxopt.config import GATEWAY_MODES, Config
from ctxopt.errors import CtxoptError, FailedPrecondition, InvalidArgument


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(prog="ctxopt", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ctxopt {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the gRPC server in the foreground")
    _data_dir(serve)
    serve.add_argument("--addr", help="HOST:PORT, port 0 picks a free one (CTXOPT_ADDR)")
    serve.add_argument("--workers", type=int, help="worker threads (CTXOPT_WORKERS)")
    serve.add_argument(
        "--max-message-bytes", type=int, help="request size cap (CTXOPT_MAX_MESSAGE_BYTES)"
    )
    serve.add_argument(
        "--grace-seconds", type=float, help="drain time on shutdown (CTXOPT_GRACE_SECONDS)"
    )
    serve.add_argument("--tls-cert", help="PEM certificate chain (CTXOPT_TLS_CERT)")
    serve.add_argument("--tls-key", help="PEM private key (CTXOPT_TLS_KEY)")
    serve.add_argument(
        "--mcp-addr",
        help="also serve the MCP tools over HTTP at HOST:PORT/mcp, loopback only (CTXOPT_MCP_ADDR)",
    )
    serve.add_argument(
        "--gateway-addr",
        help="also serve the model-API gateway over HTTP at HOST:PORT (CTXOPT_GATEWAY_ADDR)",
    )
    serve.add_argument(
        "--gateway-mode",
        choices=GATEWAY_MODES,
        help="on: prune; shadow: plan and log, forward the original; off: forward as sent "
        "(CTXOPT_GATEWAY_MODE, default on)",
    )
    serve.add_argument(
        "--gateway-window-tokens",
        type=int,
        help="the window of every gateway request, 0: by model (CTXOPT_GATEWAY_WINDOW_TOKENS)",
    )
    serve.add_argument(
        "--gateway-host-ceilings",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="cap the prompt at a recognised agent's own compaction line "
        "(CTXOPT_GATEWAY_HOST_CEILINGS, default on)",
    )
    serve.add_argument(
        "--gateway-generations",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="collect the turns since the last full collection first, leaving the cached "
        "prefix before them byte-identical (CTXOPT_GATEWAY_GENERATIONS, default on)",
    )
    serve.add_argument(
        "--gateway-full-landing-percent",
        type=float,
        help="where a full collection lands with generations on, percent of the room the "
        "frame and the task leave under the ceiling (CTXOPT_GATEWAY_FULL_LANDING_PERCENT, "
        "default 20)",
    )
    serve.add_argument(
        "--gateway-recent-share",
        type=float,
        help="a collection keeps the latest turns whole up to this share (0-1) of the room "
        "its landing leaves above the frame and the task (CTXOPT_GATEWAY_RECENT_SHARE, "
        "default 0.7)",
    )
    serve.add_argument(
        "--gateway-recent-turns",
        type=int,
        help="a collection keeps the latest this many turns whole whatever their size "
        "(CTXOPT_GATEWAY_RECENT_TURNS, default 2)",
    )
    serve.add_argument(
        "--gateway-engine-deadline-ms",
        type=int,
        help="how long a gateway request waits for the engine before it goes up unpruned, "
        "0: no limit (CTXOPT_GATEWAY_ENGINE_DEADLINE_MS, default 5000)",
    )
    serve.add_argument(
        "--insecure",
        action="store_true",
        default=None,
        help="allow plaintext on a non-loopback address (CTXOPT_INSECURE)",
    )
    serve.add_argument(
        "--log-format", choices=("json", "text"), help="stderr lines (CTXOPT_LOG_FORMAT)"
    )
    serve.add_argument(
        "--usage-retention-days",
        type=int,
        help="days the usage ledger keeps a call (CTXOPT_USAGE_RETENTION_DAYS, default 90)",
    )

    run = commands.add_parser(
        "run", help="run an agent CLI through the gateway, starting `ctxopt serve` if needed"
    )
    _data_dir(run)
    run.add_argument(
        "--gateway-addr",
        help=f"the gateway's HOST:PORT (CTXOPT_GATEWAY_ADDR, else {DEFAULT_GATEWAY_ADDR})",
    )
    run.add_argument("host", choices=HOSTS, help="the agent CLI")
    run.add_argument("host_args", nargs=argparse.REMAINDER, help="passed to the host unchanged")

    mcp = commands.add_parser("mcp", help="run the MCP server over stdio")
    _data_dir(mcp)

    export = commands.add_parser(
        "export", help="a session as JSON (through the server at --addr when one answers)"
    )
    _data_dir(export)
    client.add_connection(export)
    export.add_argument("session_id")
    export.add_argument(
        "-o", "--output", type=Path, help="write to this file, only once the export succeeded"
    )

    load = commands.add_parser("import", help="load a session from a JSON export")
    _data_dir(load)
    client.add_connection(load)
    load.add_argument("file", type=Path, help="the JSON file, - for stdin")
    load.add_argument("--replace", action="store_true", help="overwrite an existing session")

    parsers = {"serve": serve, "mcp": mcp, "export": export, "import": load}
    parsers.update(client.add_commands(commands))
    return parser, parsers


def _data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", help="store directory (CTXOPT_DATA_DIR)")


def subcommands() -> list[str]:
    """The command names `ctxopt` accepts (`stash search` counts as `stash`)."""
    return sorted({name.split()[0] for name in _parser()[1]})


def _config(args: argparse.Namespace) -> tuple[Config, Names]:
    """Environment first, then any flag given on the command line."""
    config = Config.from_env()
    overrides = {
        name: value
        for name, value in vars(args).items()
        if name in Config.__dataclass_fields__ and value is not None
    }
    return replace(config, **overrides), Names(set(overrides))


# Sessions hold millions of long-lived objects and plans allocate one per chunk;
# at the default gen-0 threshold (700) the cyclic collector rescans the whole
# heap constantly (Score at 50,000 chunks: 299 -> 141 ms with this).
GC_THRESHOLDS = (100_000, 50, 100)


def main(argv: list[str] | None = None) -> int:
    parser, parsers = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the subcommand's usage, not the top level's
        name = " ".join(filter(None, (args.command, getattr(args, "stash_command", None))))
        parsers[name].error(f"unrecognized arguments: {' '.join(unknown)}")
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        config, names = _config(args)
        if args.command in client.COMMANDS:
            client.run(args, config, names("addr"))
            return 0
        if args.command == "serve":
            check_serve(config, names)
        else:
            check_settings(config, names)
            check_data_dir(config, names)
        from ctxopt.cli import logs

        logs.configure(config.log_format)
        if args.command == "serve":
            from ctxopt.api.grpc.server import serve

            serve(config)
        elif args.command == "run":
            address = config.gateway_addr or DEFAULT_GATEWAY_ADDR
            data_dir = Path(config.resolved_data_dir)
            return launch.run(args.host, args.host_args, address=address, data_dir=data_dir)
        elif args.command == "mcp":
            from ctxopt.api.mcp.server import serve_stdio

            serve_stdio(config)
        else:
            _export_or_import(args, config, names)
    except (CtxoptError, client.ServerError) as e:
        return _fail(str(e))
    except OSError as e:
        return _fail(f"{e.filename or 'file'}: {e.strerror or e}")
    except Exception as e:  # a command line answers in one line, never a traceback
        return _fail(f"{type(e).__name__}: {e}")
    return 0


def _fail(message: str) -> int:
    print(f"ctxopt: {message}", file=sys.stderr)
    return 2


def _export_or_import(args: argparse.Namespace, config: Config, names: Names) -> None:
    """Through the server when one answers at the address, else on the data directory;
    a directory this command created is removed again when the command fails."""
    data = ""
    if args.command == "import":  # read first: a missing file must create nothing
        data = sys.stdin.read() if str(args.file) == "-" else _read(args.file)
    from ctxopt.store import DB_FILE

    directory = Path(config.resolved_data_dir)
    try:  # a server that answers at the address holds its own directory, whichever it is
        if args.command == "export":
            _write(args.output, client.export_session(config, names("addr"), args.session_id))
        else:
            session_id, count = client.import_session(
                config, names("addr"), data, replace=args.replace
            )
            print(f"imported {count} chunks into session {session_id}")
        return
    except client.Unavailable:
        if _held_by_another_process(directory / DB_FILE):
            raise
    if args.command == "export" and not (directory / DB_FILE).exists():
        raise FailedPrecondition(
            "data_dir", str(directory), "holds no ctxopt store: no session to export"
        )
    created = not directory.exists()
    from ctxopt.engine import Engine

    try:
        engine = Engine(config)
        try:
            if args.command == "export":
                _write(args.output, engine.export_session("", args.session_id))
            else:
                session_id, count = engine.import_session("", data, overwrite=args.replace)
                print(f"imported {count} chunks into session {session_id}")
        finally:
            engine.close()
    except BaseException:
        if created:
            shutil.rmtree(directory, ignore_errors=True)
        raise


def _held_by_another_process(database: Path) -> bool:
    """Whether a server (or another command) holds the store's lock (see store.py)."""
    try:
        fd = os.open(database, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the shared lock taken just now
    return False


def _write(output: Path | None, text: str) -> None:
    """stdout, or the file, replaced only once the whole text is written."""
    if output is None:
        print(text)
        return
    target = output.resolve()
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text + "\n")
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _read(path: Path) -> str:
    if path.is_dir():
        raise InvalidArgument("file", str(path), "is a directory, not a JSON export")
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidArgument("file", str(path), "no such file") from None
    except UnicodeDecodeError:
        raise InvalidArgument("file", str(path), "not UTF-8 text") from None
