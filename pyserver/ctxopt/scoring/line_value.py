"""Which lines of a long output the agent is likely to need next.

When a tool output must shrink, an excerpt keeps its most useful lines rather
than its head and tail. A line's score adds up independent signals, each a
pure function of the output's lines and a few facts about the session:

- relevance: the line holds terms of the query (the task and the latest
  turns), each weighted by its rarity in the session (BM25's idf at line
  level: a rare path or name says more than `self`);
- identifiers: the line names a path, file, function or class the model has
  written (`django/db/models/query.py`, `compute_total`, `QuerySet`): the
  agent acts on what it names;
- cited lines: the line's number (as `nl -ba`, `grep -n` or a traceback
  prints it) is one the model cited (`sed -n '120,140p'`, `line 131`);
- errors: error and traceback lines, where the next step starts;
- echoes: lines other chunks repeat or the model quoted (the caller passes
  them: see `ctxopt.scoring.lines`).

Each kept line brings its structural context: the enclosing `def`/`class`
header above it and `context` lines either side, so an excerpt reads as code.

>>> lines = ["import os", "class Cart:", "    def total(self):", "        return sum_of(self.x)"]
>>> scores = line_scores(lines, LineFacts(identifiers=frozenset({"sum_of"})))
>>> excerpt_lines(lines, scores, [1.0] * 4, budget=3.0, context=0)
(1, 2, 3)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

# A name worth matching: dotted or slashed paths, snake_case, camelCase or
# CapWords with an inner capital; plain words (`self`, `list`) match everywhere.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[./][A-Za-z_][A-Za-z0-9_-]*)*")
_INNER_CAPITAL = re.compile(r"[a-z][A-Z]")
MIN_NAME_CHARS = 4
# The model citing lines: `sed -n '120,140p'`, `line 131`, `file.py:131`.
_RANGE = re.compile(r"(\d+),(\d+)p")
_SINGLE = re.compile(r"(?:\bline[s]? |\.\w{1,5}:)(\d+)\b")
MAX_CITED_RANGE = 400  # a wider range is a whole-file read, not a citation
# A line's own number as `nl -ba`, `cat -n`, `grep -n` or a traceback prints it.
_NUMBERED = re.compile(r"^\s*(\d+)(?:[\t:|]| {2})")
_TRACEBACK_AT = re.compile(r'File "[^"]+", line (\d+)')
_ERROR = re.compile(
    r"Traceback \(most recent call last\)|^\s*File \"[^\"]+\", line \d+"
    r"|\b[A-Z]\w*(?:Error|Exception)\b|\bFAILED\b|\berror:|^E\s{2,}|AssertionError"
)
_HEADER = re.compile(r"^\s*(?:async\s+def|def|class|function|func|fn|impl|struct|interface)\b")


def names(text: str) -> frozenset[str]:
    """The code names a text holds, each path also by its parts
    (`a/b/query.py` -> also `query.py`, `b/query.py`...).

    >>> sorted(names("edit django/db/query.py then call compute_total(x) in Cart"))
    ['compute_total', 'db/query.py', 'django/db/query.py', 'query.py']
    """
    found: set[str] = set()
    for match in _NAME.finditer(text):
        name = match.group(0).strip("./-")
        if "/" in name:
            parts = name.split("/")
            found.update("/".join(parts[i:]) for i in range(len(parts)))
        else:
            found.add(name)
    return frozenset(n for n in found if _is_code_name(n))


def _is_code_name(name: str) -> bool:
    if len(name) < MIN_NAME_CHARS:
        return False
    return "_" in name.strip("_") or "." in name or "/" in name or bool(_INNER_CAPITAL.search(name))


def cited_numbers(text: str) -> frozenset[int]:
    """Line numbers a model's text cites: `sed -n 'a,bp'` ranges (when not a
    whole-file read) and single `line N` / `file.py:N` mentions.

    >>> sorted(cited_numbers("sed -n '10,12p' a.py; see line 40 and a.py:7"))
    [7, 10, 11, 12, 40]
    """
    cited: set[int] = set()
    for match in _RANGE.finditer(text):
        first, last = int(match.group(1)), int(match.group(2))
        if 0 <= last - first <= MAX_CITED_RANGE:
            cited.update(range(first, last + 1))
    cited.update(int(m.group(1)) for m in _SINGLE.finditer(text))
    return frozenset(cited)


def own_number(line: str) -> int | None:
    """The line's number as a numbered listing or a traceback prints it."""
    numbered = _NUMBERED.match(line)
    if numbered:
        return int(numbered.group(1))
    at = _TRACEBACK_AT.search(line)
    return int(at.group(1)) if at else None


