"""Plan deltas (OptimizeRequest.keep_plan / base_plan_id) against a real server:
a delta, applied to the plan it names, is the plan a client without deltas
gets; an unknown or evicted base gets a full plan; bad fields are named."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

import grpc
import pytest
from ctxopt.api.grpc.plan_delta import PLANS_PER_SESSION, KeptPlan, PlanBook
from ctxopt.v1 import ctxopt_pb2 as pb
from ctxopt.v1 import ctxopt_pb2_grpc as pb_grpc

from tests.serverproc import ServerProcess, serving
from tests.test_service import TIMEOUT, append, conversation, expect_error

Stub = pb_grpc.ContextOptimizerStub
T = TypeVar("T")
DELTA_FIELDS = {"plan_id", "base_plan_id", "kept_runs", "decision_runs", "decision_scores"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(tmp_path_factory.mktemp("plan_delta")) as running:
        yield running


def step_chunks(k: int) -> list[pb.Chunk]:
    """A tool call's output (line excerpts shrink these) and the model's reply."""
    log = "\n".join(
        f"step {k} line {i}: ERROR in parser.py:{i} retry pool {i % 7}" for i in range(80)
    )
    return [
        pb.Chunk(
            id=f"out{k}", role=pb.ROLE_TOOL, kind=pb.CHUNK_KIND_TOOL_RESULT, text=log, turn=20 + k
        ),
        pb.Chunk(
            id=f"reply{k}",
            role=pb.ROLE_MODEL,
            kind=pb.CHUNK_KIND_MESSAGE,
            text=f"Step {k}: the parser cache misses on widget {k}.",
            turn=20 + k,
        ),
    ]


def request(session: str, dry_run: bool = True, query: str = "parser cache") -> pb.OptimizeRequest:
    return pb.OptimizeRequest(
        session_id=session,
        query=query,
        budget=pb.Budget(context_limit_tokens=20000, target_percent=40.0),
        roots=pb.Roots(recent_turns=2),
        dry_run=dry_run,
        force=True,
        lean=True,
    )


def _pieces(runs: Sequence[int], base: Sequence[T], own: Sequence[T]) -> list[T]:
    out: list[T] = []
    taken = 0
    for start, count in zip(runs[::2], runs[1::2], strict=True):
        if start >= 0:
            assert start + count <= len(base)
            out += base[start : start + count]
        else:
            out += own[taken : taken + count]
            taken += count
    assert taken == len(own)
    return out


def rebuild(base: pb.OptimizeResponse, delta: pb.OptimizeResponse) -> pb.OptimizeResponse:
    """The whole plan `delta` stands for, as the proto's comments define it."""
    if not delta.base_plan_id:
        return delta
    plan = pb.OptimizeResponse()
    plan.CopyFrom(delta)
    for name in ("kept_ids", "decisions", "kept_runs", "decision_runs", "decision_scores"):
        plan.ClearField(name)
    plan.base_plan_id = ""
    plan.kept_ids.extend(_pieces(delta.kept_runs, base.kept_ids, delta.kept_ids))
    plan.decisions.extend(_pieces(delta.decision_runs, base.decisions, delta.decisions))
    if delta.decision_scores:
        assert len(delta.decision_scores) == len(plan.decisions)
        for decision, score in zip(plan.decisions, delta.decision_scores, strict=True):
            decision.score = score
    return plan


def comparable(plan: pb.OptimizeResponse) -> pb.OptimizeResponse:
    out = pb.OptimizeResponse()
    out.CopyFrom(plan)
    out.ClearField("server_ms")
    out.ClearField("plan_id")
    return out


