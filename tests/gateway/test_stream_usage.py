"""Asking for usage on a client's behalf, and taking the extra chunk back out."""

from __future__ import annotations

import json

import pytest
from ctxopt.api.gateway.stream_usage import UsageStripper, ask_for_usage

EVENTS = [
    {"choices": [{"index": 0, "delta": {"content": "ok"}}], "usage": None},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": None},
    {"choices": [], "usage": {"prompt_tokens": 12}},
]
STREAM = "".join(f"data: {json.dumps(e)}\n\n" for e in EVENTS).encode() + b"data: [DONE]\n\n"


@pytest.mark.parametrize("size", [1, 7, 64, len(STREAM)])
def test_the_usage_chunk_is_taken_out_wherever_the_bytes_are_cut(size: int) -> None:
    stripper = UsageStripper()
    out = b"".join(stripper.feed(STREAM[i : i + size]) for i in range(0, len(STREAM), size))
    out += stripper.finish()
    expected = "".join(f"data: {json.dumps(e)}\n\n" for e in EVENTS[:2]).encode()
    assert out == expected + b"data: [DONE]\n\n"


def test_the_option_is_added_only_to_a_stream_that_lacks_it() -> None:
    raw = b'{"stream": true, "messages": []}'
    asked = ask_for_usage(raw)
    assert asked == b'{"stream_options":{"include_usage":true},"stream": true, "messages": []}'
    assert ask_for_usage(asked) is None
    assert ask_for_usage(b'{"model": "gpt-5", "messages": []}') is None
    merged = ask_for_usage(b'{"stream": true, "stream_options": {"include_obfuscation": false}}')
    assert merged is not None
    assert json.loads(merged)["stream_options"] == {
        "include_obfuscation": False,
        "include_usage": True,
    }


def test_the_pipelines_parse_decides_without_parsing_the_body_again() -> None:
    """With the pipeline's parse of the host's body, the body sent (pruned: other
    messages) is not parsed to add the option, and a merge keeps its messages."""
    fields: dict[str, object] = {"stream": True, "messages": ["the host's"]}
    cut = b'{"stream": true, "messages": ["pruned", '  # no parse of it would succeed
    assert ask_for_usage(cut, fields) == b'{"stream_options":{"include_usage":true},' + cut[1:]
    assert ask_for_usage(cut, {"stream": False}) is None
    merged = ask_for_usage(
        b'{"stream": true, "stream_options": {"a": 1}, "messages": ["pruned"]}',
        {**fields, "stream_options": {"a": 1}},
    )
    assert merged is not None
    assert json.loads(merged) == {
        "stream": True,
        "stream_options": {"a": 1, "include_usage": True},
        "messages": ["pruned"],
    }
