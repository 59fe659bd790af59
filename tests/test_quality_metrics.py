"""The quality benchmark's loaders and metrics on tiny inline fixtures."""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctxopt.model import Chunk, ChunkKind, Role, Roots

from benchmarks.quality.datasets import (
    TASK_ID,
    Case,
    conversation_chunks,
    evidence_ids,
    history_of,
    load_locomo,
    load_swe,
    questions_of,
    session_ms,
    trajectory_case,
    trajectory_steps,
)
from benchmarks.quality.evaluate import cause
from benchmarks.quality.methods import (
    CAUSE_MASK,
    CAUSE_NOT_CHOSEN,
    CAUSE_TRIM,
    CAUSE_VALUE,
    OBS_MASK_PLACEHOLDER,
    Kept,
    ObsMask,
)
from benchmarks.quality.metrics import (
    all_evidence_kept,
    evidence_recall,
    grounded,
    hunk_coverage,
    hunk_covered,
    hunk_lines,
    needed_lines,
    needed_recall,
)


def words(texts: Sequence[str]) -> list[int]:
    """A stand-in token counter: one token per word."""
    return [len(t.split()) for t in texts]


PATCH = """\
diff --git a/pkg/module_with_a_long_name.py b/pkg/module_with_a_long_name.py
index 1111111..2222222 100644
--- a/pkg/module_with_a_long_name.py
+++ b/pkg/module_with_a_long_name.py
@@ -10,3 +10,3 @@ def outer():
     def compute_total(values, scale):
-        return sum(values) * scale_factor
+        return sum(values) * scale
     x = 1
@@ -40,2 +40,3 @@ class Thing:
     short
+    added_line_that_is_long_enough = True
     another short
diff --git a/pkg/new_file.py b/pkg/new_file.py
new file mode 100644
--- /dev/null
+++ b/pkg/new_file.py
@@ -0,0 +1,2 @@
+def brand_new_function_here():
+    return "a brand new line of code"
"""


# ---- SWE metric ----------------------------------------------------------------


def test_hunk_lines_keep_context_and_removed_lines_of_twenty_chars_or_more() -> None:
    assert hunk_lines(PATCH)[0] == (
        "def compute_total(values, scale):",
        "return sum(values) * scale_factor",
    )


def test_hunk_lines_never_count_added_lines() -> None:
    assert hunk_lines(PATCH)[1] == ()


def test_hunk_lines_of_a_new_file_are_empty() -> None:
    assert hunk_lines(PATCH)[2] == ()


def test_hunk_lines_ignore_file_headers() -> None:
    lines = [line for hunk in hunk_lines(PATCH) for line in hunk]
    assert not any("module_with_a_long_name" in line for line in lines)


def test_hunk_lines_read_a_header_without_counts_as_one_line() -> None:
    patch = (
        "@@ -3 +3 @@\n"
        "-removed_line_long_enough_to_count\n"
        "+added\n"
        " unrelated_context_after_the_hunk\n"
    )
    assert hunk_lines(patch) == [("removed_line_long_enough_to_count",)]


def test_a_hunk_is_covered_when_one_of_its_lines_is_in_the_text() -> None:
    assert hunk_covered(
        ("first line of the hunk", "second line of the hunk"), "x second line of the hunk y"
    )


def test_a_hunk_is_not_covered_when_none_of_its_lines_is_in_the_text() -> None:
    assert not hunk_covered(("first line of the hunk",), "first line of the")


def test_hunk_coverage_is_the_share_of_hunks_covered() -> None:
    assert hunk_coverage([("alpha line",), ("beta line",)], "alpha line") == 0.5


def test_grounded_needs_every_hunk_in_some_message() -> None:
    hunks = [("alpha line",), ("beta line",)]
    assert grounded(hunks, ["has alpha line", "has beta line"])
    assert not grounded(hunks, ["has alpha line only"])


# ---- LoCoMo metric -------------------------------------------------------------


def test_evidence_recall_is_the_share_of_evidence_kept() -> None:
    assert evidence_recall({"D1:1", "D1:2", "D2:1", "D2:2"}, {"D1:1", "D2:2", "D3:3"}) == 0.5


def test_all_evidence_kept_needs_every_evidence_turn() -> None:
    assert all_evidence_kept({"D1:1", "D1:2"}, {"D1:1", "D1:2", "D1:3"})
    assert not all_evidence_kept({"D1:1", "D1:2"}, {"D1:1"})


def test_evidence_ids_split_joined_ids_and_drop_unknown_ones() -> None:
    known = {"D8:6", "D9:17", "D1:1"}
    assert evidence_ids(["D8:6; D9:17", "D1:1", "D30:4"], known) == {"D8:6", "D9:17", "D1:1"}


# ---- LoCoMo loader -------------------------------------------------------------

