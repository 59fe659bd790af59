"""The engine's deadline inside the gateway (`gateway_engine_deadline_ms`).

A request waits that long for the pipeline (engine sync and plan); past it,
the request goes up as if the engine had failed: the original when it fits
the window, else a local truncation, sized by estimates. The late call goes
on in its worker thread and keeps its conversation's lock until it is done,
so its decisions still land for the next call and the conversation's state
is never written by two threads at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import NoReturn, cast

import anyio
import anyio.to_thread

from ctxopt.api.gateway.formats.conversation import WireFormat
from ctxopt.api.gateway.pipeline import Pipeline
from ctxopt.api.gateway.prepared import Prepared
from ctxopt.config import Config
from ctxopt.engine import Engine


class DeadlinePassed(Exception):
    def __init__(self, deadline_ms: int) -> None:
        super().__init__(f"no answer within the {deadline_ms} ms deadline")


class _NoEngine:
    """Where the engine was: every call fails, so a pipeline over it takes its
    never-worse path (`Pipeline._fallback`) without waiting for anything."""

    def __init__(self, deadline_ms: int) -> None:
        self.deadline_ms = deadline_ms

    def __getattr__(self, _name: str) -> NoReturn:
        raise DeadlinePassed(self.deadline_ms)


async def prepare_within(
    pipeline: Pipeline,
    config: Config,
    fmt: WireFormat,
    path: str,
    body: bytes,
    headers: Mapping[str, str],
    owner: str,
) -> Prepared:
    """`pipeline.prepare(...)` in a worker thread, or, past the deadline, the
    request prepared without the engine."""
    deadline_ms = config.gateway_engine_deadline_ms
    call = partial(pipeline.prepare, fmt, path, body, headers, owner)
    if deadline_ms <= 0:
        return await anyio.to_thread.run_sync(call)
    with anyio.move_on_after(deadline_ms / 1000):
        # abandoned, the thread runs on to its end; only this request stops waiting
        return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
    # a pipeline of its own: the late call holds the conversation's state
    without = Pipeline(cast(Engine, _NoEngine(deadline_ms)), config)
    return await anyio.to_thread.run_sync(partial(without.prepare, fmt, path, body, headers, owner))
