"""Random and malformed requests against a real server: every answer is a
clear status, the server stays healthy and earlier sessions stay intact."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import cast

import grpc
import pytest
from ctxopt.v1 import ctxopt_pb2 as pb
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.serverproc import ServerProcess, serving

TIMEOUT = 10.0
# what a client may legitimately get back for a bad request
CLIENT_ERRORS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.PERMISSION_DENIED,
}
METHODS = {
    "AppendChunks": pb.AppendChunksRequest,
    "UpdateChunks": pb.UpdateChunksRequest,
    "RemoveChunks": pb.RemoveChunksRequest,
    "Optimize": pb.OptimizeRequest,
    "Score": pb.ScoreRequest,
    "OptimizeContext": pb.OptimizeContextRequest,
    "SearchStash": pb.SearchStashRequest,
    "Restore": pb.RestoreRequest,
    "GetSessionStats": pb.GetSessionStatsRequest,
    "DeleteSession": pb.DeleteSessionRequest,
    "ExportSession": pb.ExportSessionRequest,
    "ImportSession": pb.ImportSessionRequest,
    "GetUsage": pb.GetUsageRequest,
}
READ_ONLY = {
    "Score",
    "SearchStash",
    "GetSessionStats",
    "ExportSession",
    "OptimizeContext",
    "GetUsage",
}
KEEP = "keep-me"  # the session the fuzzer must not damage

texts = st.one_of(
    st.text(max_size=40),
    st.sampled_from(['"', "NEAR(", "*", "AND OR NOT", "\x00", "-1", KEEP, "s", "c0"]),
)
ints = st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([0, 1, -1, 7, 99]))
floats = st.floats(allow_nan=True, allow_infinity=True, width=64)


@st.composite
def chunks(draw: st.DrawFn) -> pb.Chunk:
    return pb.Chunk(
        id=draw(texts),
        role=cast(pb.Role, draw(ints)),
        kind=cast(pb.ChunkKind, draw(ints)),
        text=draw(texts),
        tokens=draw(ints),
        turn=draw(ints),
        pinned=draw(st.booleans()),
        policy=cast(pb.GcPolicy, draw(ints)),
        group_id=draw(texts),
        parent_id=draw(texts),
        references=draw(st.lists(texts, max_size=3)),
        summary_of=draw(st.lists(texts, max_size=2)),
        boost=draw(floats),
        embedding=draw(st.lists(st.floats(width=32, allow_nan=True), max_size=4)),
        tags=draw(st.lists(texts, max_size=3)),
    )


budgets = st.builds(
    pb.Budget,
    context_limit_tokens=ints,
    threshold_percent=floats,
    target_percent=floats,
    pressure_percent=floats,
    target_tokens=ints,
)
session_ids = st.one_of(texts, st.just(KEEP))


def structured_requests() -> st.SearchStrategy[tuple[str, bytes]]:
    """Well-formed messages with hostile values."""
    return st.one_of(
        st.builds(
            lambda group, since, offset: (
                "GetUsage",
                pb.GetUsageRequest(group_by=group, since_unix_ms=since, utc_offset_minutes=offset),
            ),
            ints,
            st.integers(-(2**63), 2**63 - 1),
            ints,
        ),
        st.builds(
            lambda s, c: ("AppendChunks", pb.AppendChunksRequest(session_id=s, chunks=c)),
            session_ids,
            st.lists(chunks(), max_size=4),
        ),
        st.builds(
            lambda s, ids, stash: (
                "RemoveChunks",
                pb.RemoveChunksRequest(session_id=s, chunk_ids=ids, stash=stash),
            ),
            session_ids,
            st.lists(texts, max_size=3),
            st.booleans(),
        ),
        st.builds(
            lambda s, q, b, strategy, ids, dry: (
                "Optimize",
                pb.OptimizeRequest(
                    session_id=s,
                    query=q,
                    budget=b,
                    strategy=strategy,
                    delete_ids=ids,
                    dry_run=dry,
                    force=True,
                ),
            ),
            session_ids,
            texts,
            budgets,
            ints,
            st.lists(texts, max_size=2),
            st.booleans(),
        ),
        st.builds(
            lambda c, b: ("OptimizeContext", pb.OptimizeContextRequest(chunks=c, budget=b)),
            st.lists(chunks(), max_size=4),
            budgets,
        ),
        st.builds(
            lambda s, q, limit, token: (
                "SearchStash",
                pb.SearchStashRequest(session_id=s, query=q, limit=limit, page_token=token),
            ),
            session_ids,
            texts,
            ints,
            texts,
        ),
        st.builds(
            lambda s, ids, force: (
                "Restore",
                pb.RestoreRequest(session_id=s, chunk_ids=ids, force=force),
            ),
            session_ids,
            st.lists(texts, max_size=3),
            st.booleans(),
        ),
        st.builds(
            lambda s, u: ("UpdateChunks", pb.UpdateChunksRequest(session_id=s, updates=u)),
            session_ids,
            st.lists(
                st.builds(
                    pb.ChunkUpdate, id=texts, policy=ints, boost=floats, pinned=st.booleans()
                ),
                max_size=3,
            ),
        ),
        st.builds(lambda j: ("ImportSession", pb.ImportSessionRequest(json=j)), texts),
    ).map(lambda pair: (pair[0], pair[1].SerializeToString()))


def raw_requests() -> st.SearchStrategy[tuple[str, bytes]]:
    """Bytes that may not even parse as the request message."""
    return st.tuples(st.sampled_from(sorted(METHODS)), st.binary(max_size=200))


def undecodable_requests() -> st.SearchStrategy[tuple[str, bytes]]:
    """Bytes no request message parses: they open with field 1 of wire type 7,
    which protobuf does not have."""
    return st.tuples(
        st.sampled_from(sorted(METHODS)), st.binary(max_size=100).map(lambda b: b"\x0f" + b)
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(tmp_path_factory.mktemp("fuzz")) as running:
        yield running


@pytest.fixture(scope="module")
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.address) as open_channel:
        yield open_channel


def export(channel: grpc.Channel) -> object:
    call = channel.unary_unary(
        "/ctxopt.v1.ContextOptimizer/ExportSession",
        request_serializer=pb.ExportSessionRequest.SerializeToString,
        response_deserializer=pb.ExportSessionResponse.FromString,
    )
    return json.loads(call(pb.ExportSessionRequest(session_id=KEEP), timeout=TIMEOUT).json)


@pytest.fixture(scope="module")
def kept_session(server: ServerProcess, channel: grpc.Channel) -> object:
    chunks = [
        pb.Chunk(id=f"c{i}", role=pb.ROLE_USER, kind=pb.CHUNK_KIND_MESSAGE, text=f"turn {i}")
        for i in range(5)
    ]
    for c in chunks[:2]:
        c.pinned = True
    server.stub(channel).AppendChunks(
        pb.AppendChunksRequest(session_id=KEEP, chunks=chunks), timeout=TIMEOUT
    )
    return export(channel)


def send(channel: grpc.Channel, method: str, payload: bytes) -> None:
    call = channel.unary_unary(
        f"/ctxopt.v1.ContextOptimizer/{method}",
        request_serializer=lambda raw: raw,
        response_deserializer=lambda raw: raw,
    )
    try:
        call(payload, timeout=TIMEOUT)
    except grpc.RpcError as error:
        # bytes that are not the request message at all are the client's fault too
        # (grpc alone answers them INTERNAL: DecodeInterceptor)
        assert error.code() in CLIENT_ERRORS, error
        assert error.details(), "every refusal says why"


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(st.one_of(structured_requests(), raw_requests()))
def test_hostile_requests_get_clear_statuses(
    channel: grpc.Channel, kept_session: object, request_: tuple[str, bytes]
) -> None:
    method, payload = request_
    if method not in READ_ONLY:
        # a valid mutating call on the protected session would change it legitimately
        parsed = METHODS[method]()
        try:
            parsed.ParseFromString(payload)
        except Exception:
            parsed = None
        if parsed is not None and getattr(parsed, "session_id", "") == KEEP:
            return
    send(channel, method, payload)


@FUZZ
@given(undecodable_requests())
def test_bytes_that_are_no_message_answer_invalid_argument_naming_the_method(
    channel: grpc.Channel, request_: tuple[str, bytes]
) -> None:
    method, payload = request_
    call = channel.unary_unary(
        f"/ctxopt.v1.ContextOptimizer/{method}",
        request_serializer=lambda raw: raw,
        response_deserializer=lambda raw: raw,
    )
    with pytest.raises(grpc.RpcError) as refused:
        call(payload, timeout=TIMEOUT)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
    assert method in (refused.value.details() or "")


def test_server_healthy_and_session_intact_after_fuzzing(
    channel: grpc.Channel, kept_session: object
) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    status = health.Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT).status
    assert status == health_pb2.HealthCheckResponse.SERVING
    assert export(channel) == kept_session
