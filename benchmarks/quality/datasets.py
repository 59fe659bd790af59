"""The development data as ctxopt chunks: one mapping that every method shares.

LoCoMo: one chunk per dialogue turn, `[<session date>] <speaker>: <text>`, the
two speakers alternating as USER and MODEL; one case per category 1-4 question.

SWE-agent: the history is every message before the final assistant message
(the submission); for needed-later recall, also the history before each step
at 25, 50, 75 and 100% of the trajectory; system -> SYSTEM, the task -> USER message of task "task",
assistant -> MODEL (a TOOL_CALL when a tool output answers it), tool outputs
(user messages with `<returncode>`) -> USER TOOL_RESULT whose parent is the
call. The query is the task plus the last two messages, clipped to the
service's limit as a client clips it (`client_query`), and the system prompt,
the task and the last two messages are kept by every method.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ctxopt.config import Config
from ctxopt.model import Chunk, ChunkKind, Role, Roots

from benchmarks.quality.metrics import grounded, hunk_lines, needed_lines

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO.parent / "shared" / "datasets"
RESULTS = REPO / "benchmarks" / "results"
BUDGETS = (0.5, 0.3, 0.2)  # shares of each prompt's cl100k tokens
LOCOMO_FILE = "locomo-dev.json"
SWE_FILE = "swe-agent-gemini3-dev.jsonl.gz"
EVALUATED_CATEGORIES = frozenset({1, 2, 3, 4})  # 5 (adversarial) has no answer to recall
EVIDENCE_ID = re.compile(r"D\d+:\d+")
SESSION_KEY = re.compile(r"session_(\d+)")
LOCOMO_DATE = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"
TASK_ID = "task"
RECENT_MESSAGES = 2  # SWE: the last two messages are roots and mandatory
STEP_POINTS = (0.25, 0.5, 0.75, 1.0)  # needed-later recall: where in the trajectory
LOCOMO_ROOTS = Roots(recent_turns=RECENT_MESSAGES)
SWE_ROOTS = Roots(current_task_id=TASK_ID, recent_turns=RECENT_MESSAGES)
MAX_QUERY_CHARS = Config().max_query_chars  # the service refuses a longer query
QUERY_SEPARATOR = "\n"

CountTokens = Callable[[Sequence[str]], list[int]]


@dataclass(frozen=True, slots=True)
class Case:
    """One prompt to prune: the history in prompt order (token counts filled
    in), the query, the roots a client would send, and the ids every method
    must keep. `key` names the history, so query-independent choices are
    computed once per history."""

    key: str
    chunks: tuple[Chunk, ...]
    query: str
    roots: Roots
    mandatory: frozenset[str]

    @property
    def prompt_tokens(self) -> int:
        return sum(c.tokens for c in self.chunks)


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    category: int
    evidence: frozenset[str]


@dataclass(frozen=True, slots=True)
class Conversation:
    sample_id: str
    chunks: tuple[Chunk, ...]
    questions: tuple[Question, ...]

    def case(self, question: Question) -> Case:
        return Case(self.sample_id, self.chunks, question.text, LOCOMO_ROOTS, frozenset())


@dataclass(frozen=True, slots=True)
class Step:
    """A point of a trajectory for needed-later recall (`point`: its share of
    the trajectory, one of STEP_POINTS): the history so far as a case, and the
    earlier tool-output lines a later step or the patch needs."""

    case: Case
    needed: tuple[str, ...]
    point: float = 1.0


@dataclass(frozen=True, slots=True)
class Trajectory:
    """An evaluable trajectory: `hunks` holds, per hunk of the submitted patch,
    the original lines that count as evidence of it (metrics.hunk_lines);
    `steps` the needed-later points that need at least one line."""

    instance_id: str
    case: Case
    hunks: tuple[tuple[str, ...], ...]
    steps: tuple[Step, ...] = ()


@dataclass(frozen=True, slots=True)
class SweData:
    trajectories: tuple[Trajectory, ...]
    skipped: tuple[str, ...]  # instance ids with a hunk no message grounds


def with_tokens(chunks: Sequence[Chunk], count: CountTokens) -> tuple[Chunk, ...]:
    counts = count([c.text for c in chunks])
    return tuple(replace(c, tokens=n) for c, n in zip(chunks, counts, strict=True))


# ---- LoCoMo ----------------------------------------------------------------


def session_ms(date: str) -> int:
    """Milliseconds since the epoch of a LoCoMo session date, 0 if unparseable."""
    try:
        parsed = datetime.strptime(date.strip(), LOCOMO_DATE).replace(tzinfo=UTC)
    except ValueError:
        return 0
    return int(parsed.timestamp() * 1000)


def turn_text(date: str, turn: dict[str, Any]) -> str:
    text = f"[{date}] {turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    return f"{text} (image: {caption})" if caption else text


def conversation_chunks(conversation: dict[str, Any]) -> list[Chunk]:
    """Every turn of every session, sessions in numeric order."""
    sessions = sorted(
        (int(m.group(1)), key)
        for key in conversation
        if (m := SESSION_KEY.fullmatch(key)) and isinstance(conversation[key], list)
    )
    speaker_a = conversation["speaker_a"]
    chunks: list[Chunk] = []
    for number, key in sessions:
        date = str(conversation.get(f"session_{number}_date_time", ""))
        created = session_ms(date)
        for turn in conversation[key]:
            chunks.append(
                Chunk(
                    id=turn["dia_id"],
                    role=Role.USER if turn["speaker"] == speaker_a else Role.MODEL,
                    kind=ChunkKind.MESSAGE,
                    text=turn_text(date, turn),
                    created_at_ms=created,
                    turn=len(chunks),
                )
            )
    return chunks


def evidence_ids(evidence: Sequence[str], known: set[str] | frozenset[str]) -> frozenset[str]:
    """Turn ids named by the evidence strings (some hold two), unknown ids dropped."""
    return frozenset(i for item in evidence for i in EVIDENCE_ID.findall(item) if i in known)


def questions_of(qa: Sequence[dict[str, Any]], known: frozenset[str]) -> list[Question]:
    """Category 1-4 questions that name at least one existing turn."""
    questions = []
    for item in qa:
        category = int(item["category"])
        evidence = evidence_ids(item.get("evidence", []), known)
        if category in EVALUATED_CATEGORIES and evidence:
            questions.append(Question(str(item["question"]), category, evidence))
    return questions


def load_locomo(
    path: Path, count: CountTokens, conversations: int = 0, questions: int = 0
) -> list[Conversation]:
    """LoCoMo conversations; `conversations`/`questions` > 0 keep only the
    first ones (for smoke runs)."""
    samples = json.loads(path.read_text(encoding="utf-8"))
    if conversations:
        samples = samples[:conversations]
    loaded = []
    for sample in samples:
        chunks = with_tokens(conversation_chunks(sample["conversation"]), count)
        asked = questions_of(sample["qa"], frozenset(c.id for c in chunks))
        if questions:
            asked = asked[:questions]
        loaded.append(Conversation(str(sample["sample_id"]), chunks, tuple(asked)))
    return loaded


# ---- SWE-agent -------------------------------------------------------------


def is_tool_output(message: dict[str, Any]) -> bool:
    return message["role"] == "user" and "<returncode>" in str(message["content"])


def history_of(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages before the final assistant message (the submission)."""
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    return list(messages[:last])