def test_deltas_rebuild_the_plans_of_a_client_without_them(stub: Stub) -> None:
    """Two sessions fed the same chunks and requests: one asks with deltas, one without."""
    for session in ("with", "without"):
        append(stub, session, conversation())
    held: pb.OptimizeResponse | None = None
    deltas = 0
    sizes: list[tuple[int, int]] = []
    shapes: set[tuple[bool, bool]] = set()  # (new decisions, new scores) of each answer
    for k in range(8):
        for session in ("with", "without"):
            append(stub, session, step_chunks(k))
        # every third plan is applied (chunks leave mid-session), one asks another query,
        # and one repeats the one before it unchanged
        dry_run = k % 3 != 1
        query = "widget retry" if k == 4 else "parser cache"
        for _ in range(2 if k == 5 else 1):
            keep = request("with", dry_run, query)
            keep.keep_plan = True
            keep.base_plan_id = held.plan_id if held is not None else ""
            answer: pb.OptimizeResponse = stub.Optimize(keep, timeout=TIMEOUT)
            full: pb.OptimizeResponse = stub.Optimize(
                request("without", dry_run, query), timeout=TIMEOUT
            )
            assert answer.plan_id
            assert not {f.name for f, _ in full.ListFields()} & DELTA_FIELDS  # as before deltas
            if held is not None:
                assert answer.base_plan_id == held.plan_id
                assert len(answer.kept_ids) < len(full.kept_ids)
                deltas += 1
            plan = rebuild(held, answer) if held is not None else answer
            assert comparable(plan) == comparable(full)
            held = plan
            held.plan_id = answer.plan_id
            sizes.append((answer.ByteSize(), full.ByteSize()))
            shapes.add((bool(answer.decisions), bool(answer.decision_scores)))
    assert deltas == 8
    # the repeated plan (k == 5) carries its header, two runs and no entries
    delta_bytes, full_bytes = sizes[6]  # calls k = 0..5, then k = 5 again
    assert delta_bytes < full_bytes / 4
    assert held is not None and any(d.replacement_text for d in held.decisions)  # excerpts
    assert {(True, True), (False, False)} <= shapes


def test_unknown_or_evicted_base_gets_a_full_plan(stub: Stub) -> None:
    append(stub, "evicted", conversation())
    keep = request("evicted")
    keep.keep_plan = True
    ids = [stub.Optimize(keep, timeout=TIMEOUT).plan_id for _ in range(PLANS_PER_SESSION + 1)]
    assert len(set(ids)) == len(ids)
    full = stub.Optimize(request("evicted"), timeout=TIMEOUT)
    for base in (ids[0], "0123456789abcdef"):
        keep.base_plan_id = base
        answer = stub.Optimize(keep, timeout=TIMEOUT)
        assert answer.base_plan_id == "" and not answer.kept_runs
        assert comparable(answer) == comparable(full)
    # a plan is kept per session: another session cannot name it
    append(stub, "other", conversation())
    other = request("other")
    other.keep_plan, other.base_plan_id = True, answer.plan_id
    assert stub.Optimize(other, timeout=TIMEOUT).base_plan_id == ""
    keep.base_plan_id = answer.plan_id
    assert stub.Optimize(keep, timeout=TIMEOUT).base_plan_id == answer.plan_id


@pytest.mark.parametrize(
    ("keep_plan", "base_plan_id", "problem"),
    [
        (False, "0123456789abcdef", "needs keep_plan"),
        (True, "x" * 65, "not a plan id"),
        (True, "ab cd", "not a plan id"),
    ],
)
def test_bad_plan_fields_are_named(
    stub: Stub, keep_plan: bool, base_plan_id: str, problem: str
) -> None:
    append(stub, "bad", conversation())
    bad = request("bad")
    bad.keep_plan, bad.base_plan_id = keep_plan, base_plan_id
    details = expect_error(grpc.StatusCode.INVALID_ARGUMENT, "base_plan_id", stub.Optimize, bad)
    assert problem in details


def test_book_keeps_within_its_byte_bound() -> None:
    book = PlanBook(max_bytes=250)

    def plan(weight: int) -> KeptPlan:
        return KeptPlan([], [], [], weight)

    first = book.keep("", "a", plan(100))
    second = book.keep("", "b", plan(100))
    assert book.get("", "a", first) is not None  # now the most recently used
    book.keep("", "c", plan(100))
    assert book.get("", "b", second) is None
    assert book.get("", "a", first) is not None
    assert book.get("other owner", "a", first) is None
