"""Fixtures more than one test module uses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from ctxopt.store import Store


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def store(data_dir: Path) -> Iterator[Store]:
    """A store on a fresh data directory, closed after the test."""
    s = Store(str(data_dir))
    yield s
    s.close()
