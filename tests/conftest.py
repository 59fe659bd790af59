"""Fixtures more than one test module uses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from ctxopt.store import Store
from ctxopt.v1 import ctxopt_pb2_grpc as pb_grpc

from tests.serverproc import ServerProcess


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def store(data_dir: Path) -> Iterator[Store]:
    """A store on a fresh data directory, closed after the test."""
    s = Store(str(data_dir))
    yield s
    s.close()


@pytest.fixture
def stub(server: ServerProcess) -> Iterator[pb_grpc.ContextOptimizerStub]:
    """A client of the module's `server` fixture (each module starts its own)."""
    with grpc.insecure_channel(server.address) as channel:
        yield server.stub(channel)
