"""Gemini generateContent and streamGenerateContent through the gateway, via `google-genai`."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest
from ctxopt.api.gateway.hosts import COMPRESSION_HEADER, GEMINI_CLI_DEFAULT_LIMIT
from google import genai
from google.genai import types

from benchmarks.gateway.histories import BASH_TOOL, Trajectory, load, request
from tests.gateway.checks import assert_valid, tokens_of
from tests.gateway.upstream import FakeUpstream
from tests.serverproc import ServerProcess

MODEL = "gemini-2.5-pro"


@pytest.fixture(scope="module")
def trajectory() -> Trajectory:
    return load(limit=3)[2]


def client(
    gateway: ServerProcess, headers: dict[str, str], version: str = "v1beta"
) -> genai.Client:
    options = types.HttpOptions(
        base_url=f"{gateway.gateway_url}/gemini", api_version=version, headers=headers
    )
    return genai.Client(api_key="gemini-test-key", http_options=options)


def config(system: str) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(
        system_instruction=system,
        tools=[types.Tool(function_declarations=[types.FunctionDeclaration(**BASH_TOOL)])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )


@pytest.mark.parametrize("streamed", [False, True])
def test_a_tool_loop_is_pruned_and_calls_stay_answered(
    gateway: ServerProcess, upstream: FakeUpstream, trajectory: Trajectory, streamed: bool
) -> None:
    final = request("gemini", trajectory, len(trajectory.steps))
    window = int(tokens_of(final["contents"]) * 0.6) + tokens_of(
        [final["systemInstruction"], final["tools"]]
    )
    sdk = client(
        gateway, {"x-ctxopt-window-tokens": str(window), "x-ctxopt-session": f"gemini-{streamed}"}
    )
    outcomes = []
    for steps in range(0, len(trajectory.steps) + 1, 5):
        body = request("gemini", trajectory, steps)
        contents: Any = body["contents"]
        if streamed:
            chunks = list(
                sdk.models.generate_content_stream(
                    model=MODEL, contents=contents, config=config(trajectory.system)
                )
            )
            assert "".join(c.text or "" for c in chunks) == "ok", chunks
            headers = chunks[-1].sdk_http_response.headers if chunks[-1].sdk_http_response else {}
            recorded = upstream.calls(":streamGenerateContent")[-1]
            assert recorded.query == "alt=sse"
        else:
            answer = sdk.models.generate_content(
                model=MODEL, contents=contents, config=config(trajectory.system)
            )
            assert answer.text == "ok"
            headers = answer.sdk_http_response.headers if answer.sdk_http_response else {}
            recorded = upstream.calls(":generateContent")[-1]
        outcomes.append((headers or {}).get("x-ctxopt-outcome"))
        sent = recorded.body
        assert_valid("gemini", {**sent, "contents": body["contents"]}, sent, window)
        assert sent["contents"][0] == body["contents"][0]
    assert "optimized" in outcomes


def test_v1_paths_are_served_too(gateway: ServerProcess, upstream: FakeUpstream) -> None:
    sdk = client(gateway, {}, version="v1")  # held: a collected client closes its connection
    answer = sdk.models.generate_content(model=MODEL, contents="hello")
    assert answer.text == "ok"
    assert upstream.calls("/v1/models/gemini-2.5-pro:generateContent")


def test_signed_parts_and_a_pending_call_stay_intact(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    contents: list[dict[str, Any]] = [
        {"role": "user", "parts": [{"text": "task: inspect the logs"}]}
    ]
    for i in range(10):
        call = {
            "functionCall": {"name": "read", "args": {"n": i}},
            "thoughtSignature": base64.b64encode(f"sig{i}".encode()).decode(),
        }
        contents.append({"role": "model", "parts": [call]})
        contents.append(
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "name": "read",
                            "response": {"output": "log line\n" * 200},
                        }
                    }
                ],
            }
        )
    contents.append(
        {
            "role": "model",
            "parts": [
                {
                    "functionCall": {"name": "read", "args": {"n": 99}},
                    "thoughtSignature": "bGFzdA==",
                }
            ],
        }
    )
    contents.append(
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "read", "response": {"output": "last"}}}],
        }
    )
    sdk = client(gateway, {"x-ctxopt-window-tokens": "2500"})
    sdk.models.generate_content(model=MODEL, contents=contents)  # type: ignore[arg-type]
    sent = upstream.calls(":generateContent")[-1].body["contents"]
    assert sent[-2:] == contents[-2:]
    signed = [p for c in sent for p in c["parts"] if "functionCall" in p]
    assert all(p["thoughtSignature"] for p in signed)
    assert sent != contents


def test_gemini_clis_compression_threshold_in_its_header_is_its_line(
    gateway: ServerProcess, upstream: FakeUpstream, trajectory: Trajectory
) -> None:
    """`ctxopt run gemini` sends the threshold it set (GEMINI_CLI_CUSTOM_HEADERS):
    the gateway keeps the prompt under that share of tokenLimit, not under half."""
    body = request("gemini", trajectory, len(trajectory.steps))
    size = tokens_of([body["systemInstruction"], body["tools"], body["contents"]])
    # a threshold whose line is 3/4 of this prompt; the window alone leaves it as sent
    threshold = f"{0.75 * size / GEMINI_CLI_DEFAULT_LIMIT:.9f}"
    url = f"{gateway.gateway_url}/gemini/v1beta/models/{MODEL}:generateContent"
    outcomes, sent = [], []
    for header in ({}, {COMPRESSION_HEADER: threshold}):
        headers = {
            "x-goog-api-key": "gemini-test-key",
            "user-agent": f"GeminiCLI/0.61.0/{MODEL} (linux; x64)",
            "x-ctxopt-window-tokens": str(2 * size),
            "x-ctxopt-session": f"threshold-{bool(header)}",
            **header,
        }
        answer = httpx.post(url, json=body, headers=headers, timeout=60)
        answer.raise_for_status()
        outcomes.append(answer.headers["x-ctxopt-outcome"])
        recorded = upstream.calls(":generateContent")[-1].body
        sent.append(
            tokens_of([recorded["systemInstruction"], recorded["tools"], recorded["contents"]])
        )
        assert COMPRESSION_HEADER not in upstream.calls(":generateContent")[-1].headers
    assert outcomes == ["below-threshold", "optimized"]
    assert sent[0] == size and sent[1] <= 0.75 * size
