"""The two quality metrics, as ../shared/datasets/README.md defines them.

LoCoMo evidence-turn recall: the share of a question's evidence turns still in
the prompt, and whether all of them are. SWE patch-grounded hunk coverage: a
hunk of the submitted patch is covered when one of its original lines (a `-`
or ` ` line, stripped, at least MIN_LINE_CHARS long) appears in the optimized
prompt text.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Collection, Iterable, Sequence

MIN_LINE_CHARS = 20  # shorter lines (`return x`, `}`) occur everywhere and prove nothing
MIN_NEEDED_CHARS = 25  # needed-later recall: ../shared/datasets/README.md
HUNK_HEADER = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def hunk_lines(patch: str) -> list[tuple[str, ...]]:
    """Per hunk of a unified diff, its original lines that count as evidence:
    context and removed lines, stripped, of at least MIN_LINE_CHARS. A hunk
    that only adds lines (a new file) yields an empty tuple."""
    hunks: list[list[str]] = []
    old_left = new_left = 0  # lines of the current hunk still to read, by side
    for line in patch.splitlines():
        header = HUNK_HEADER.match(line)
        if header and old_left <= 0 and new_left <= 0:
            old_left = int(header.group(2) or 1)
            new_left = int(header.group(4) or 1)
            hunks.append([])
            continue
        if old_left <= 0 and new_left <= 0:
            continue  # file headers and `\ No newline at end of file`
        tag, body = line[:1], line[1:]
        if tag in ("-", " ", ""):
            old_left -= 1
            if len(body.strip()) >= MIN_LINE_CHARS:
                hunks[-1].append(body.strip())
        if tag in ("+", " ", ""):
            new_left -= 1
    return [tuple(h) for h in hunks]


def hunk_covered(lines: Iterable[str], text: str) -> bool:
    return any(line in text for line in lines)


def grounded(hunks: Iterable[Sequence[str]], messages: Sequence[str]) -> bool:
    """Whether every hunk has a line that some message holds; a trajectory
    where one has none cannot be evaluated (nothing could have kept it)."""
    return all(any(hunk_covered(lines, m) for m in messages) for lines in hunks)


def hunk_coverage(hunks: Sequence[Sequence[str]], text: str) -> float:
    return sum(hunk_covered(lines, text) for lines in hunks) / len(hunks)


def needed_lines(outputs: Iterable[str], later: Sequence[str]) -> tuple[str, ...]:
    """Lines of earlier tool outputs (stripped, at least MIN_NEEDED_CHARS) that
    a later text (an assistant message after the step, or the patch) holds
    verbatim; each distinct line once, in first-seen order."""
    seen: dict[str, None] = {}
    for output in outputs:
        for line in output.splitlines():
            line = line.strip()
            if len(line) >= MIN_NEEDED_CHARS and line not in seen:
                seen[line] = None
    return tuple(line for line in seen if any(line in text for text in later))


def needed_recall(needed: Sequence[str], text: str) -> float:
    """The share of the needed lines the pruned prompt still holds verbatim."""
    return sum(1 for line in needed if line in text) / len(needed)


def evidence_recall(evidence: Collection[str], kept: Collection[str]) -> float:
    return sum(1 for i in evidence if i in kept) / len(evidence)


def all_evidence_kept(evidence: Collection[str], kept: Collection[str]) -> bool:
    return all(i in kept for i in evidence)


def mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")
