"""MCP front end: the engine's garbage collector as tools an agent can call.

`ctxopt mcp` serves these over stdio with the official SDK (`serve_stdio`);
`ctxopt serve --mcp-addr` serves them over streamable HTTP beside gRPC
(`serve_http`). Shapes are in `schemas`, the adapters in `tools`; this module
wires them to the SDK and the process (signals, closing the store).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from functools import partial
from typing import Annotated, Any

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import Tool
from pydantic import Field

from ctxopt import __version__, validate
from ctxopt.api.mcp.schemas import (
    DEFAULT_SESSION,
    Analysis,
    AppendSummary,
    ChunkIn,
    GcSettings,
    KindName,
    PinResult,
    PruneResult,
    PruneStrategy,
    Query,
    RestoreResult,
    SearchResult,
    SessionId,
)
from ctxopt.api.mcp.tools import ContextTools, initial_settings
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.errors import FailedPrecondition
from ctxopt.model import ChunkKind, StashFilter
from ctxopt.usage.log import UsageLog


class _StrictServer(MCPServer):
    """An argument a tool does not take is refused by name, not ignored (a typo
    like `strateg` must not silently run the default). The SDK's argument
    models ignore extra keys and offer no option, so the tool list advertises
    `additionalProperties: false` and a call is checked against it, both
    through the server's public methods."""

    async def list_tools(self) -> list[Tool]:
        return [
            tool.model_copy(
                update={"input_schema": {**tool.input_schema, "additionalProperties": False}}
            )
            for tool in await super().list_tools()
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> Any:
        taken = {
            tool.name: tool.input_schema.get("properties", {})
            for tool in await super().list_tools()
        }
        unknown = sorted(set(arguments) - set(taken.get(name, arguments)))
        if unknown:
            raise ToolError(f"{', '.join(unknown)}: not an argument of {name}")
        return await super().call_tool(name, arguments, context)


def build_server(tools: ContextTools) -> MCPServer:
    """The MCP server offering `tools`, one decorated adapter per tool."""
    server = _StrictServer(
        "ctxopt",
        version=__version__,
        instructions=(
            "Context garbage collection. Register what is in your context with "
            "context_append, look with context_gc_analyze before pruning, and find "
            "stashed content again with context_stash_search / context_stash_restore."
        ),
    )

    @server.tool()
    def context_append(
        chunks: list[ChunkIn], session_id: SessionId = DEFAULT_SESSION
    ) -> AppendSummary:
        """Register chunks of the agent's context (upsert by id; the session is
        created on first use)."""
        return tools.call(lambda: tools.append(session_id, chunks))

    @server.tool()
    def context_gc_analyze(query: Query = "", session_id: SessionId = DEFAULT_SESSION) -> Analysis:
        """Usage against the soft (threshold) and hard (context window) limits, and
        the chunks a collection to the target would change, with kind, tokens,
        score and reasons. Changes nothing."""
        return tools.call(lambda: tools.analyze(session_id, query))

    @server.tool()
    def context_gc_prune(
        ids: Annotated[list[str] | None, Field(description="for stash and delete")] = None,
        strategy: PruneStrategy = "stash",
        query: Query = "",
        session_id: SessionId = DEFAULT_SESSION,
    ) -> PruneResult:
        """Remove chunks: `stash` (default, restorable) or `delete` (gone for good)
        the given ids, or `auto`: run the collection context_gc_analyze shows
        (query steers relevance). LOCKED and pinned chunks are refused."""
        return tools.call(lambda: tools.prune(session_id, ids or [], strategy, query))

    @server.tool()
    def context_gc_pin(ids: list[str], session_id: SessionId = DEFAULT_SESSION) -> PinResult:
        """Pin chunks: no collection or prune touches them until unpinned."""
        return tools.call(lambda: tools.pin(session_id, ids, pinned=True))

    @server.tool()
    def context_gc_unpin(ids: list[str], session_id: SessionId = DEFAULT_SESSION) -> PinResult:
        """Unpin chunks: collections may remove them again."""
        return tools.call(lambda: tools.pin(session_id, ids, pinned=False))

    @server.tool()
    def context_gc_configure(
        context_limit_tokens: Annotated[
            int | None, Field(description="the hard limit: the context window")
        ] = None,
        threshold_percent: Annotated[
            float | None, Field(description="the soft limit: a collection triggers here")
        ] = None,
        target_percent: Annotated[
            float | None, Field(description="a collection lands here")
        ] = None,
        pressure_percent: Annotated[
            float | None, Field(description="PRESERVABLE chunks go only above this")
        ] = None,
        recent_turns: Annotated[
            int | None, Field(description="the latest turns are roots, never removed")
        ] = None,
        batch_size: Annotated[
            int | None,
            Field(description="0: auto is a full collection; N: a minor one of at most N steps"),
        ] = None,
        weight_bm25: Annotated[float | None, Field(description="relevance to the query")] = None,
        weight_recency: Annotated[float | None, Field(description="how recent")] = None,
        weight_gc: Annotated[
            float | None, Field(description="structure: kind, references, generation")
        ] = None,
        weight_boost: Annotated[float | None, Field(description="the chunks' own boost")] = None,
    ) -> GcSettings:
        """Change the limits, thresholds, recency window, batch size and weights
        that later analyze, prune and restore calls of this process use (for every
        session). Omitted settings keep their value; returns the settings in force."""
        given = {
            "context_limit_tokens": context_limit_tokens,
            "threshold_percent": threshold_percent,
            "target_percent": target_percent,
            "pressure_percent": pressure_percent,
            "recent_turns": recent_turns,
            "batch_size": batch_size,
            "weight_bm25": weight_bm25,
            "weight_recency": weight_recency,
            "weight_gc": weight_gc,
            "weight_boost": weight_boost,
        }
        changes = {name: value for name, value in given.items() if value is not None}
        return tools.call(lambda: tools.configure(changes))

    @server.tool()
    def context_stash_search(
        query: str = "",
        kinds: list[KindName] | None = None,
        tags: list[str] | None = None,
        file_path: str = "",
        task_id: str = "",
        limit: Annotated[
            int, Field(description=f"hits per page, 1 to {validate.MAX_SEARCH_LIMIT}")
        ] = validate.DEFAULT_SEARCH_LIMIT,
        offset: Annotated[int, Field(description="next_offset of the previous page")] = 0,
        session_id: SessionId = DEFAULT_SESSION,
    ) -> SearchResult:
        """Full-text search of what was stashed, trimmed or masked, best first,
        with snippets; filters narrow it."""
        filters = StashFilter(
            kinds=tuple(ChunkKind[k.upper()] for k in kinds or []),
            tags=tuple(tags or []),
            file_path=file_path,
            task_id=task_id,
        )
        return tools.call(lambda: tools.search(session_id, query, filters, limit, offset))

    @server.tool()
    def context_stash_restore(
        ids: list[str], force: bool = False, session_id: SessionId = DEFAULT_SESSION
    ) -> RestoreResult:
        """Bring stashed chunks (and the rest of their groups) back byte for byte;
        refused when that would pass the target unless `force`."""
        return tools.call(lambda: tools.restore(session_id, ids, force=force))

    return server


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _close_on_signal(tools: ContextTools) -> None:
    """SIGTERM/SIGINT: let the running tool call finish, close the store, exit 0.

    Unwinding the server instead would wait for the SDK's stdin reader, a worker
    thread blocked in read() that no cancellation reaches, until the host closed
    the pipe; so this exits the process once the store is closed."""

    def handler(_signum: int, _frame: object) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        tools.close()
        sys.stderr.flush()
        os._exit(0)

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)


