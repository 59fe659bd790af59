"""`ctxopt`: serve gRPC, serve MCP over stdio, run an agent through the gateway, export or
import a session.

Every setting is a `CTXOPT_*` environment variable (config.py); the flags
below override the ones people change at the command line.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from dataclasses import replace
from pathlib import Path

from ctxopt import launch
from ctxopt.config import GATEWAY_MODES, Config
from ctxopt.errors import CtxoptError, InvalidArgument
from ctxopt.launch import DEFAULT_GATEWAY_ADDR, HOSTS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxopt", description=__doc__)
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
        "--insecure",
        action="store_true",
        default=None,
        help="allow plaintext on a non-loopback address (CTXOPT_INSECURE)",
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

    export = commands.add_parser("export", help="print a session as JSON")
    _data_dir(export)
    export.add_argument("session_id")

    load = commands.add_parser("import", help="load a session from a JSON export")
    _data_dir(load)
    load.add_argument("file", type=Path, help="the JSON file, - for stdin")
    load.add_argument("--replace", action="store_true", help="overwrite an existing session")
    return parser


def _data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", help="store directory (CTXOPT_DATA_DIR)")


def _config(args: argparse.Namespace) -> Config:
    """Environment first, then any flag given on the command line."""
    config = Config.from_env()
    overrides = {
        name: value
        for name, value in vars(args).items()
        if name in Config.__dataclass_fields__ and value is not None
    }
    return replace(config, **overrides)


# Sessions hold millions of long-lived objects and plans allocate one per chunk;
# at the default gen-0 threshold (700) the cyclic collector rescans the whole
# heap constantly (Score at 50,000 chunks: 299 -> 141 ms with this).
GC_THRESHOLDS = (100_000, 50, 100)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    gc.set_threshold(*GC_THRESHOLDS)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    try:
        config = _config(args)
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
            _export_or_import(args, config)
    except CtxoptError as e:
        return _fail(str(e))
    except OSError as e:
        return _fail(f"{e.filename or 'file'}: {e.strerror or e}")
    except Exception as e:  # a command line answers in one line, never a traceback
        logging.getLogger("ctxopt").debug("command failed", exc_info=True)
        return _fail(f"{type(e).__name__}: {e}")
    return 0


def _fail(message: str) -> int:
    print(f"ctxopt: {message}", file=sys.stderr)
    return 2


def _export_or_import(args: argparse.Namespace, config: Config) -> None:
    from ctxopt.engine import Engine

    engine = Engine(config)
    try:
        if args.command == "export":
            print(engine.export_session("", args.session_id))
        else:
            data = sys.stdin.read() if str(args.file) == "-" else _read(args.file)
            session_id, count = engine.import_session("", data, args.replace)
            print(f"imported {count} chunks into session {session_id}")
    finally:
        engine.close()


def _read(path: Path) -> str:
    if path.is_dir():
        raise InvalidArgument("file", str(path), "is a directory, not a JSON export")
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidArgument("file", str(path), "no such file") from None
    except UnicodeDecodeError:
        raise InvalidArgument("file", str(path), "not UTF-8 text") from None
