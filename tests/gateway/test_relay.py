"""The relay on the wire: what the provider's socket receives, byte for byte.

A body nothing reads (gateway mode off, a path that is not a message call) goes
up as it arrives instead of being read whole first; these tests hold that to
the bytes the buffered relay sends (request line, headers and body, as a
provider's socket sees them), and check the faults streaming adds: a client
that leaves mid-body, an error answered while the body streams.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.gateway.checks import gateway_log_lines
from tests.serverproc import ServerProcess, serving

ANSWER = b'{"id":"msg_1","type":"message","content":[]}'
ERROR = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
# unknown to the gateway's model table: in mode on the body is read, then sent as it came
UNKNOWN_MODEL = "model-the-gateway-does-not-know"


@dataclass
class Wire:
    """A provider that records each request's raw bytes (head and body) and
    answers `status` with `body`."""

    url: str = ""
    requests: list[bytes] = field(default_factory=list)
    status: int = 200
    body: bytes = ANSWER
    arrived: threading.Event = field(default_factory=threading.Event)  # a request, whole or cut
    began: threading.Event = field(default_factory=threading.Event)  # a request's head
    cut: bool = False  # answer with a longer length than the body, then close

    def serve(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        buffered = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buffered:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffered += data
                head, _, buffered = buffered.partition(b"\r\n\r\n")
                self.began.set()
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                while len(buffered) < length:
                    data = conn.recv(65536)
                    if not data:  # the gateway gave up on an unfinished body
                        self.requests.append(head + b"\r\n\r\n" + buffered)
                        self.arrived.set()
                        return
                    buffered += data
                self.requests.append(head + b"\r\n\r\n" + buffered[:length])
                buffered = buffered[length:]
                self.arrived.set()
                reason = b"OK" if self.status == 200 else b"Error"
                declared = len(self.body) + (1000 if self.cut else 0)
                conn.sendall(
                    b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\nx-provider: wire\r\n\r\n%s"
                    % (self.status, reason, declared, self.body)
                )
                if self.cut:
                    return


@pytest.fixture(scope="module")
def wire() -> Iterator[Wire]:
    listener = socket.create_server(("127.0.0.1", 0))
    recorder = Wire(url=f"http://127.0.0.1:{listener.getsockname()[1]}")
    threading.Thread(target=recorder.serve, args=(listener,), daemon=True).start()
    yield recorder
    listener.close()


@pytest.fixture(autouse=True)
def fresh_wire(wire: Wire) -> None:
    wire.requests.clear()
    wire.status, wire.body, wire.cut = 200, ANSWER, False
    wire.arrived.clear()
    wire.began.clear()


def _gateway(tmp: Path, wire: Wire, mode: str) -> Iterator[ServerProcess]:
    env = {
        "CTXOPT_UPSTREAM_ANTHROPIC": wire.url,
        "CTXOPT_UPSTREAM_OPENAI": wire.url,
        "CTXOPT_UPSTREAM_GEMINI": wire.url,
        "CTXOPT_GATEWAY_MODE": mode,
    }
    with serving(tmp, "--gateway-addr", "127.0.0.1:0", env=env) as server:
        yield server


@pytest.fixture(scope="module")
def streaming(wire: Wire, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Mode off: every body with a declared length goes up as it arrives."""
    yield from _gateway(tmp_path_factory.mktemp("off"), wire, "off")


