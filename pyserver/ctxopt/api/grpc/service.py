"""The gRPC servicer: a thin layer over the engine.

Each RPC converts its request (convert.py), calls one engine method and
converts the answer back. Around every call, in one place (`_call`): the
owner the auth interceptor established, the deadline, engine errors mapped to
their status codes (the message names the field and value), unexpected errors
contained as INTERNAL, and one structured log line with no chunk text.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import grpc
from google.protobuf.message import Message

from ctxopt import validate
from ctxopt.api.grpc import convert, plan_delta
from ctxopt.api.grpc.interceptors import current_owner
from ctxopt.engine import Engine
from ctxopt.errors import CtxoptError
from ctxopt.model import Plan
from ctxopt.usage import wire
from ctxopt.usage.log import UsageLog
from ctxopt.v1 import ctxopt_pb2 as pb
from ctxopt.v1 import ctxopt_pb2_grpc as pb_grpc

log = logging.getLogger("ctxopt.calls")

R = TypeVar("R", bound=Message)


class ContextOptimizerService(pb_grpc.ContextOptimizerServicer):
    def __init__(self, engine: Engine, usage: UsageLog | None = None) -> None:
        self.engine = engine
        self.usage = usage  # the ledger Optimize calls are recorded in (None: not kept)
        self.plans = plan_delta.PlanBook()  # plans kept for deltas (keep_plan)

    # ---- session chunks ---------------------------------------------------

    def AppendChunks(
        self, request: pb.AppendChunksRequest, context: grpc.ServicerContext
    ) -> pb.AppendChunksResponse:
        def run(owner: str) -> pb.AppendChunksResponse:
            chunks = convert.chunks_from_pb(request.chunks)
            return convert.append_to_pb(self.engine.append(owner, request.session_id, chunks))

        return self._call("AppendChunks", context, request.session_id, len(request.chunks), run)

    def UpdateChunks(
        self, request: pb.UpdateChunksRequest, context: grpc.ServicerContext
    ) -> pb.UpdateChunksResponse:
        def run(owner: str) -> pb.UpdateChunksResponse:
            updates = [
                convert.update_from_pb(u, f"updates[{i}]") for i, u in enumerate(request.updates)
            ]
            updated = self.engine.update(owner, request.session_id, updates)
            return pb.UpdateChunksResponse(updated=updated)

        return self._call("UpdateChunks", context, request.session_id, len(request.updates), run)

    def RemoveChunks(
        self, request: pb.RemoveChunksRequest, context: grpc.ServicerContext
    ) -> pb.RemoveChunksResponse:
        def run(owner: str) -> pb.RemoveChunksResponse:
            removed, tokens = self.engine.remove(
                owner, request.session_id, list(request.chunk_ids), stash_originals=request.stash
            )
            return pb.RemoveChunksResponse(removed=removed, session_tokens=tokens)

        return self._call("RemoveChunks", context, request.session_id, len(request.chunk_ids), run)

    # ---- planning -----------------------------------------------------------

    def Optimize(
        self, request: pb.OptimizeRequest, context: grpc.ServicerContext
    ) -> pb.OptimizeResponse:
        def run(owner: str) -> pb.OptimizeResponse:
            plan_delta.check_request(request.keep_plan, request.base_plan_id)
            options = convert.options_from_pb(request, self.engine.config)
            plan = self.engine.optimize(owner, request.session_id, options)
            if self.usage is not None:
                self.usage.record_plan(owner, request.session_id, plan, front="grpc")
            if not request.keep_plan:
                return convert.plan_to_pb(plan)
            return self._kept_plan_pb(owner, request.session_id, request.base_plan_id, plan)

        return self._call("Optimize", context, request.session_id, 0, run)

    def _kept_plan_pb(
        self, owner: str, session_id: str, base_plan_id: str, plan: Plan
    ) -> pb.OptimizeResponse:
        """Keeps `plan` under a new id; a delta against `base_plan_id` while
        that plan is still kept, else the whole plan."""
        now = plan_delta.kept_plan(plan)
        base = self.plans.get(owner, session_id, base_plan_id) if base_plan_id else None
        if base is None:
            response = convert.plan_to_pb(plan)
        else:
            response = plan_delta.delta_to_pb(plan, now, base)
            response.base_plan_id = base_plan_id
        response.plan_id = self.plans.keep(owner, session_id, now)
        return response

    def Score(self, request: pb.ScoreRequest, context: grpc.ServicerContext) -> pb.ScoreResponse:
        def run(owner: str) -> pb.ScoreResponse:
            scores = self.engine.score(
                owner,
                request.session_id,
                request.query,
                tuple(request.query_embedding),
                convert.roots_from_pb(request.roots),
                convert.weights_from_pb(request.weights),
            )
            return convert.scores_to_pb(scores)

        return self._call("Score", context, request.session_id, 0, run)

    def OptimizeContext(
        self, request: pb.OptimizeContextRequest, context: grpc.ServicerContext
    ) -> pb.OptimizeContextResponse:
        def run(owner: str) -> pb.OptimizeContextResponse:
            chunks = convert.chunks_from_pb(request.chunks)
            options = convert.context_options_from_pb(request, self.engine.config)
            plan = self.engine.optimize_context(chunks, options)
            if self.usage is not None:
                self.usage.record_plan(owner, "", plan, front="grpc")
            return pb.OptimizeContextResponse(result=convert.plan_to_pb(plan))

        return self._call("OptimizeContext", context, "", len(request.chunks), run)

    # ---- stash --------------------------------------------------------------

    def SearchStash(
        self, request: pb.SearchStashRequest, context: grpc.ServicerContext
    ) -> pb.SearchStashResponse:
        def run(owner: str) -> pb.SearchStashResponse:
            hits, next_offset = self.engine.search_stash(
                owner,
                request.session_id,
                request.query,
                convert.filters_from_pb(request.filters),
                request.limit or validate.DEFAULT_SEARCH_LIMIT,
                convert.page_offset(request.page_token),
            )
            return convert.hits_to_pb(hits, next_offset)

        return self._call("SearchStash", context, request.session_id, 0, run)

    def Restore(
        self, request: pb.RestoreRequest, context: grpc.ServicerContext
    ) -> pb.RestoreResponse:
        def run(owner: str) -> pb.RestoreResponse:
            budget = (
                convert.budget_from_pb(request.budget, self.engine.config)
                if request.HasField("budget")
                else None
            )
            restored, tokens = self.engine.restore(
                owner,
                request.session_id,
                list(request.chunk_ids),
                budget=budget,
                force=request.force,
            )
            return pb.RestoreResponse(restored_ids=restored, session_tokens=tokens)

        return self._call("Restore", context, request.session_id, len(request.chunk_ids), run)

    # ---- sessions -----------------------------------------------------------

    def GetSessionStats(
        self, request: pb.GetSessionStatsRequest, context: grpc.ServicerContext
    ) -> pb.GetSessionStatsResponse:
        def run(owner: str) -> pb.GetSessionStatsResponse:
            return convert.stats_to_pb(self.engine.stats(owner, request.session_id))

        return self._call("GetSessionStats", context, request.session_id, 0, run)

    def DeleteSession(
        self, request: pb.DeleteSessionRequest, context: grpc.ServicerContext
    ) -> pb.DeleteSessionResponse:
        def run(owner: str) -> pb.DeleteSessionResponse:
            deleted = self.engine.delete_session(
                owner, request.session_id, purge_stash=request.purge_stash
            )
            return pb.DeleteSessionResponse(deleted=deleted)

        return self._call("DeleteSession", context, request.session_id, 0, run)

    def ExportSession(
        self, request: pb.ExportSessionRequest, context: grpc.ServicerContext
    ) -> pb.ExportSessionResponse:
        def run(owner: str) -> pb.ExportSessionResponse:
            return pb.ExportSessionResponse(
                json=self.engine.export_session(owner, request.session_id)
            )

        return self._call("ExportSession", context, request.session_id, 0, run)

    def ImportSession(
        self, request: pb.ImportSessionRequest, context: grpc.ServicerContext
    ) -> pb.ImportSessionResponse:
        def run(owner: str) -> pb.ImportSessionResponse:
            session_id, count = self.engine.import_session(
                owner, request.json, overwrite=request.replace
            )
            return pb.ImportSessionResponse(session_id=session_id, chunk_count=count)

        return self._call("ImportSession", context, "", 0, run)

    def GetServerInfo(
        self, request: pb.GetServerInfoRequest, context: grpc.ServicerContext
    ) -> pb.GetServerInfoResponse:
        return self._call(
            "GetServerInfo",
            context,
            "",
            0,
            lambda _owner: convert.server_info_to_pb(self.engine.config),
        )

    def ListSessions(
        self, request: pb.ListSessionsRequest, context: grpc.ServicerContext
    ) -> pb.ListSessionsResponse:
        def run(owner: str) -> pb.ListSessionsResponse:
            return convert.sessions_to_pb(*self.engine.list_sessions(owner, request.limit))

        return self._call("ListSessions", context, "", 0, run)

    def GetLastPlan(
        self, request: pb.GetLastPlanRequest, context: grpc.ServicerContext
    ) -> pb.GetLastPlanResponse:
        def run(owner: str) -> pb.GetLastPlanResponse:
            report = self.engine.last_plan(owner, request.session_id, request.top)
            return convert.last_plan_to_pb(report)

        return self._call("GetLastPlan", context, request.session_id, 0, run)

    def GetUsage(
        self, request: pb.GetUsageRequest, context: grpc.ServicerContext
    ) -> pb.GetUsageResponse:
        def run(owner: str) -> pb.GetUsageResponse:
            if self.usage is None:
                return pb.GetUsageResponse()
            report = self.usage.report(
                owner,
                wire.group_from_pb(request.group_by),
                since_ms=max(0, request.since_unix_ms),
                utc_offset_minutes=request.utc_offset_minutes,
            )
            return wire.report_to_pb(report, self.usage.ledger.retention_days)

        return self._call("GetUsage", context, "", 0, run)

    # ---- around every call --------------------------------------------------

    def _call(
        self,
        method: str,
        context: grpc.ServicerContext,
        session_id: str,
        chunk_count: int,
        run: Callable[[str], R],
    ) -> R:
        started = time.perf_counter()
        response: R | None = None
        code, message = grpc.StatusCode.OK, ""
        try:
            owner = current_owner()
            remaining = context.time_remaining()
            if remaining is not None and remaining <= 0:
                code, message = grpc.StatusCode.DEADLINE_EXCEEDED, "deadline passed before start"
            else:
                response = run(owner)
        except CtxoptError as e:
            code, message = grpc.StatusCode[e.status], str(e)
        except Exception:  # contained: a bad request must never take the server down
            log.exception("%s failed", method)
            code, message = grpc.StatusCode.INTERNAL, f"{method}: internal error (logged)"
        _log_call(method, session_id, chunk_count, response, code, started)
        if response is None:
            context.abort(code, message)
        return response


def _log_call(
    method: str,
    session_id: str,
    chunk_count: int,
    response: Message | None,
    code: grpc.StatusCode,
    started: float,
) -> None:
    record: dict[str, object] = {
        "method": method,
        "session": session_id,
        "chunks": chunk_count,
        "code": code.name,
        "ms": round((time.perf_counter() - started) * 1000, 3),
    }
    plan = response.result if isinstance(response, pb.OptimizeContextResponse) else response
    if isinstance(plan, pb.OptimizeResponse):
        record["tokens_before"] = plan.tokens_before
        record["tokens_after"] = plan.tokens_after
    elif isinstance(
        response, pb.AppendChunksResponse | pb.RemoveChunksResponse | pb.RestoreResponse
    ):
        record["tokens_after"] = response.session_tokens
    log.info("%s %s", method, code.name, extra={"fields": record})  # see logs.py
