"""aider's own messages inside a conversation: its few-shot preamble and its working set.

aider (aider-chat 0.86.2, `aider/coders/base_coder.py` `format_chat_chunks`,
`aider/coders/chat_chunks.py`) sends, in this order: the system prompt, its
canned example exchanges (`example_messages`) closed by "I switched to a new
code base..." and "Ok.", the read-only files, the repository map, the finished
exchanges, the files the user added to the chat ("I have *added these files to
the chat* so you can go ahead and edit them", each file's full text), then the
current exchange. Each of its own user messages is followed by a canned
assistant reply ("Ok, any changes I propose will be to those files.").

Here the examples become frame (locked: never changed, not the task), the
files messages and their replies the working set (rebuilt by aider in place on
every call: never dropped whole), and the chat files message is split per file:
the file being edited stays whole (pinned), the others shrink by the engine's
value rules like everything else. The prompts' texts are quoted from
`aider/coders/base_prompts.py` and `base_coder.py` of 0.86.2.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ctxopt.api.gateway.formats.conversation import (
    Block,
    Conversation,
    HostMarks,
    Rewrite,
    Turn,
)
from ctxopt.model import ChunkKind, Role

EXAMPLES_END = (
    "I switched to a new code base. Please don't consider the above files"
    " or try to edit them any longer."
)
CHAT_FILES_PREFIX = "I have *added these files to the chat* so you can go ahead and edit them."
READ_ONLY_PREFIX = "Here are some READ ONLY files, provided for your reference."
# What aider sends in place of the chat files when there are none, and its repository map
WORKING_SET_PREFIXES = (
    CHAT_FILES_PREFIX,
    READ_ONLY_PREFIX,
    "Here are summaries of some files present in my git repository.",
    "I am not sharing any files that you can edit yet.",
    "Don't try and edit any existing code without asking me to add the files to the chat!",
)
# `Coder.fences` (base_coder.py): aider picks one that no file's text contains
FENCES = {
    "```": "```",
    "````": "````",
    "<source>": "</source>",
    "<code>": "</code>",
    "<pre>": "</pre>",
    "<codeblock>": "</codeblock>",
    "<sourcecode>": "</sourcecode>",
}
# `get_files_content`: "\n" + path + "\n" + fence + "\n" + text + closing fence + "\n", per file
_FILE_HEAD = re.compile(r"\n([^\n]+)\n(" + "|".join(re.escape(f) for f in FENCES) + r")\n")


@dataclass(frozen=True, slots=True)
class Segment:
    text: str
    file_path: str  # "" for aider's own words around the files


def is_working_set(text: str) -> bool:
    return text.startswith(WORKING_SET_PREFIXES)


def file_segments(text: str) -> list[Segment] | None:
    """A files message cut into aider's words (path lines and fences) and each file's
    text, concatenating to `text`; None when it does not read as one."""
    if not text.startswith((CHAT_FILES_PREFIX, READ_ONLY_PREFIX)):
        return None
    segments: list[Segment] = []
    start = 0
    head = _FILE_HEAD.search(text)
    while head is not None:
        path, fence = head.group(1), head.group(2)
        close = FENCES[fence] + "\n"
        end = text.find(close, head.end())
        if end < 0:
            return None
        segments.append(Segment(text[start : head.end()], ""))
        if end > head.end():
            segments.append(Segment(text[head.end() : end], path))
        else:  # an empty file: nothing of its own to keep or shrink
            segments[-1] = Segment(segments[-1].text + text[head.end() : end], "")
        start = end
        head = _FILE_HEAD.search(text, end + len(close) - 1)
    if not any(s.file_path for s in segments):
        return None
    segments.append(Segment(text[start:], ""))
    return _merged(segments)


def _merged(segments: list[Segment]) -> list[Segment]:
    merged: list[Segment] = []
    for segment in segments:
        if merged and not segment.file_path and not merged[-1].file_path:
            merged[-1] = Segment(merged[-1].text + segment.text, "")
        elif segment.text:
            merged.append(segment)
    return merged


def segment_blocks(segments: list[Segment], index: int, first_ref: int) -> list[Block]:
    """One block per segment, the k-th with ref (index, first_ref - k): aider's own
    words pinned as they are, each file's text shrinkable."""
    return [
        Block(
            ChunkKind.CODE if s.file_path else ChunkKind.MESSAGE,
            s.text,
            Rewrite.TEXT if s.file_path else Rewrite.NEVER,
            ref=(index, first_ref - k),
            pinned=not s.file_path,
            file_path=s.file_path,
        )
        for k, s in enumerate(segments)
    ]


def annotate(conversation: Conversation) -> Conversation:
    """aider's preamble as frame, its files messages as working set, the files being
    edited pinned; a conversation of another host is returned as it is."""
    turns = conversation.turns
    marks = host_marks(conversation)
    conversation.marks = marks
    end = marks.examples_end
    working = [i for i in marks.working if i > end]
    if end < 0 and not working:
        return conversation
    heads = [t.blocks[0].text if t.blocks else "" for t in turns]
    replies = {i + 1 for i in working if i + 1 < len(turns) and turns[i + 1].role == Role.MODEL}
    edited = _edited_files(turns, heads, working)
    result: list[Turn] = []
    for i, turn in enumerate(turns):
        if end >= 0 and i <= end + 1 and not turn.locked:
            # the canned examples and their closing "Ok.": frame, never the task
            turn = dataclasses.replace(turn, locked=True, key="")
        elif i in working:
            chat = heads[i].startswith(CHAT_FILES_PREFIX)
            blocks = [
                dataclasses.replace(b, pinned=not b.file_path or (chat and b.file_path in edited))
                for b in turn.blocks
            ]
            turn = dataclasses.replace(turn, blocks=blocks, working_set=True, key="")
        elif i in replies:  # aider's canned answer to its own message
            blocks = [dataclasses.replace(b, pinned=True) for b in turn.blocks]
            turn = dataclasses.replace(turn, blocks=blocks, working_set=True, key="")
        result.append(turn)
    # the pins follow the current exchange, so the working set is mapped again on every call
    first = min(working, default=len(turns))
    return dataclasses.replace(conversation, turns=result, reused=min(conversation.reused, first))


def host_marks(conversation: Conversation) -> HostMarks:
    """The marks of every turn: the last call's for the turns it shares with this
    one (the same turns, so the same heads), the rest read."""
    known = conversation.marks
    upto = min(known.upto, conversation.reused)
    end = known.examples_end if known.examples_end < upto else -1
    working = [i for i in known.working if i < upto]
    for i in range(upto, len(conversation.turns)):
        blocks = conversation.turns[i].blocks
        head = blocks[0].text if blocks else ""
        if end < 0 and head == EXAMPLES_END:
            end = i
        if is_working_set(head):
            working.append(i)
    return HostMarks(len(conversation.turns), end, tuple(working))


def _edited_files(turns: list[Turn], heads: list[str], working: list[int]) -> set[str]:
    """The chat files the current exchange names (the user's request, the model's
    edits); all of them when it names none: the user added them to be edited."""
    chat = [i for i in working if heads[i].startswith(CHAT_FILES_PREFIX)]
    if not chat:
        return set()
    paths = {b.file_path for b in turns[chat[-1]].blocks if b.file_path}
    after = "\n".join(b.text for t in turns[chat[-1] + 1 :] for b in t.blocks)
    return {p for p in paths if p in after} or paths