def message_id(index: int) -> str:
    return f"m{index}"


def message_chunk(history: Sequence[dict[str, Any]], index: int) -> Chunk:
    message = history[index]
    text, turn, cid = str(message["content"]), index, message_id(index)
    if index == 0 and message["role"] == "system":
        return Chunk(cid, Role.SYSTEM, ChunkKind.SYSTEM, text, turn=turn)
    if index == 1:
        return Chunk(cid, Role.USER, ChunkKind.MESSAGE, text, turn=turn, task_id=TASK_ID)
    if message["role"] == "assistant":
        answered = index + 1 < len(history) and is_tool_output(history[index + 1])
        kind = ChunkKind.TOOL_CALL if answered else ChunkKind.MESSAGE
        return Chunk(cid, Role.MODEL, kind, text, turn=turn)
    if is_tool_output(message) and history[index - 1]["role"] == "assistant":
        return Chunk(
            cid, Role.USER, ChunkKind.TOOL_RESULT, text, turn=turn, parent_id=message_id(index - 1)
        )
    return Chunk(cid, Role.USER, ChunkKind.MESSAGE, text, turn=turn)


def trajectory_case(
    instance_id: str, history: Sequence[dict[str, Any]], count: CountTokens
) -> Case:
    return case_of(instance_id, with_tokens(history_chunks(history), count))