def serve_http(engine: Engine, usage: UsageLog, config: Config) -> tuple[ContextTools, str]:
    """Serve the MCP tools over streamable HTTP at `config.mcp_addr` (path /mcp),
    on a daemon thread, over an engine and usage ledger the gRPC server also uses; returns the
    tools, whose lock the caller takes to close the engine under them, and the
    URL (the port bound when the address asks for port 0).

    The tools act as owner "" and check no token, so this is refused with auth
    on or off loopback."""
    host, _, port = config.mcp_addr.rpartition(":")
    if config.auth_token:
        raise FailedPrecondition(
            "mcp_addr", config.mcp_addr, "the MCP tools check no token: not with auth on"
        )
    if host not in ("127.0.0.1", "localhost", "::1", "[::1]") or not port.isdigit():
        raise FailedPrecondition("mcp_addr", config.mcp_addr, "must be a loopback HOST:PORT")
    bare_host = host.strip("[]")
    listener = socket.socket(socket.AF_INET6 if ":" in bare_host else socket.AF_INET)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((bare_host, int(port)))
        listener.listen(128)  # connections queue from now on, before uvicorn runs
    except OSError as err:
        listener.close()
        raise FailedPrecondition(
            "mcp_addr", config.mcp_addr, f"cannot bind ({err.strerror})"
        ) from None
    tools = ContextTools(engine, initial_settings(config), usage)
    # log_config=None: uvicorn's records go to the process's handler (logs.py)
    http = uvicorn.Server(
        uvicorn.Config(build_server(tools).streamable_http_app(host=bare_host), log_config=None)
    )

    def run() -> None:
        anyio.run(partial(http.serve, sockets=[listener]))

    threading.Thread(target=run, name="ctxopt-mcp-http", daemon=True).start()
    return tools, f"http://{host}:{listener.getsockname()[1]}/mcp"


def serve_stdio(config: Config) -> None:
    """Run the MCP tools over stdin/stdout on the configured data directory.

    Returns when the host closes stdin; exits on SIGTERM/SIGINT. Either way the
    store is flushed and closed first, which releases the data directory.
    Raises FailedPrecondition when another ctxopt process holds the directory.
    """
    engine = Engine(config)
    try:
        usage = UsageLog(engine.store.db_path, retention_days=config.usage_retention_days)
    except BaseException:
        engine.close()
        raise
    tools = ContextTools(engine, initial_settings(config), usage)
    _close_on_signal(tools)
    try:
        build_server(tools).run("stdio")
    finally:
        for sig in STOP_SIGNALS:  # closing now: a late signal must not close twice
            signal.signal(sig, signal.SIG_IGN)
        tools.close()