CONVERSATION: dict[str, Any] = {
    "speaker_a": "Ann",
    "speaker_b": "Bob",
    "session_10": [{"speaker": "Ann", "dia_id": "D10:1", "text": "Late news."}],
    "session_10_date_time": "not a date",
    "session_2": [
        {"speaker": "Bob", "dia_id": "D2:1", "text": "Look!", "blip_caption": "a photo of a cat"},
        {"speaker": "Ann", "dia_id": "D2:2", "text": "Cute."},
    ],
    "session_2_date_time": "1:56 pm on 8 May, 2023",
}


def test_turns_carry_session_date_speaker_text_and_image_caption() -> None:
    chunks = conversation_chunks(CONVERSATION)
    assert chunks[0].text == "[1:56 pm on 8 May, 2023] Bob: Look! (image: a photo of a cat)"
    assert chunks[1].text == "[1:56 pm on 8 May, 2023] Ann: Cute."


def test_sessions_come_in_numeric_order_with_running_turns() -> None:
    chunks = conversation_chunks(CONVERSATION)
    assert [(c.id, c.turn) for c in chunks] == [("D2:1", 0), ("D2:2", 1), ("D10:1", 2)]


def test_speakers_map_to_user_and_model_messages() -> None:
    chunks = conversation_chunks(CONVERSATION)
    assert [c.role for c in chunks] == [Role.MODEL, Role.USER, Role.USER]
    assert {c.kind for c in chunks} == {ChunkKind.MESSAGE}


def test_session_dates_parse_to_epoch_ms_and_unparseable_ones_to_zero() -> None:
    assert session_ms("1:56 pm on 8 May, 2023") == 1683554160000
    assert session_ms("not a date") == 0


def test_only_category_1_to_4_questions_with_known_evidence_are_asked() -> None:
    qa = [
        {"question": "kept", "evidence": ["D2:1"], "category": 4},
        {"question": "adversarial", "evidence": ["D2:1"], "category": 5},
        {"question": "unknown evidence", "evidence": ["D99:1"], "category": 1},
    ]
    asked = questions_of(qa, frozenset({"D2:1"}))
    assert [(q.text, q.evidence) for q in asked] == [("kept", frozenset({"D2:1"}))]


def test_load_locomo_counts_tokens_and_limits_questions(tmp_path: Path) -> None:
    qa = [{"question": f"q{i}", "evidence": ["D2:2"], "category": 1} for i in range(3)]
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([{"sample_id": "conv-1", "conversation": CONVERSATION, "qa": qa}]))
    [conversation] = load_locomo(path, words, questions=2)
    assert [c.tokens for c in conversation.chunks] == [14, 8, 6]
    assert [q.text for q in conversation.questions] == ["q0", "q1"]
    assert conversation.case(conversation.questions[0]).query == "q0"


# ---- SWE loader ----------------------------------------------------------------

LINE = "return sum(values) * scale_factor"
SUBMISSION = f"@@ -1,1 +1,1 @@\n-{LINE}\n+return 0\n"


def trajectory(instance_id: str, seen: str) -> dict[str, Any]:
    return {
        "instance_id": instance_id,
        "submission": SUBMISSION,
        "messages": [
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "Fix the bug."},
            {"role": "assistant", "content": "THOUGHT: look\n```bash\ncat a.py\n```"},
            {"role": "user", "content": f"<returncode>0</returncode><output>{seen}</output>"},
            {"role": "assistant", "content": "no command here"},
            {"role": "user", "content": "Please always provide exactly one bash block."},
            {"role": "assistant", "content": "submit"},
            {"role": "user", "content": "diff output"},
        ],
    }


def test_history_ends_before_the_final_assistant_message() -> None:
    messages = trajectory("t", LINE)["messages"]
    assert len(history_of(messages)) == 6


def test_messages_map_to_system_task_call_result_and_message_chunks() -> None:
    case = trajectory_case("t", history_of(trajectory("t", LINE)["messages"]), words)
    shapes = [(c.role, c.kind, c.parent_id) for c in case.chunks]
    assert shapes == [
        (Role.SYSTEM, ChunkKind.SYSTEM, ""),
        (Role.USER, ChunkKind.MESSAGE, ""),
        (Role.MODEL, ChunkKind.TOOL_CALL, ""),
        (Role.USER, ChunkKind.TOOL_RESULT, "m2"),
        (Role.MODEL, ChunkKind.MESSAGE, ""),
        (Role.USER, ChunkKind.MESSAGE, ""),
    ]
    assert case.chunks[1].task_id == TASK_ID
    assert [c.turn for c in case.chunks] == list(range(6))


def test_swe_query_is_the_task_and_the_last_two_messages() -> None:
    case = trajectory_case("t", history_of(trajectory("t", LINE)["messages"]), words)
    last_two = "no command here\nPlease always provide exactly one bash block."
    assert case.query == f"Fix the bug.\n{last_two}"
    assert case.mandatory == {"m0", "m1", "m4", "m5"}
    assert case.roots.current_task_id == TASK_ID
    assert case.roots.recent_turns == 2


def write_jsonl_gz(path: Path, records: Sequence[dict[str, Any]]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in records)


