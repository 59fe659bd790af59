"""The background writer, which waits for the engine to be quiet.

What it stores (a plan's line facts and token counts) only saves a restart
work, while each job takes the GIL and the store's lock from the calls it runs
beside: the two append + plan calls right after a 1,000-chunk session's first
plan took 27-34 ms with the writer running at once, 13-18 ms without it. So a
job waits until no engine call has been in flight for `QUIET_S` (a client's
back-to-back calls are closer than that; a model's answer between two calls
is far longer), or until it has waited `LONGEST_WAIT_S` (under constant load
the facts still land), or the writer shuts down. Jobs run one at a time, in
the order given.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial, wraps
from time import monotonic
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

QUIET_S = 0.05
LONGEST_WAIT_S = 5.0

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound=type)


def marked_calls(cls: C) -> C:
    """Each public method of `cls` (the engine, whose instances hold
    `sessions.writer`) marked in flight while it runs: one line on the class
    instead of one per method, and a method added later is marked too."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.isfunction(member):
            setattr(cls, name, _marked(member))
    return cls


def _marked(method: Callable[..., R]) -> Callable[..., R]:
    @wraps(method)
    def marked(self: Any, /, *args: Any, **kwargs: Any) -> R:
        with self.sessions.writer.busy:
            return method(self, *args, **kwargs)

    return marked


class QuietWriter:
    """`with writer.busy:` marks an engine call; `submit` queues a job for a
    quiet moment; `shutdown` runs what is queued at once and waits for it."""

    def __init__(
        self, name: str, *, quiet_s: float = QUIET_S, longest_wait_s: float = LONGEST_WAIT_S
    ) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._quiet_s = quiet_s
        self._longest_wait_s = longest_wait_s
        self._changed = threading.Condition()
        self._in_flight = 0
        self._last_left = monotonic()
        self._closing = False
        self.busy = _Busy(self)

    @property
    def in_flight(self) -> int:
        """Engine calls running now."""
        return self._in_flight

    def submit(self, job: Callable[P, object], *args: P.args, **kwargs: P.kwargs) -> None:
        self._pool.submit(self._when_quiet, monotonic(), partial(job, *args, **kwargs))

    def shutdown(self) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._pool.shutdown(wait=True)

    def call_started(self) -> None:
        with self._changed:
            self._in_flight += 1

    def call_ended(self) -> None:
        with self._changed:
            self._in_flight -= 1
            self._last_left = monotonic()

    def _when_quiet(self, queued: float, job: Callable[[], object]) -> None:
        give_up = queued + self._longest_wait_s
        with self._changed:
            while not self._closing:
                now = monotonic()
                if now >= give_up:
                    break
                if self._in_flight == 0 and now - self._last_left >= self._quiet_s:
                    break
                # a call leaving does not notify: the wait is re-checked within QUIET_S
                self._changed.wait(min(self._quiet_s, give_up - now))
        job()


class _Busy:
    """A context manager (a class, not a generator: it wraps every engine call)."""

    def __init__(self, writer: QuietWriter) -> None:
        self._writer = writer

    def __enter__(self) -> None:
        self._writer.call_started()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._writer.call_ended()
