"""aider's requests: its canned examples are frame, the user's request is the task, the
files it edits are a working set cut per file, with the edited file kept whole.

The bodies follow aider-chat 0.86.2's layout (`format_chat_chunks`, diff edit
format) with its own prompt texts; tests/agents runs the real aider.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import orjson
from ctxopt.api.gateway.formats import aider
from ctxopt.api.gateway.formats.anthropic import AnthropicMessages
from ctxopt.api.gateway.formats.conversation import Edit, first_prompt
from ctxopt.api.gateway.formats.openai_chat import OpenAIChat
from ctxopt.api.gateway.pipeline import Pipeline
from ctxopt.api.gateway.prepared import Outcome
from ctxopt.config import Config
from ctxopt.engine import Engine

CHAT = OpenAIChat()
SYSTEM = "Act as an expert software developer.\nAlways use best practices when coding."
EXAMPLES = [
    ("user", "Change get_factorial() to use math.factorial"),
    ("assistant", "To make this change we need to modify `mathweb/flask/app.py`..."),
    ("user", "Refactor hello() into its own file."),
    ("assistant", "To make this change we need to modify `main.py`..."),
    ("user", aider.EXAMPLES_END),
    ("assistant", "Ok."),
]
FILES_PREFIX = (
    aider.CHAT_FILES_PREFIX + "\n\n*Trust this message as the true contents of these files!*\n"
    "Any other messages in the chat may contain outdated versions of the files' contents.\n"
)
REMINDER = "\n\n# *SEARCH/REPLACE block* Rules:\n\nEvery *SEARCH/REPLACE block* must use:"
WORDS = ("parser", "token", "window", "budget", "cache", "stream", "socket", "buffer")


def source(name: str, lines: int) -> str:
    rng = random.Random(name)
    return "".join(
        f"def {name.split('.')[0]}_{i}():  # {' '.join(rng.choice(WORDS) for _ in range(8))}\n"
        for i in range(lines)
    )


def files_message(files: dict[str, str]) -> str:
    """`get_chat_files_messages`: the prefix, then per file its path and fenced text."""
    return FILES_PREFIX + "".join(f"\n{path}\n```\n{text}```\n" for path, text in files.items())


def aider_body(task: str, files: dict[str, str], exchange: list[tuple[str, str]]) -> dict[str, Any]:
    """One aider request: `task` opens the current exchange (with aider's reminder while
    it is the newest message), `exchange` continues it."""
    cur = [("user", task), *exchange]
    role, text = cur[-1]
    cur[-1] = (role, text + REMINDER)
    messages = [
        {"role": "system", "content": SYSTEM},
        *({"role": r, "content": c} for r, c in EXAMPLES),
        {"role": "user", "content": files_message(files)},
        {"role": "assistant", "content": "Ok, any changes I propose will be to those files."},
        *({"role": r, "content": c} for r, c in cur),
    ]
    return {"model": "gpt-5.2", "stream": True, "messages": messages}


FILES = {"app.py": source("app.py", 60), "lib.py": source("lib.py", 300)}
FILES["util.py"] = source("util.py", 300)
TASK = "Make app_3 in app.py return 2"


def test_the_examples_are_frame_and_the_users_request_is_the_task() -> None:
    conversation = CHAT.parse(aider_body(TASK, FILES, []), "v1/chat/completions", None)
    assert conversation is not None
    turns = conversation.turns
    examples = range(1, 1 + len(EXAMPLES))
    assert all(turns[i].locked for i in examples)
    task = first_prompt(turns)
    assert task == len(turns) - 1
    assert turns[task].blocks[0].text.startswith(TASK)


def test_the_files_message_is_cut_per_file_and_renders_back_byte_for_byte() -> None:
    body = aider_body(TASK, FILES, [])
    conversation = CHAT.parse(body, "v1/chat/completions", None)
    assert conversation is not None
    files = next(t for t in conversation.turns if t.working_set and t.role.name == "USER")
    paths = [b.file_path for b in files.blocks if b.file_path]
    assert paths == list(FILES)
    assert "".join(b.text for b in files.blocks) == body["messages"][7]["content"]
    assert CHAT.render(body, conversation, {}, frozenset()) == body
    lib = next(b for b in files.blocks if b.file_path == "lib.py")
    rendered = CHAT.render(body, conversation, {lib.ref: Edit("[shrunk]")}, frozenset())
    expected = files_message({**FILES, "lib.py": "[shrunk]\n"})
    assert rendered["messages"][7]["content"] == expected
    assert body == aider_body(TASK, FILES, [])  # the input is untouched


def test_the_file_the_exchange_names_is_pinned_and_the_others_are_not() -> None:
    conversation = CHAT.parse(aider_body(TASK, FILES, []), "v1/chat/completions", None)
    assert conversation is not None
    blocks = [b for t in conversation.turns if t.working_set for b in t.blocks]
    pinned = {b.file_path for b in blocks if b.file_path and b.pinned}
    assert pinned == {"app.py"}
    assert all(b.pinned for b in blocks if not b.file_path)  # aider's own words stay


def test_every_chat_file_is_pinned_when_the_exchange_names_none() -> None:
    body = aider_body("Make the functions return 2", FILES, [])
    conversation = CHAT.parse(body, "v1/chat/completions", None)
    assert conversation is not None
    blocks = [b for t in conversation.turns if t.working_set for b in t.blocks]
    assert {b.file_path for b in blocks if b.file_path and b.pinned} == set(FILES)


def test_a_files_message_aider_did_not_lay_out_stays_whole() -> None:
    body = aider_body(TASK, FILES, [])
    body["messages"][7]["content"] = aider.CHAT_FILES_PREFIX + " but no fenced files"
    conversation = CHAT.parse(body, "v1/chat/completions", None)
    assert conversation is not None
    (turn,) = [t for t in conversation.turns if t.working_set and t.role.name == "USER"]
    assert [b.pinned for b in turn.blocks] == [True]


def test_under_pressure_the_edited_file_and_the_request_reach_the_model_whole() -> None:
    """Without the working set the whole files message was one chunk, stashed whole."""
    pipeline = Pipeline(Engine(Config(data_dir=":memory:")), Config(data_dir=":memory:"))
    body = aider_body(TASK, FILES, [])
    raw = orjson.dumps(body)
    headers = {"x-ctxopt-window-tokens": "9000", "authorization": "Bearer sk-test"}
    prepared = pipeline.prepare(CHAT, "v1/chat/completions", raw, headers, "")
    assert prepared.outcome == Outcome.OPTIMIZED, prepared.note
    sent = orjson.loads(prepared.body)
    files = sent["messages"][7]["content"]
    assert files.startswith(FILES_PREFIX)
    assert f"\napp.py\n```\n{FILES['app.py']}```\n" in files
    assert FILES["lib.py"] not in files or FILES["util.py"] not in files
    assert sent["messages"][-1] == body["messages"][-1]
    assert sent["messages"][: len(EXAMPLES) + 1] == body["messages"][: len(EXAMPLES) + 1]
    assert prepared.tokens_after < prepared.tokens_before


def test_a_reflection_keeps_the_request_and_moves_the_pin_to_the_file_edited() -> None:
    """aider's next call in one exchange: its reply edited util.py and the edit failed."""
    exchange = [
        ("assistant", "util.py\n```python\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n```"),
        ("user", "# 1 SEARCH/REPLACE block failed to match!"),
    ]
    body = aider_body(TASK, FILES, exchange)
    conversation = CHAT.parse(body, "v1/chat/completions", None)
    assert conversation is not None
    blocks = [b for t in conversation.turns if t.working_set for b in t.blocks]
    assert {b.file_path for b in blocks if b.file_path and b.pinned} == {"app.py", "util.py"}
    task = first_prompt(conversation.turns)
    assert task is not None
    assert conversation.turns[task].blocks[0].text == TASK
    assert copy.deepcopy(body) == body


def test_through_anthropic_the_files_message_stays_whole_and_the_request_is_the_task() -> None:
    """aider on a Claude model (LiteLLM's Messages API): the same layout, not cut per file."""
    chat = aider_body(TASK, FILES, [])
    body = {
        "model": "claude-sonnet-4-6",
        "system": chat["messages"][0]["content"],
        "messages": chat["messages"][1:],
    }
    conversation = AnthropicMessages().parse(body, "v1/messages", None)
    assert conversation is not None
    turns = conversation.turns
    assert all(turns[i].locked for i in range(len(EXAMPLES)))
    (files,) = [t for t in turns if t.working_set and t.role.name == "USER"]
    assert all(b.pinned for b in files.blocks)
    task = first_prompt(turns)
    assert task == len(turns) - 1
