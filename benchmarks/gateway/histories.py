"""The development SWE trajectories as tool loops in each wire format.

A mini-swe-agent trajectory is a system prompt, the task, then assistant
messages (THOUGHT plus one bash command) each answered by the command's
output. As an agent on a model API would send it, each assistant message
becomes the model's text plus a `bash` tool call, and each output that call's
result. `request(fmt, trajectory, steps)` is the body of the call made after
`steps` steps: the system prompt, the task and `steps` exchanges.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.quality.datasets import read_trajectories

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SWE = REPO.parent / "shared" / "datasets" / "swe-agent-gemini3-dev.jsonl.gz"
FORMATS = ("anthropic", "openai-chat", "openai-responses", "gemini")
MODELS = {
    "anthropic": "claude-sonnet-4-6",
    "openai-chat": "gpt-4o",
    "openai-responses": "gpt-5",
    "gemini": "gemini-2.5-pro",
}
BASH_TOOL: dict[str, Any] = {
    "name": "bash",
    "description": "Run one bash command in the repository and return its output.",
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "the command"}},
        "required": ["command"],
    },
}
_COMMAND = re.compile(r"```(?:bash|sh)?\s*\n(.*?)```", re.DOTALL)

JsonObject = dict[str, Any]


@dataclass(frozen=True)
class Step:
    thought: str
    command: str
    output: str


@dataclass(frozen=True)
class Trajectory:
    instance_id: str
    system: str
    task: str
    steps: tuple[Step, ...]


def load(path: Path = DEFAULT_SWE, limit: int = 0) -> list[Trajectory]:
    out: list[Trajectory] = []
    for record in read_trajectories(path):
        out.append(trajectory_of(str(record["instance_id"]), record["messages"]))
        if limit and len(out) >= limit:
            break
    return out


def trajectory_of(instance_id: str, messages: list[JsonObject]) -> Trajectory:
    steps: list[Step] = []
    for i in range(2, len(messages) - 1):
        said, answer = messages[i], messages[i + 1]
        if said["role"] != "assistant" or answer["role"] != "user":
            continue
        text = str(said["content"])
        found = _COMMAND.search(text)
        command = found.group(1).strip() if found else text.strip()[-200:]
        thought = _COMMAND.sub("", text).strip() or "(no thought)"
        steps.append(Step(thought, command or "true", str(answer["content"]) or "(no output)"))
    return Trajectory(
        instance_id, str(messages[0]["content"]), str(messages[1]["content"]), tuple(steps)
    )


def call_id(step: int) -> str:
    return f"call_{step:04d}"


def request(fmt: str, trajectory: Trajectory, steps: int) -> JsonObject:
    """The request body after `steps` steps (model and tools included)."""
    shown = trajectory.steps[:steps]
    model = MODELS[fmt]
    if fmt == "anthropic":
        return {
            "model": model,
            "max_tokens": 1024,
            "system": trajectory.system,
            "tools": [_anthropic_tool()],
            "messages": list(anthropic_messages(trajectory.task, shown)),
        }
    if fmt == "openai-chat":
        return {
            "model": model,
            "tools": [{"type": "function", "function": BASH_TOOL}],
            "messages": [
                {"role": "system", "content": trajectory.system},
                *chat_messages(trajectory.task, shown),
            ],
        }
    if fmt == "openai-responses":
        return {
            "model": model,
            "instructions": trajectory.system,
            "tools": [{"type": "function", **BASH_TOOL}],
            "input": list(responses_items(trajectory.task, shown)),
        }
    return {
        "systemInstruction": {"parts": [{"text": trajectory.system}]},
        "tools": [{"functionDeclarations": [BASH_TOOL]}],
        "contents": list(gemini_contents(trajectory.task, shown)),
    }


def _anthropic_tool() -> JsonObject:
    return {
        "name": BASH_TOOL["name"],
        "description": BASH_TOOL["description"],
        "input_schema": BASH_TOOL["parameters"],
    }


def anthropic_messages(task: str, steps: tuple[Step, ...]) -> Iterator[JsonObject]:
    yield {"role": "user", "content": task}
    for i, step in enumerate(steps):
        yield {
            "role": "assistant",
            "content": [
                {"type": "text", "text": step.thought},
                {
                    "type": "tool_use",
                    "id": call_id(i),
                    "name": "bash",
                    "input": {"command": step.command},
                },
            ],
        }
        yield {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call_id(i), "content": step.output}],
        }


def chat_messages(task: str, steps: tuple[Step, ...]) -> Iterator[JsonObject]:
    yield {"role": "user", "content": task}
    for i, step in enumerate(steps):
        arguments = '{"command": ' + _quote(step.command) + "}"
        yield {
            "role": "assistant",
            "content": step.thought,
            "tool_calls": [
                {
                    "id": call_id(i),
                    "type": "function",
                    "function": {"name": "bash", "arguments": arguments},
                }
            ],
        }
        yield {"role": "tool", "tool_call_id": call_id(i), "content": step.output}


def responses_items(task: str, steps: tuple[Step, ...]) -> Iterator[JsonObject]:
    yield {"role": "user", "content": [{"type": "input_text", "text": task}]}
    for i, step in enumerate(steps):
        yield {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": step.thought}],
        }
        arguments = '{"command": ' + _quote(step.command) + "}"
        yield {
            "type": "function_call",
            "call_id": call_id(i),
            "name": "bash",
            "arguments": arguments,
        }
        yield {"type": "function_call_output", "call_id": call_id(i), "output": step.output}


def gemini_contents(task: str, steps: tuple[Step, ...]) -> Iterator[JsonObject]:
    yield {"role": "user", "parts": [{"text": task}]}
    for i, step in enumerate(steps):
        yield {
            "role": "model",
            "parts": [
                {"text": step.thought},
                {
                    "functionCall": {
                        "id": call_id(i),
                        "name": "bash",
                        "args": {"command": step.command},
                    }
                },
            ],
        }
        yield {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "id": call_id(i),
                        "name": "bash",
                        "response": {"output": step.output},
                    }
                }
            ],
        }


def _quote(text: str) -> str:
    return json.dumps(text)
