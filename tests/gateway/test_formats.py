"""The wire-format modules, hosts and windows on their own: mapping, rendering, rules."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ctxopt.api.gateway import hosts, sessions, windows
from ctxopt.api.gateway.formats.anthropic import AnthropicMessages
from ctxopt.api.gateway.formats.conversation import Edit, Rewrite, droppable_units, latest_turns
from ctxopt.api.gateway.formats.gemini import GeminiContents
from ctxopt.api.gateway.formats.openai_chat import OpenAIChat
from ctxopt.api.gateway.formats.openai_responses import OpenAIResponses
from ctxopt.model import ChunkKind

ANTHROPIC = AnthropicMessages()


def anthropic_body() -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-6",
        "messages": [
            {"role": "user", "content": "task"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "thinking",
                        "thinking": "hm",
                        "signature": "s",
                        "cache_control": {"type": "ephemeral"},
                    },
                    {"type": "text", "text": "reading", "cache_control": {"type": "ephemeral"}},
                    {"type": "tool_use", "id": "t1", "name": "Read", "input": {"p": "a"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": "data",
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            },
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "thanks"},
        ],
    }


def test_anthropic_blocks_map_to_chunks_with_their_pairing() -> None:
    conversation = ANTHROPIC.parse(anthropic_body(), "v1/messages", None)
    assert conversation is not None
    kinds = [(b.kind, b.rewrite) for b in conversation.turns[1].blocks]
    assert kinds == [
        (ChunkKind.ENRICHMENT, Rewrite.DROP),
        (ChunkKind.MESSAGE, Rewrite.TEXT),
        (ChunkKind.TOOL_CALL, Rewrite.CALL),
    ]
    assert (
        conversation.turns[2].blocks[0].answers == conversation.turns[1].blocks[2].call_id == "t1"
    )


def test_a_dropped_thinking_blocks_marker_moves_within_its_message() -> None:
    body = anthropic_body()
    body["messages"][1]["content"][1].pop("cache_control")
    body["messages"][1]["content"].insert(
        2,
        {
            "type": "thinking",
            "thinking": "again",
            "signature": "t",
            "cache_control": {"type": "ephemeral"},
        },
    )
    original = copy.deepcopy(body)
    conversation = ANTHROPIC.parse(body, "v1/messages", None)
    assert conversation is not None
    rendered = ANTHROPIC.render(body, conversation, {(1, 2): Edit(None)}, frozenset())
    assert body == original
    assert [b["type"] for b in rendered["messages"][1]["content"]] == [
        "thinking",
        "text",
        "tool_use",
    ]
    assert rendered["messages"][1]["content"][1]["cache_control"] == {"type": "ephemeral"}


def test_a_removed_blocks_cache_marker_moves_to_the_nearest_kept_block_before_it() -> None:
    body = anthropic_body()
    original = copy.deepcopy(body)
    conversation = ANTHROPIC.parse(body, "v1/messages", None)
    assert conversation is not None
    rendered = ANTHROPIC.render(body, conversation, {(1, 0): Edit(None)}, frozenset({2, 3}))
    assert body == original, "the input is never mutated"
    assert [m["role"] for m in rendered["messages"]] == ["user", "assistant", "user"]
    assistant = rendered["messages"][1]["content"]
    assert [b["type"] for b in assistant] == ["text", "tool_use"]
    assert assistant[1]["cache_control"] == {"type": "ephemeral"}, "moved from the dropped result"


def test_anthropic_rules_find_orphans_order_and_too_many_markers() -> None:
    body = anthropic_body()
    body["messages"][2]["content"][0]["tool_use_id"] = "other"
    body["system"] = [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}] * 2
    found = ANTHROPIC.violations(body)
    assert any("unanswered" in v for v in found)
    assert any("answers no call" in v for v in found)
    assert any("breakpoints" in v for v in found)
    assert ANTHROPIC.violations({"messages": [{"role": "assistant", "content": "x"}]})


def test_the_latest_turn_of_a_tool_loop_includes_the_calling_turn() -> None:
    conversation = ANTHROPIC.parse(
        anthropic_body() | {"messages": anthropic_body()["messages"][:3]}, "", None
    )
    assert conversation is not None
    assert latest_turns(conversation.turns) == [1, 2]
    assert droppable_units(conversation.turns, {1, 2}) == []


def test_a_removed_steps_call_keeps_its_id_and_name_with_empty_arguments() -> None:
    calls = [
        {"id": f"c{k}", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
        for k in range(2)
    ]
    body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "thinking aloud", "tool_calls": calls},
            {"role": "tool", "tool_call_id": "c0", "content": "r0"},
            {"role": "tool", "tool_call_id": "c1", "content": "r1"},
        ],
    }
    chat = OpenAIChat()
    conversation = chat.parse(body, "v1/chat/completions", None)
    assert conversation is not None
    refs = [b.ref for b in conversation.turns[1].blocks]
    edits = {refs[0]: Edit(None), refs[2]: Edit("")}
    rendered = chat.render(body, conversation, edits, frozenset())
    message = rendered["messages"][1]
    assert message["content"] is None
    assert [c["function"]["arguments"] for c in message["tool_calls"]] == ['{"x": 1}', "{}"]
    assert [c["id"] for c in message["tool_calls"]] == ["c0", "c1"]
    assert chat.violations(rendered) == []


def test_chat_rules_need_every_call_answered_right_after() -> None:
    messages = [
        {"role": "user", "content": "x"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "user", "content": "y"},
    ]
    assert OpenAIChat().violations({"messages": messages})
    messages.insert(2, {"role": "tool", "tool_call_id": "c1", "content": "r"})
    assert OpenAIChat().violations({"messages": messages}) == []


def test_responses_pairs_by_call_id_and_keeps_reasoning_with_its_item() -> None:
    items = [
        {"role": "developer", "content": "rules"},
        {"role": "user", "content": "go"},
        {"type": "reasoning", "id": "r1", "summary": [], "encrypted_content": "xxxx"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "out"},
    ]
    responses = OpenAIResponses()
    conversation = responses.parse({"model": "gpt-5", "input": items}, "v1/responses", None)
    assert conversation is not None
    assert [t.role.name for t in conversation.turns] == ["SYSTEM", "USER", "MODEL", "TOOL"]
    assert conversation.turns[0].locked and conversation.turns[2].items == (2, 3)
    assert responses.violations({"input": items}) == []
    assert responses.violations({"input": items[:2] + items[3:]}) == []
    assert responses.violations({"input": items[:3] + items[4:]})
    assert responses.parse({"input": items, "previous_response_id": "r"}, "", None) is None


def test_gemini_pairs_by_name_in_order_without_ids() -> None:
    contents: list[dict[str, Any]] = [
        {"role": "user", "parts": [{"text": "go"}]},
        {
            "role": "model",
            "parts": [
                {"functionCall": {"name": "f", "args": {}}},
                {"functionCall": {"name": "f", "args": {}}},
            ],
        },
        {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]},
    ]
    gemini = GeminiContents()
    assert gemini.violations({"contents": contents})
    contents[2]["parts"].append({"functionResponse": {"name": "f", "response": {}}})
    assert gemini.violations({"contents": contents}) == []
    conversation = gemini.parse(
        {"contents": contents}, "v1beta/models/gemini-2.5-pro:generateContent", None
    )
    assert conversation is not None and conversation.model == "gemini-2.5-pro"


@pytest.mark.parametrize(
    ("agent", "model", "window", "expected"),
    [
        ("claude-cli/2.1.328 (external, cli)", "claude-sonnet-4-6", 200_000, 167_000),
        ("codex_exec/0.169.0 (Linux)", "gpt-5.5", 400_000, 244_800),
        ("codex_cli_rs/0.169.0", "gpt-5.5", 200_000, 200_000),
        ("GeminiCLI/0.61.0/gemini-2.5-pro (linux; x64)", "gemini-2.5-pro", 1_048_576, 524_288),
        ("python-httpx/0.28", "gpt-4o", 128_000, 128_000),
    ],
)
def test_the_ceiling_is_the_lower_of_the_window_and_the_hosts_compaction_line(
    agent: str, model: str, window: int, expected: int
) -> None:
    assert hosts.ceiling(window, agent, model, host_lines=True).tokens == expected
    assert hosts.ceiling(window, agent, model, host_lines=False).tokens == window


def test_gemini_clis_line_follows_its_compression_threshold_when_known() -> None:
    agent, model = "GeminiCLI/0.61.0/gemini-2.5-pro (linux; x64)", "gemini-2.5-pro"
    raised = hosts.ceiling(1_048_576, agent, model, host_lines=True, threshold=0.9)
    assert raised.tokens == int(1_048_576 * 0.9)
    assert hosts.ceiling(1_048_576, agent, model, host_lines=True).tokens == 524_288
    # another host's line is its own rule's, whatever the header says
    claude = hosts.ceiling(200_000, "claude-cli/2.1.332", "claude-sonnet-4-6", host_lines=True)
    assert claude == hosts.ceiling(
        200_000, "claude-cli/2.1.332", "claude-sonnet-4-6", host_lines=True, threshold=0.1
    )


# Claude Code 2.1.332 compacts at window - 20,000 - 13,000: 966,759 measured on its default
# claude-opus-5-5 and on claude-sonnet-5-5 (hosts.py), 167,000 on claude-sonnet-4-6
CLAUDE_MODELS = [
    ("claude-opus-5-5", 1_000_000),
    ("claude-opus-5", 1_000_000),
    ("claude-opus-4-7", 1_000_000),
    ("claude-opus-4-8", 1_000_000),
    ("claude-sonnet-5", 1_000_000),
    ("claude-sonnet-5-5", 1_000_000),
    ("claude-sonnet-5-20260301", 1_000_000),
    ("claude-haiku-5-5", 1_000_000),
    ("claude-fable-5-2", 1_000_000),
    ("claude-sonnet-4-6[1m]", 1_000_000),
    ("claude-opus-4-6", 200_000),
    ("claude-opus-4-5-20251101", 200_000),
    ("claude-sonnet-4-6", 200_000),
    ("claude-haiku-4-5", 200_000),
    ("claude-haiku-5", 200_000),
    ("claude-3-5-sonnet-20241022", 200_000),
]


@pytest.mark.parametrize(("model", "window"), CLAUDE_MODELS)
def test_claude_windows_by_family_and_version_and_claude_codes_line_from_them(
    model: str, window: int
) -> None:
    assert windows.model_window(model) == window
    assert windows.model_window(f"anthropic/{model}") == window
    line = window - 20_000 - 13_000
    assert hosts.compaction_line(hosts.Host.CLAUDE_CODE, model) == line
    agent = "claude-cli/2.1.332 (external, sdk-cli)"
    assert hosts.ceiling(window, agent, model, host_lines=True).tokens == line


def test_windows_by_family_and_unknown_models() -> None:
    assert windows.model_window("gpt-4o-mini") == 128_000
    assert windows.model_window("models/gemini-1.5-pro-002") == 2_097_152
    assert windows.model_window("llama-3") is None
    with pytest.raises(ValueError):
        windows.parse_window("-5")


def test_session_ids_are_namespaced_by_the_provider_key_and_owner_never_the_key() -> None:
    key_a, key_b = {"x-api-key": "sk-a-secret"}, {"authorization": "Bearer sk-b-secret"}
    ids = {
        sessions.session_of("anthropic", sessions.namespace_of(headers, owner), name, "opening")
        for headers in (key_a, key_b, {})
        for owner in ("", "team")
        for name in ("", "my-session")
    }
    assert len(ids) == 12, "no two keys, owners or names share a session"
    assert not any("secret" in i for i in ids)
    namespace = sessions.namespace_of(key_a, "")
    assert sessions.session_of("anthropic", namespace, " my-session ", None) == (
        f"{namespace}.my-session"
    )
    assert len(namespace) == 12 and namespace == sessions.namespace_of(dict(key_a), "")


def test_anthropic_system_messages_are_locked_turns_the_rules_look_past() -> None:
    """Claude Code's `"role": "system"` messages inside `messages`: locked turns in
    place; roles and pairs are checked on the user and assistant messages around them."""
    system = {"role": "system", "content": "# Environment"}
    step = anthropic_body()["messages"][1:3]  # a call and its result
    for message in step:
        for block in message["content"]:
            block.pop("cache_control", None)
    messages = [
        {"role": "user", "content": "task"},
        system,
        *step,
        system,
        *step,
        {"role": "system", "content": [{"type": "text", "text": "reminder"}]},
    ]
    body = {"model": "claude-opus-5-5", "messages": messages}
    assert ANTHROPIC.violations(body) == []
    conversation = ANTHROPIC.parse(body, "", None)
    assert conversation is not None
    locked = [t.locked for t in conversation.turns]
    assert locked == [False, True, False, False, True, False, False, True]
    assert latest_turns(conversation.turns) == [5, 6, 7], "the newest step and what follows"
    assert droppable_units(conversation.turns, {5, 6, 7}) == [[2, 3]], "the system turn stays"
    after_drop = {**body, "messages": [m for i, m in enumerate(messages) if i not in (2, 3)]}
    assert ANTHROPIC.violations(after_drop) == []
    broken = {**body, "messages": [messages[0], system, messages[2], system, messages[2]]}
    assert ANTHROPIC.violations(broken) == [
        "messages[4]: same role as the message before",
        "messages[2]: tool_use ['t1'] unanswered",
    ]
    assert ANTHROPIC.violations({"messages": [system, messages[2]]}) == [
        "messages[1]: not a user message"
    ]