@pytest.fixture(scope="module")
def buffering(wire: Wire, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Mode on: a message call's body is read whole, then sent."""
    yield from _gateway(tmp_path_factory.mktemp("on"), wire, "on")


def _body(size: int) -> bytes:
    text = "a line of a long tool output\n" * (size // 30)
    body = {
        "model": UNKNOWN_MODEL,
        "max_tokens": 5,
        "messages": [{"role": "user", "content": text}],
    }
    return json.dumps(body, indent=1).encode()


def _post(
    server: ServerProcess, raw: bytes, path: str = "/anthropic/v1/messages"
) -> httpx.Response:
    headers = {"x-api-key": "k", "content-type": "application/json", "anthropic-version": "1"}
    return httpx.post(f"{server.gateway_url}{path}", content=raw, headers=headers, timeout=30)


@pytest.mark.parametrize("size", [100, 1_200_000])
def test_a_streamed_body_reaches_the_provider_as_the_buffered_relay_sends_it(
    streaming: ServerProcess, buffering: ServerProcess, wire: Wire, size: int
) -> None:
    raw = _body(size)
    for server in (streaming, buffering):
        answer = _post(server, raw)
        assert answer.status_code == 200 and answer.content == ANSWER
    streamed, buffered = wire.requests
    assert streamed == buffered
    assert streamed.endswith(b"\r\n\r\n" + raw)
    assert b"\r\nContent-Length: %d\r\n" % len(raw) in streamed


def test_a_chunked_upload_goes_up_with_its_length_as_before(
    streaming: ServerProcess, wire: Wire
) -> None:
    raw = _body(300_000)
    _post(streaming, raw)
    pieces = (raw[i : i + 70_000] for i in range(0, len(raw), 70_000))
    headers = {"x-api-key": "k", "content-type": "application/json", "anthropic-version": "1"}
    url = f"{streaming.gateway_url}/anthropic/v1/messages"
    assert httpx.post(url, content=pieces, headers=headers).status_code == 200
    declared, chunked = wire.requests
    # the chunked upload carries transfer-encoding, a hop-by-hop header that stays here
    assert chunked == declared


def test_a_path_that_is_not_a_message_call_streams_in_mode_on_too(
    buffering: ServerProcess, wire: Wire
) -> None:
    raw = _body(500_000)
    answer = _post(buffering, raw, "/anthropic/v1/messages/count_tokens")
    assert answer.status_code == 200 and answer.headers["x-ctxopt-outcome"] == "pass-through"
    assert wire.requests[-1].endswith(b"\r\n\r\n" + raw)
    assert wire.requests[-1].startswith(b"POST /v1/messages/count_tokens HTTP/1.1\r\n")


def test_a_provider_error_reaches_the_client_unchanged_while_the_body_streams(
    streaming: ServerProcess, wire: Wire
) -> None:
    wire.status, wire.body = 529, ERROR
    answer = _post(streaming, _body(800_000))
    assert answer.status_code == 529
    assert answer.content == ERROR and answer.headers["x-provider"] == "wire"
    assert answer.headers["x-ctxopt-outcome"] == "pass-through"


def _connect(server: ServerProcess, length: int, start: bytes) -> socket.socket:
    """A client that sent a message call's head and the first bytes of its body."""
    host, port = server.gateway_url.removeprefix("http://").split(":")
    client = socket.create_connection((host, int(port)))
    client.sendall(
        b"POST /anthropic/v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (length, start)
    )
    return client


def test_the_provider_gets_the_body_while_the_client_still_sends_it(
    streaming: ServerProcess, wire: Wire
) -> None:
    raw = _body(400_000)
    with _connect(streaming, len(raw), raw[:200_000]) as client:
        assert wire.began.wait(10)  # before the client sent the rest
        assert not wire.requests
        client.sendall(raw[200_000:])
        assert wire.arrived.wait(10)
        assert client.recv(65536).startswith(b"HTTP/1.1 200 ")
    assert wire.requests[-1].endswith(b"\r\n\r\n" + raw)


def test_a_client_that_leaves_mid_body_costs_nothing_but_its_request(
    streaming: ServerProcess, wire: Wire
) -> None:
    with _connect(streaming, 1_000_000, b'{"model": "' + b"x" * 200_000):
        pass
    # what went up of it is cut off: the upstream connection closes unfinished
    assert wire.arrived.wait(10)
    raw = _body(1_000)
    assert _post(streaming, raw).content == ANSWER
    cut, whole = wire.requests[0], wire.requests[-1]
    assert len(cut) < 1_000_000 and whole.endswith(raw)
    calls = gateway_log_lines(streaming, lambda line: line.get("status") == 200)
    assert calls and "Traceback" not in streaming.log_text()


def test_an_answer_the_provider_cuts_short_reaches_the_client_broken(
    buffering: ServerProcess, wire: Wire
) -> None:
    wire.cut = True
    with pytest.raises(httpx.RemoteProtocolError):
        _post(buffering, _body(1_000)).read()
    wire.cut = False
    assert _post(buffering, _body(1_000)).content == ANSWER


def test_the_provider_gets_the_clients_headers_and_none_of_the_gateways_own(
    buffering: ServerProcess, wire: Wire
) -> None:
    # a client that sends no user agent and asks for no compression: none is added on the
    # way up (an HTTP client library's defaults would add both, and a gzip answer would
    # then reach a client that never asked for one)
    raw = _body(1_000)
    host, port = buffering.gateway_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as client:
        client.sendall(
            b"POST /anthropic/v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json"
            b"\r\nx-api-key: k\r\nx-ctxopt-session: s\r\ncontent-length: %d\r\n\r\n%s"
            % (len(raw), raw)
        )
        assert client.recv(65536).startswith(b"HTTP/1.1 200 ")
    head = wire.requests[-1].partition(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0] == b"POST /v1/messages HTTP/1.1"
    fields = dict(line.split(b": ", 1) for line in head[1:])
    assert {k.lower() for k in fields} == {
        b"host",
        b"content-type",
        b"x-api-key",
        b"content-length",
    }
    assert fields[b"Host"] == wire.url.removeprefix("http://").encode()
    assert fields[b"Content-Length"] == b"%d" % len(raw)


def test_a_method_the_gateway_does_not_relay_is_answered_405_here(
    buffering: ServerProcess, wire: Wire
) -> None:
    answer = httpx.request("TRACE", f"{buffering.gateway_url}/anthropic/v1/messages", timeout=30)
    assert answer.status_code == 405
    assert not wire.began.wait(0.5) and not wire.requests


def test_a_path_goes_up_encoded_as_the_client_encoded_it(
    buffering: ServerProcess, wire: Wire
) -> None:
    raw = _body(1_000)
    url = f"{buffering.gateway_url}/anthropic/v1/files/a%20b%2Fc"
    headers = {"x-api-key": "k", "content-type": "application/json"}
    assert httpx.post(url, content=raw, headers=headers, timeout=30).status_code == 200
    assert wire.requests[-1].startswith(b"POST /v1/files/a%20b%2Fc HTTP/1.1\r\n")
    # a prefix the client encoded too: the path is encoded again, as it was decoded
    url = f"{buffering.gateway_url}/%61nthropic/v1/files/a%20b"
    assert httpx.post(url, content=raw, headers=headers, timeout=30).status_code == 200
    assert wire.requests[-1].startswith(b"POST /v1/files/a%20b HTTP/1.1\r\n")
