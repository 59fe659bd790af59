"""What the gateway stashed comes back byte for byte through `ctxopt mcp`'s restore tool.

One `ctxopt serve --gateway-addr ... --mcp-addr ...` process: a host's tool loop
(Claude Code's wire format and User-Agent, its key, the official `anthropic`
SDK) goes through the gateway until a tool result is replaced by a placeholder
naming its session and chunk; gRPC, as the ctxopt identity like the command
line, finds it in that session's stash; the agent calls the MCP restore tool
the placeholder names and gets the original's text at once; the host's next
call carries the original again, byte for byte, to the provider.
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import anthropic
import anyio
import grpc
from ctxopt.v1 import ctxopt_pb2 as pb
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.agents.scripted_provider import write_workspace
from tests.gateway.upstream import FakeUpstream, fake_upstream
from tests.serverproc import ServerProcess, serving

WINDOW = 6_000
FILES = 6
LINES_PER_FILE = 60  # about 1,000 tokens a file
TIMEOUT_S = 30.0
HINT = re.compile(r'context_stash_restore\(session_id="([^"]+)", ids=\["([^"]+)"\]\)')
STASHED_AS = re.compile(r"stashed as (\S+);")
KEY = "sk-ant-test"
HEADERS = {
    "user-agent": "claude-cli/2.1.332 (external, sdk-cli)",
    "x-ctxopt-window-tokens": str(WINDOW),
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _tool_loop(texts: list[str]) -> list[dict[str, Any]]:
    """A host's history: the task, then one `cat` call and its output per text."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read every file."}]
    for i, text in enumerate(texts):
        call = {"type": "tool_use", "id": f"toolu_{i}", "name": "Bash", "input": {"command": "cat"}}
        result = {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": text}
        messages += [
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [result]},
        ]
    return messages


def _send(client: anthropic.Anthropic, messages: list[dict[str, Any]]) -> None:
    reply = client.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=1024,
        messages=messages,  # type: ignore[arg-type]
    )
    assert reply.content


def _results(upstream: FakeUpstream) -> dict[str, str]:
    """The tool results of the newest request that reached the provider, by call id."""
    sent = upstream.requests[-1].body["messages"]
    return {
        block["tool_use_id"]: block["content"]
        for message in sent
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_result"
    }


def _restore(port: int, session_id: str, chunk_id: str) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        with anyio.fail_after(TIMEOUT_S):
            async with (
                streamable_http_client(f"http://127.0.0.1:{port}/mcp") as streams,
                ClientSession(streams[0], streams[1]) as session,
            ):
                await session.initialize()
                result = await session.call_tool(
                    "context_stash_restore",
                    {"ids": [chunk_id], "session_id": session_id, "force": True},
                )
                assert not result.is_error, result.content
                content: dict[str, Any] | None = result.structured_content
                assert content is not None
                return content

    return anyio.run(main)


def _stash_hits(server: ServerProcess, session_id: str) -> set[tuple[str, str]]:
    """The (chunk id, stash id) pairs gRPC finds in the session's stash, as the
    command line would (the ctxopt identity: auth is off)."""
    with grpc.insecure_channel(server.address) as channel:
        found = server.stub(channel).SearchStash(
            pb.SearchStashRequest(session_id=session_id, query="txt", limit=100),
            timeout=TIMEOUT_S,
        )
    return {(hit.chunk_id, hit.stash_id) for hit in found.hits}


def test_a_stashed_tool_result_comes_back_byte_for_byte_after_the_mcp_restore(
    tmp_path: Path,
) -> None:
    names = write_workspace(tmp_path / "files", files=FILES, lines_per_file=LINES_PER_FILE)
    texts = [(tmp_path / "files" / name).read_text() for name in names]
    port = _free_port()
    with fake_upstream() as upstream:
        env = {"CTXOPT_UPSTREAM_ANTHROPIC": upstream.url}
        with (
            serving(
                tmp_path,
                "--gateway-addr",
                "127.0.0.1:0",
                "--mcp-addr",
                f"127.0.0.1:{port}",
                env=env,
            ) as server,
            anthropic.Anthropic(
                api_key=KEY,
                base_url=f"{server.gateway_url}/anthropic",
                default_headers=HEADERS,
                max_retries=0,
                timeout=TIMEOUT_S,
            ) as client,
        ):
            hint = None
            for count in range(1, len(texts) + 1):  # the host resends its growing history
                _send(client, _tool_loop(texts[:count]))
                placeholders = {k: v for k, v in _results(upstream).items() if HINT.search(v)}
                if placeholders:
                    call_id, placeholder = next(iter(placeholders.items()))
                    hint = HINT.search(placeholder)
                    stashed_as = STASHED_AS.search(placeholder)
                    break
            assert hint is not None, "no tool result was stashed"
            session_id, chunk_id = hint.groups()
            # the session is namespaced by a hash of the provider key, never the key itself
            namespace, _, _ = session_id.partition(".")
            assert len(namespace) == 12 and KEY not in session_id
            assert stashed_as is not None, placeholder
            assert (chunk_id, stashed_as.group(1)) in _stash_hits(server, session_id)
            original = texts[int(call_id.removeprefix("toolu_"))]
            restored = _restore(port, session_id, chunk_id)
            assert chunk_id in restored["restored"]
            assert restored["originals"][chunk_id].encode() == original.encode()
            _send(client, _tool_loop(texts[:count]))
            assert _results(upstream)[call_id] == original
    log = [json.loads(line) for line in server.log_text().splitlines() if line.startswith("{")]
    assert any(entry.get("gateway", {}).get("outcome") == "optimized" for entry in log)