def history_chunks(history: Sequence[dict[str, Any]]) -> list[Chunk]:
    return [message_chunk(history, i) for i in range(len(history))]


def client_query(task: str, latest: Sequence[str], limit: int = MAX_QUERY_CHARS) -> str:
    """The relevance query as a client sends it: the task and the latest
    messages, one a line, within the service's `limit` of characters. When
    they do not fit, the shorter pieces stay whole and the longer ones share
    what is left equally: the task keeps its head (the request), a latest
    message its tail (where an output ends, with its error), as the TS
    client keeps the tail of a long message.

    >>> client_query("fix", ["ok", "x" * 50 + "Error: boom"], limit=20).split()
    ['fix', 'ok', 'xxError:', 'boom']
    """
    pieces = [task, *latest]
    if sum(map(len, pieces)) + len(QUERY_SEPARATOR) * (len(pieces) - 1) <= limit:
        return QUERY_SEPARATOR.join(pieces)
    room = max(0, limit - len(QUERY_SEPARATOR) * (len(pieces) - 1))
    allowed = [0] * len(pieces)
    by_length = sorted(range(len(pieces)), key=lambda i: len(pieces[i]))
    for left, i in enumerate(by_length):
        allowed[i] = min(len(pieces[i]), room // (len(pieces) - left))
        room -= allowed[i]
    tails = [text[len(text) - n :] for text, n in zip(latest, allowed[1:], strict=True)]
    return QUERY_SEPARATOR.join([task[: allowed[0]], *tails])


def case_of(key: str, chunks: Sequence[Chunk]) -> Case:
    chunks = tuple(chunks)
    latest = chunks[-RECENT_MESSAGES:]
    query = client_query(chunks[1].text, [c.text for c in latest])
    mandatory = frozenset([chunks[0].id, chunks[1].id, *(c.id for c in latest)])
    return Case(key, chunks, query, SWE_ROOTS, mandatory)


def trajectory_steps(
    instance_id: str, messages: Sequence[dict[str, Any]], submission: str, count: CountTokens
) -> tuple[Step, ...]:
    """The needed-later points: at each share of STEP_POINTS, the messages
    before it (100% is the history before the final assistant message) and the
    earlier tool-output lines an assistant message after it or the patch holds."""
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    steps = []
    for point in STEP_POINTS:
        t = max(3, round(point * last))
        outputs = [str(m["content"]) for m in messages[2:t] if is_tool_output(m)]
        later = [str(m["content"]) for m in messages[t:] if m["role"] == "assistant"]
        needed = needed_lines(outputs, [*later, submission])
        if not needed:
            continue
        chunks = with_tokens(history_chunks(messages[:t]), count)
        steps.append(Step(case_of(f"{instance_id}@{point}", chunks), needed, point))
    return tuple(steps)


def read_trajectories(path: Path) -> Iterator[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def load_swe(path: Path, count: CountTokens, limit: int = 0) -> SweData:
    """Evaluable trajectories (every hunk grounded in a message after the task);
    `limit` > 0 stops after that many evaluable ones (for smoke runs)."""
    kept: list[Trajectory] = []
    skipped: list[str] = []
    for record in read_trajectories(path):
        instance_id = str(record["instance_id"])
        history = history_of(record["messages"])
        hunks = tuple(lines for lines in hunk_lines(str(record["submission"])) if lines)
        after_task = [str(m["content"]) for m in history[2:]]
        if not hunks or not grounded(hunks, after_task):
            skipped.append(instance_id)
            continue
        case = trajectory_case(instance_id, history, count)
        steps = trajectory_steps(instance_id, record["messages"], str(record["submission"]), count)
        kept.append(Trajectory(instance_id, case, hunks, steps))
        if limit and len(kept) >= limit:
            break
    return SweData(tuple(kept), tuple(skipped))
