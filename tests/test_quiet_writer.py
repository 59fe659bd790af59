"""The background writer waits for a moment with no engine call in flight
(engine/quiet.py), yet runs everything given by shutdown, in order."""

from __future__ import annotations

import inspect
import threading
from pathlib import Path

import pytest
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.engine.quiet import QuietWriter
from ctxopt.errors import NotFound

from tests.factory import chunk


def _writer(*, longest_wait_s: float = 60.0) -> QuietWriter:
    return QuietWriter("test-writer", quiet_s=0.01, longest_wait_s=longest_wait_s)


def test_a_job_waits_while_a_call_is_in_flight_and_runs_once_it_ends() -> None:
    writer = _writer()
    ran = threading.Event()
    try:
        with writer.busy:
            writer.submit(ran.set)
            assert not ran.wait(0.3)  # held: the call is still running
        assert ran.wait(10)
    finally:
        writer.shutdown()


def test_under_constant_load_a_job_runs_after_the_longest_wait() -> None:
    writer = _writer(longest_wait_s=0.05)
    ran = threading.Event()
    try:
        with writer.busy:
            writer.submit(ran.set)
            assert ran.wait(10)
    finally:
        writer.shutdown()


def test_shutdown_runs_what_is_queued_at_once_in_order_even_during_a_call() -> None:
    writer = _writer()
    done: list[int] = []
    with writer.busy:
        for i in range(5):
            writer.submit(done.append, i)
        writer.shutdown()
        assert done == [0, 1, 2, 3, 4]


def test_every_public_engine_call_is_marked_and_unmarked_even_when_it_fails(
    tmp_path: Path,
) -> None:
    public = [
        name
        for name, member in vars(Engine).items()
        if not name.startswith("_") and inspect.isfunction(member)
    ]
    assert {"append", "optimize", "optimize_context", "restore", "stats"} <= set(public)
    assert all(hasattr(getattr(Engine, name), "__wrapped__") for name in public)

    engine = Engine(Config(data_dir=str(tmp_path)))
    try:
        engine.append("", "s", [chunk("a", "some text")])
        assert engine.sessions.writer.in_flight == 0
        with pytest.raises(NotFound):
            engine.stats("", "no-such-session")
        assert engine.sessions.writer.in_flight == 0
    finally:
        engine.close()