def is_error(line: str) -> bool:
    return _ERROR.search(line) is not None


@dataclass(frozen=True, slots=True)
class LineFacts:
    """What the session says about the lines of one output: query term ->
    weight (its rarity), the names and line numbers the model wrote, and the
    numbers of the lines other chunks echo or the model quoted."""

    query_weights: Mapping[str, float] = field(default_factory=dict)
    identifiers: frozenset[str] = frozenset()
    cited: frozenset[int] = frozenset()
    echoed: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class LineWeights:
    """How much each signal adds to a line's score (relevance is scaled so its
    strongest line in the output scores `relevance`)."""

    relevance: float = 1.0
    identifier: float = 1.0
    cited: float = 1.0
    error: float = 0.5
    echoed: float = 1.0


def line_scores(
    lines: Sequence[str],
    facts: LineFacts,
    weights: LineWeights = LineWeights(),
    terms: Callable[[str], list[str]] = lambda line: line.lower().split(),
) -> list[float]:
    """Per line, the sum of its signals (0: nothing points at it).

    `terms` must be the session's analyzer, so query terms match line terms.
    """
    relevance = [
        sum(facts.query_weights.get(t, 0.0) for t in set(terms(line)))
        if facts.query_weights
        else 0.0
        for line in lines
    ]
    top = max(relevance, default=0.0)
    scores = []
    for number, line in enumerate(lines):
        score = weights.relevance * relevance[number] / top if top > 0 else 0.0
        if facts.identifiers and not facts.identifiers.isdisjoint(names(line)):
            score += weights.identifier
        if facts.cited and own_number(line) in facts.cited:
            score += weights.cited
        if is_error(line):
            score += weights.error
        if number in facts.echoed:
            score += weights.echoed
        scores.append(score)
    return scores


def header_above(lines: Sequence[str], number: int) -> int | None:
    """The enclosing `def`/`class` header of a line: the nearest header above
    it that is indented less (a numbered listing's prefix is ignored)."""
    indent = _indent(lines[number])
    for above in range(number - 1, -1, -1):
        text = _body(lines[above])
        if text.strip() and _HEADER.match(text) and _indent(lines[above]) < indent:
            return above
    return None


def _body(line: str) -> str:
    numbered = _NUMBERED.match(line)
    return line[numbered.end() :] if numbered else line


def _indent(line: str) -> int:
    body = _body(line).expandtabs(4)
    return len(body) - len(body.lstrip())


def excerpt_lines(
    lines: Sequence[str],
    scores: Sequence[float],
    costs: Sequence[float],
    budget: float,
    context: int = 1,
) -> tuple[int, ...]:
    """The lines to keep: best-scoring first, each with its enclosing headers
    and `context` lines either side, while their cost stays within `budget`
    (a line whose window does not fit is skipped, a smaller one may follow).
    Lines that score 0 are never the reason to keep anything.
    """
    n = len(lines)
    kept: set[int] = set()
    spent = 0.0
    for line in sorted((i for i in range(n) if scores[i] > 0), key=lambda i: (-scores[i], i)):
        if line in kept:
            continue
        window = set(range(max(0, line - context), min(n, line + context + 1)))
        header = header_above(lines, line)
        while header is not None:  # the method's def, then its class
            window.add(header)
            header = header_above(lines, header)
        cost = sum(costs[i] for i in window - kept)
        if spent + cost > budget:
            continue
        kept |= window
        spent += cost
    return tuple(sorted(kept))
