"""The server process: health, reflection, drain, deadlines, limits, auth, restart."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import grpc
import pytest
from ctxopt.v1 import ctxopt_pb2 as pb
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from tests.serverproc import CTXOPT, serving, start_server

SERVICE = "ctxopt.v1.ContextOptimizer"
TIMEOUT = 10.0
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def chunk(i: int, text: str) -> pb.Chunk:
    role = pb.ROLE_USER if i % 2 == 0 else pb.ROLE_MODEL
    return pb.Chunk(id=f"c{i}", role=role, kind=pb.CHUNK_KIND_MESSAGE, text=text, turn=i)


def health_status(channel: grpc.Channel, service: str) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    request = health_pb2.HealthCheckRequest(service=service)
    return int(stub.Check(request, timeout=TIMEOUT).status)


def test_health_reflection_and_drain(tmp_path: Path) -> None:
    with serving(tmp_path) as server, grpc.insecure_channel(server.address) as channel:
        assert health_status(channel, "") == SERVING
        assert health_status(channel, SERVICE) == SERVING
        services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
        assert {SERVICE, "grpc.health.v1.Health"} <= services

        seen: list[int] = []

        def watch() -> None:
            while True:
                try:
                    seen.append(health_status(channel, SERVICE))
                except grpc.RpcError:
                    return  # stopped accepting calls
                time.sleep(0.02)

        watcher = threading.Thread(target=watch)
        watcher.start()
        time.sleep(0.1)
        assert server.terminate() == 0
        watcher.join(TIMEOUT)
        assert seen[0] == SERVING and seen[-1] == NOT_SERVING
        assert "stopped" in server.log_text()


def test_in_flight_calls_finish_during_drain(tmp_path: Path) -> None:
    big = [chunk(i, f"message {i} " + "lorem ipsum dolor " * 200) for i in range(400)]
    with serving(tmp_path) as server, grpc.insecure_channel(server.address) as channel:
        stub = server.stub(channel)
        result: list[pb.AppendChunksResponse] = []
        call = threading.Thread(
            target=lambda: result.append(
                stub.AppendChunks(
                    pb.AppendChunksRequest(session_id="s", chunks=big), timeout=TIMEOUT
                )
            )
        )
        call.start()
        time.sleep(0.05)
        server.terminate()
        call.join(TIMEOUT)
        assert result and result[0].session_chunks == len(big)


def test_deadline_and_message_size(tmp_path: Path) -> None:
    with (
        serving(tmp_path, "--max-message-bytes", "65536") as server,
        grpc.insecure_channel(server.address) as channel,
    ):
        stub = server.stub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.AppendChunks(
                pb.AppendChunksRequest(session_id="s", chunks=[chunk(0, "x" * 100_000)]),
                timeout=TIMEOUT,
            )
        assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        with pytest.raises(grpc.RpcError) as raised:
            stub.AppendChunks(
                pb.AppendChunksRequest(session_id="s", chunks=[chunk(0, "hello")]),
                timeout=0.000_001,
            )
        assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        ok = stub.AppendChunks(
            pb.AppendChunksRequest(session_id="s", chunks=[chunk(0, "hello")]), timeout=TIMEOUT
        )
        assert ok.session_chunks == 1


def test_bearer_tokens_scope_sessions_by_owner(tmp_path: Path) -> None:
    env = {"CTXOPT_AUTH_TOKEN": "alice=a-secret,bob=b-secret"}
    with serving(tmp_path, env=env) as server, grpc.insecure_channel(server.address) as channel:
        stub = server.stub(channel)
        request = pb.AppendChunksRequest(session_id="s", chunks=[chunk(0, "private")])
        alice = (("authorization", "Bearer a-secret"),)
        bob = (("authorization", "Bearer b-secret"),)
        for metadata, code in [
            ((), grpc.StatusCode.UNAUTHENTICATED),
            ((("authorization", "Bearer wrong"),), grpc.StatusCode.UNAUTHENTICATED),
        ]:
            with pytest.raises(grpc.RpcError) as raised:
                stub.AppendChunks(request, timeout=TIMEOUT, metadata=metadata)
            assert raised.value.code() == code
        stub.AppendChunks(request, timeout=TIMEOUT, metadata=alice)
        stats = pb.GetSessionStatsRequest(session_id="s")
        with pytest.raises(grpc.RpcError) as raised:
            stub.GetSessionStats(stats, timeout=TIMEOUT, metadata=bob)
        assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert stub.GetSessionStats(stats, timeout=TIMEOUT, metadata=alice).chunk_count == 1
        # health stays open for probes
        assert health_status(channel, "") == SERVING


def test_plaintext_off_loopback_is_refused(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(CTXOPT), "serve", "--addr", "0.0.0.0:0", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--insecure" in result.stderr


def test_one_server_per_data_dir(tmp_path: Path) -> None:
    with serving(tmp_path):
        result = subprocess.run(
            [str(CTXOPT), "serve", "--addr", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2
        assert "in use by another ctxopt process" in result.stderr


def test_sessions_pins_and_stash_survive_a_restart(tmp_path: Path) -> None:
    chunks = [chunk(i, f"turn {i} about caching the parser output " * 5) for i in range(20)]
    with serving(tmp_path) as server, grpc.insecure_channel(server.address) as channel:
        stub = server.stub(channel)
        stub.AppendChunks(pb.AppendChunksRequest(session_id="s", chunks=chunks), timeout=TIMEOUT)
        stub.UpdateChunks(
            pb.UpdateChunksRequest(session_id="s", updates=[pb.ChunkUpdate(id="c1", pinned=True)]),
            timeout=TIMEOUT,
        )
        stub.RemoveChunks(
            pb.RemoveChunksRequest(session_id="s", chunk_ids=["c2"], stash=True), timeout=TIMEOUT
        )
        before = stub.ExportSession(pb.ExportSessionRequest(session_id="s"), timeout=TIMEOUT)
    with serving(tmp_path) as server, grpc.insecure_channel(server.address) as channel:
        stub = server.stub(channel)
        after = stub.ExportSession(pb.ExportSessionRequest(session_id="s"), timeout=TIMEOUT)
        assert json.loads(after.json) == json.loads(before.json)
        exported = json.loads(after.json)
        pinned = {c["chunk"]["id"] for c in exported["chunks"] if c["chunk"].get("pinned")}
        assert pinned == {"c1"}
        hits = stub.SearchStash(
            pb.SearchStashRequest(session_id="s", query="parser"), timeout=TIMEOUT
        ).hits
        assert [h.chunk_id for h in hits] == ["c2"]


def test_one_log_line_per_call_without_text(tmp_path: Path) -> None:
    secret = "correct horse battery staple"
    server = start_server(tmp_path / "data", tmp_path / "server.log")
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = server.stub(channel)
            stub.AppendChunks(
                pb.AppendChunksRequest(session_id="s", chunks=[chunk(0, secret)]), timeout=TIMEOUT
            )
            stub.Optimize(
                pb.OptimizeRequest(
                    session_id="s", budget=pb.Budget(context_limit_tokens=1000), force=True
                ),
                timeout=TIMEOUT,
            )
    finally:
        server.terminate()
    log = server.log_text()
    assert secret not in log
    lines = [json.loads(line) for line in log.splitlines()]  # every stderr line is JSON
    records = [r for r in lines if "method" in r]
    assert [r["method"] for r in records] == ["AppendChunks", "Optimize"]
    assert records[0]["chunks"] == 1 and records[0]["session"] == "s"
    assert records[1]["tokens_before"] == records[0]["tokens_after"]
    assert all(r["code"] == "OK" and r["ms"] >= 0 for r in records)
