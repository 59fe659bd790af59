"""One conversation, one session: a request continues the live session whose last
request it extends, even when other conversations share its opening."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from ctxopt.api.gateway.formats.openai_chat import OpenAIChat
from ctxopt.api.gateway.pipeline import Pipeline
from ctxopt.config import Config
from ctxopt.engine import Engine

from tests.gateway.test_aider import FILES, aider_body

CHAT = OpenAIChat()
HEADERS = {"authorization": "Bearer sk-test"}
OPENING = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test."},
]


@pytest.fixture
def pipeline() -> Pipeline:
    return Pipeline(Engine(Config(data_dir=":memory:")), Config(data_dir=":memory:"))


def session(pipeline: Pipeline, body: dict[str, Any], **headers: str) -> str:
    raw = orjson.dumps(body)
    prepared = pipeline.prepare(CHAT, "v1/chat/completions", raw, {**HEADERS, **headers}, "")
    assert prepared.session_id, prepared.note
    return prepared.session_id


def step(conversation: str, n: int) -> list[dict[str, Any]]:
    """The n-th tool step of `conversation`: the model's call and its result."""
    arguments = f'{{"cmd": "cat {conversation}{n}.py"}}'
    call: dict[str, Any] = {"id": f"{conversation}{n}", "type": "function"}
    call["function"] = {"name": "shell", "arguments": arguments}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"{conversation}{n}", "content": f"{conversation} {n}"},
    ]


def history(conversation: str, steps: int) -> dict[str, Any]:
    messages = [*OPENING]
    for n in range(steps):
        messages += step(conversation, n)
    return {"model": "gpt-5", "messages": messages}


def test_two_interleaved_conversations_with_the_same_opening_are_two_sessions(
    pipeline: Pipeline,
) -> None:
    first = {name: session(pipeline, history(name, 0)) for name in "ab"}
    assert first["a"] == first["b"]  # identical so far: nothing tells them apart yet
    seen: dict[str, set[str]] = {"a": set(), "b": set()}
    for steps in range(1, 5):
        for name in "ab":
            seen[name].add(session(pipeline, history(name, steps)))
    assert len(seen["a"]) == 1
    assert len(seen["b"]) == 1
    assert seen["a"] != seen["b"]


def test_a_side_call_on_the_history_stays_in_the_conversations_session(
    pipeline: Pipeline,
) -> None:
    """Gemini CLI's next-speaker check: the history plus a question, then the loop goes on."""
    main = session(pipeline, history("a", 2))
    side = history("a", 2)
    side["messages"].append({"role": "user", "content": "Who speaks next?"})
    assert session(pipeline, side) == main
    assert session(pipeline, history("a", 3)) == main


def test_the_session_header_still_wins(pipeline: Pipeline) -> None:
    named = {session(pipeline, history(n, 2), **{"x-ctxopt-session": "mine"}) for n in "ab"}
    assert len(named) == 1
    assert named.pop().endswith(".mine")


def test_two_aider_conversations_with_different_requests_are_two_sessions(
    pipeline: Pipeline,
) -> None:
    """Their openings (system prompt and canned examples) are identical; the users'
    requests differ, and each reflection continues its own conversation."""
    reply = ("assistant", "app.py\n```python\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n```")
    failed = ("user", "# 1 SEARCH/REPLACE block failed to match!")
    tasks = {"one": "Make app_3 in app.py return 2", "two": "Rename app_4 in app.py"}
    first = {name: session(pipeline, aider_body(task, FILES, [])) for name, task in tasks.items()}
    assert first["one"] != first["two"]
    for name, task in tasks.items():
        assert session(pipeline, aider_body(task, FILES, [reply, failed])) == first[name]