def test_load_swe_skips_trajectories_whose_hunks_no_message_grounds(tmp_path: Path) -> None:
    path = tmp_path / "swe.jsonl.gz"
    write_jsonl_gz(path, [trajectory("grounded", LINE), trajectory("ungrounded", "other")])
    data = load_swe(path, words)
    assert [t.instance_id for t in data.trajectories] == ["grounded"]
    assert data.skipped == ("ungrounded",)
    assert data.trajectories[0].hunks == ((LINE,),)


def test_load_swe_stops_after_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "swe.jsonl.gz"
    write_jsonl_gz(path, [trajectory(f"t{i}", LINE) for i in range(3)])
    assert len(load_swe(path, words, limit=2).trajectories) == 2


# ---- needed-later recall --------------------------------------------------------


NEEDED = "def compute_total(values, scale_factor):"  # 40 chars: counts
SHORT = "return total * 2"  # under 25 chars: never needed


def test_needed_lines_are_earlier_output_lines_a_later_text_quotes() -> None:
    outputs = [f"  {NEEDED}\n  {SHORT}\nan output line nobody quotes later on", NEEDED]
    later = [f"I will replace {NEEDED} and {SHORT}", "patch"]
    assert needed_lines(outputs, later) == (NEEDED,)


def test_needed_recall_is_the_share_of_needed_lines_in_the_prompt() -> None:
    other = "x" * 30
    assert needed_recall((NEEDED, other), f"prompt with {NEEDED}") == 0.5


def printed(step: int) -> str:
    return f"line printed by step number {step} of the run"


def test_steps_sit_at_quarters_see_the_messages_before_and_skip_if_nothing_is_needed() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix the bug."},
    ]
    for i in range(7):
        messages.append({"role": "assistant", "content": f"THOUGHT: step {i}\n```bash\nls\n```"})
        messages.append({"role": "user", "content": f"<returncode>0</returncode>\n{printed(i)}"})
    messages.append({"role": "assistant", "content": f"quoting {printed(1)} and {printed(5)}"})
    steps = trajectory_steps("t", messages, "", words)
    # the last assistant message is the 17th: points at 4, 8, 12 and 16 messages;
    # at 4 nothing printed yet is quoted later, so that step is skipped
    assert [len(s.case.chunks) for s in steps] == [8, 12, 16]
    assert [s.needed for s in steps] == [(printed(1),), (printed(1),), (printed(1), printed(5))]
    assert [s.case.key for s in steps] == ["t@0.5", "t@0.75", "t@1.0"]


def test_obs_mask_keeps_every_turn_and_the_newest_outputs_that_fit() -> None:
    chunks = [
        Chunk("sys", Role.SYSTEM, ChunkKind.SYSTEM, "system", tokens=10),
        Chunk("task", Role.USER, ChunkKind.MESSAGE, "task", tokens=10),
        Chunk("c1", Role.MODEL, ChunkKind.TOOL_CALL, "call 1", tokens=10),
        Chunk("o1", Role.USER, ChunkKind.TOOL_RESULT, "output 1", tokens=100),
        Chunk("c2", Role.MODEL, ChunkKind.TOOL_CALL, "call 2", tokens=10),
        Chunk("o2", Role.USER, ChunkKind.TOOL_RESULT, "output 2", tokens=100),
        Chunk("c3", Role.MODEL, ChunkKind.TOOL_CALL, "call 3", tokens=10),
        Chunk("o3", Role.USER, ChunkKind.TOOL_RESULT, "output 3", tokens=100),
        Chunk("last", Role.MODEL, ChunkKind.MESSAGE, "latest", tokens=10),
    ]
    case = Case("k", tuple(chunks), "q", Roots(), frozenset({"sys", "task", "o3", "last"}))
    method = ObsMask(lambda text: 5)  # placeholders of 5 tokens; 360 tokens in all
    roomy = method.select(case, 0.75)  # 270: o2 verbatim, o1 a placeholder
    assert roomy.ids == tuple(c.id for c in chunks)
    assert roomy.masked == {"o1"} and roomy.replacements == {"o1": OBS_MASK_PLACEHOLDER}
    assert roomy.tokens == 265
    middle = method.select(case, 0.6)  # 216: both old outputs placeholders, every turn stays
    assert middle.ids == roomy.ids and middle.masked == {"o1", "o2"} and middle.tokens == 170
    tight = method.select(case, 0.4)  # 144: then the oldest turns go
    assert tight.ids == ("sys", "task", "c3", "o3", "last")
    assert tight.masked == frozenset() and tight.tokens == 140


def test_a_loss_is_charged_to_the_holder_that_came_closest_to_keeping_it() -> None:
    kept = Kept((), 0, causes={"a": CAUSE_VALUE, "b": CAUSE_TRIM, "c": CAUSE_MASK})
    assert cause(kept, ["a", "b", "c"]) == CAUSE_TRIM
    assert cause(kept, ["a", "c"]) == CAUSE_MASK
    assert cause(kept, ["a"]) == CAUSE_VALUE
    assert cause(kept, ["z"]) == CAUSE_NOT_CHOSEN
