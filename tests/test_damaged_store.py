"""A damaged, unwritable or full data directory, as a user meets it: the
server refuses to open in one clear line, a full disk is a clear status and a
clean shutdown."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from ctxopt.store import DB_FILE, PID_FILE
from ctxopt.v1 import ctxopt_pb2 as pb

from tests.serverproc import CTXOPT, serving, start_server

TIMEOUT = 10.0


def refuses_to_start(data_dir: Path, tmp_path: Path) -> str:
    """`ctxopt serve` on `data_dir` exits 2 with one line and no traceback; the line."""
    result = subprocess.run(
        [str(CTXOPT), "serve", "--addr", "127.0.0.1:0", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def filled_store(tmp_path: Path) -> Path:
    """A data directory holding a session of a few hundred chunks, closed cleanly."""
    data = tmp_path / "data"
    with serving(tmp_path) as server, grpc.insecure_channel(server.address) as channel:
        stub = server.stub(channel)
        for batch in range(8):
            chunks = [
                pb.Chunk(
                    id=f"c{batch}-{i}",
                    role=pb.ROLE_USER,
                    kind=pb.CHUNK_KIND_MESSAGE,
                    text=f"chunk {batch} {i} " + "filler words " * 40,
                )
                for i in range(40)
            ]
            stub.AppendChunks(
                pb.AppendChunksRequest(session_id="full", chunks=chunks), timeout=TIMEOUT
            )
    return data


@pytest.mark.parametrize("damage", ["header", "truncated", "middle"])
def test_a_damaged_database_refuses_to_open_in_one_line(tmp_path: Path, damage: str) -> None:
    data = filled_store(tmp_path)
    db = data / DB_FILE
    raw = bytearray(db.read_bytes())
    assert len(raw) > 64 * 1024
    if damage == "header":
        raw[:100] = b"\x17" * 100
    elif damage == "truncated":
        raw = raw[: len(raw) // 3 + 1234]
    else:
        middle = (len(raw) // 2) // 4096 * 4096
        raw[middle : middle + 4096] = os.urandom(4096)
    db.write_bytes(bytes(raw))
    line = refuses_to_start(data, tmp_path)
    assert str(db) in line or str(data) in line
    assert "damaged" in line or "not a database" in line


def test_a_data_directory_that_is_a_file_refuses_in_one_line(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "data"
    not_a_dir.write_text("oops")
    assert "data_dir" in refuses_to_start(not_a_dir, tmp_path)


def test_the_lock_is_on_the_database_not_on_a_file_anyone_can_delete(tmp_path: Path) -> None:
    with serving(tmp_path) as server:
        (tmp_path / "data" / PID_FILE).unlink()
        line = refuses_to_start(tmp_path / "data", tmp_path)
        assert "in use by another ctxopt process" in line
        assert server.process.poll() is None


@contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A small RAM file system of our own (root only; skipped elsewhere)."""
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_read_only_data_directory_refuses_in_one_line(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", "4m") as mount:
        (mount / "data").mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        assert "data_dir" in refuses_to_start(mount / "data", tmp_path)


def test_a_full_disk_is_resource_exhausted_and_shutdown_is_clean(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "small", "1m") as mount:
        server = start_server(mount / "data", tmp_path / "server.log")
        try:
            with grpc.insecure_channel(server.address) as channel:
                stub = server.stub(channel)
                with pytest.raises(grpc.RpcError) as raised:
                    for batch in range(200):
                        chunk = pb.Chunk(
                            id=f"c{batch}",
                            role=pb.ROLE_USER,
                            kind=pb.CHUNK_KIND_MESSAGE,
                            text=os.urandom(20_000).hex(),
                        )
                        stub.AppendChunks(
                            pb.AppendChunksRequest(session_id="full", chunks=[chunk]),
                            timeout=TIMEOUT,
                        )
                error: Any = raised.value
                assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
                assert "disk is full" in error.details()
                stats = stub.GetSessionStats(
                    pb.GetSessionStatsRequest(session_id="full"), timeout=TIMEOUT
                )
                assert stats.chunk_count == batch  # the refused append changed nothing
        finally:
            code = server.terminate()
        assert code == 0, server.log_text()
        assert "Traceback" not in server.log_text()
