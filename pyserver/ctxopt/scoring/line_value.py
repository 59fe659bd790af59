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

>>> text = "import os\\nclass Cart:\\n    def total(self):\\n        return sum_of(self.x)"
>>> weights = LineWeights(relevance=1, identifier=1, cited=1, error=1, echoed=1)
>>> scores = line_scores(profile(text), LineFacts(identifiers=frozenset({"sum_of"})), weights)
>>> excerpt_lines(profile(text).headers, scores, [1.0] * 4, budget=3.0, context=0)
(1, 2, 3)
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, count
from typing import AnyStr, cast

from ctxopt.scoring.code_names import RUN_BYTES, run_names, text_names
from ctxopt.scoring.text_memo import TextMemo
from ctxopt.text.lines import text_lines

# The model citing lines: `sed -n '120,140p'`, `line 131`, `file.py:131`.
# Searched from their literal parts (a pattern that starts with \d or \b is
# tried at every character, most of what reading a model's text cost):
# `(\d+),(\d+)p` as its `,(\d+)p` with the digits before the comma, and
# `(?:\bline[s]? |\.\w{1,5}:)(\d+)\b` as its two alternatives (their matches
# cannot overlap), the first checked for the word boundary before it.
_RANGE_END = re.compile(r",(\d+)p")
_LINE_WORD = re.compile(r"lines? (\d+)\b")
_FILE_LINE = re.compile(r"\.\w{1,5}:(\d+)\b")
_WORD_CHAR = re.compile(r"\w")
PROFILE_CACHE_SIZE = 16384  # distinct texts (tool outputs, model messages) remembered
# The one empty set of line numbers the cached facts hold (cited numbers,
# error lines, a profile's numbers): most texts have none, and each frozenset
# stays tracked by the cyclic collector while a cache holds it.
NO_NUMBERS: frozenset[int] = frozenset()
MAX_CITED_RANGE = 400  # a wider range is a whole-file read, not a citation
# A line's own number as `nl -ba`, `cat -n`, `grep -n` or a traceback prints it.
_NUMBERED = re.compile(r"^\s*(\d+)(?:[\t:|]| {2})")
# `_NUMBERED` in a whole text: on its first line, and after each newline (its
# `\s` less the newline: a line holds none), a search for the newline first.
_NUMBERED_FIRST = re.compile(r"[^\S\n]*(\d+)(?:[\t:|]| {2})")
_NUMBERED_LATER = re.compile(r"\n[^\S\n]*(\d+)(?:[\t:|]| {2})")
_TRACEBACK_AT = re.compile(r'File "[^"]+", line (\d+)')
_ERROR = re.compile(
    r"Traceback \(most recent call last\)|^\s*File \"[^\"]+\", line \d+"
    r"|\b[A-Z]\w*(?:Error|Exception)\b|\bFAILED\b|\berror:|^E\s{2,}|AssertionError"
)
# Each alternative of _ERROR holds one of these (or starts its line with "E").
_ERROR_MARKS = ("Traceback", 'File "', "Error", "Exception", "FAILED", "error:")
_HEADER = re.compile(r"^\s*(?:async\s+def|def|class|function|func|fn|impl|struct|interface)\b")
# A word every `_HEADER` (and `_HEADER_IN_TEXT`) match holds, a line's code
# starting with it for `_HEADER` (`function` is a `func`).
_HEADER_WORDS = ("def", "class", "async", "func", "fn", "impl", "struct", "interface")
# A line of the whole text that `_HEADER` matches once its `_NUMBERED`
# prefix is off (or that this matches without one): none, and no line
# has an enclosing header.
_HEADER_IN_TEXT = re.compile(
    r"^[^\S\n]*(?:\d+(?:[\t:|]| {2}))?[^\S\n]*"
    r"(?:async[^\S\n]+def|def|class|function|func|fn|impl|struct|interface)\b",
    re.MULTILINE,
)


names_memo = TextMemo(text_names, PROFILE_CACHE_SIZE)
names = names_memo.lookup


def _cited_numbers(text: str) -> frozenset[int]:
    """Line numbers a model's text cites: `sed -n 'a,bp'` ranges (when not a
    whole-file read) and single `line N` / `file.py:N` mentions.

    >>> sorted(cited_numbers("sed -n '10,12p' a.py; see line 40 and a.py:7"))
    [7, 10, 11, 12, 40]
    """
    cited: set[int] = set()
    for match in _RANGE_END.finditer(text):
        start = comma = match.start()
        while start > 0 and text[start - 1].isdecimal():  # what \d matches
            start -= 1
        if start == comma:
            continue
        first, last = int(text[start:comma]), int(match.group(1))
        if 0 <= last - first <= MAX_CITED_RANGE:
            cited.update(range(first, last + 1))
    for match in _LINE_WORD.finditer(text):
        at = match.start()
        if at == 0 or not _WORD_CHAR.match(text, at - 1):
            cited.add(int(match.group(1)))
    cited.update(int(m.group(1)) for m in _FILE_LINE.finditer(text))
    return frozenset(cited) if cited else NO_NUMBERS


cited_memo = TextMemo(_cited_numbers, PROFILE_CACHE_SIZE)
cited_numbers = cited_memo.lookup


def own_number(line: str) -> int | None:
    """The line's number as a numbered listing or a traceback prints it."""
    numbered = _NUMBERED.match(line)
    if numbered:
        return int(numbered.group(1))
    if 'File "' not in line:  # what _TRACEBACK_AT needs: skips its scan of most lines
        return None
    at = _TRACEBACK_AT.search(line)
    return int(at.group(1)) if at else None


def _own_numbers(text: str, lines: Sequence[str]) -> tuple[int | None, ...]:
    """Each line's `own_number`, found in the whole text: the numbered lines
    by one search in C (most lines of most outputs print no number), then
    the lines where `File "` is and no number was found."""
    numbers: list[int | None] = [None] * len(lines)
    first = _NUMBERED_FIRST.match(text)
    if first is not None:
        numbers[0] = int(first.group(1))
    later = list(_NUMBERED_LATER.finditer(text))
    starts = [match.start() + 1 for match in later]  # each one's line, after its newline
    for number, match in zip(_line_numbers(text, starts, "\n"), later, strict=True):
        numbers[number] = int(match.group(1))
    at_files = list(_places(text, 'File "'))
    for number in dict.fromkeys(_line_numbers(text, at_files, "\n")):
        if numbers[number] is None:
            numbers[number] = own_number(lines[number])
    return tuple(numbers)


def _has_header(text: str) -> bool:
    """Whether a line of `text` matches `_HEADER_IN_TEXT`, tried only at the
    lines holding one of `_HEADER_WORDS` (a search of the whole text tried
    the pattern at every character: 40 ms of a 10,000-chunk first plan)."""
    for word in _HEADER_WORDS:
        at = text.find(word)
        while at >= 0:
            if _HEADER_IN_TEXT.match(text, text.rfind("\n", 0, at) + 1):
                return True
            end = text.find("\n", at)
            at = text.find(word, end) if end >= 0 else -1
    return False


def is_error(line: str) -> bool:
    return _ERROR.search(line) is not None


def _error_lines(text: str, lines: Sequence[str]) -> frozenset[int]:
    """The lines `is_error` finds, searched only where one of `_ERROR_MARKS`
    is or a line starts with "E" (every match holds one): their places in the
    whole text are found in C, so most lines are never looked at."""
    offsets = {at for mark in _ERROR_MARKS for at in _places(text, mark)}
    offsets.update(at + 1 for at in _places(text, "\nE"))
    if text.startswith("E"):
        offsets.add(0)
    if not offsets:
        return NO_NUMBERS
    numbers = dict.fromkeys(_line_numbers(text, sorted(offsets), "\n"))
    return frozenset(n for n in numbers if is_error(lines[n])) or NO_NUMBERS


def _places(text: str, piece: str) -> Iterator[int]:
    """Every offset where `piece` starts in `text` (overlaps too)."""
    at = text.find(piece)
    while at >= 0:
        yield at
        at = text.find(piece, at + 1)


def _line_numbers(text: AnyStr, offsets: Sequence[int], newline: AnyStr) -> list[int]:
    """The line number of each offset into `text` (offsets ascending)."""
    numbers: list[int] = []
    line, counted = 0, 0
    for at in offsets:
        line += text.count(newline, counted, at)
        counted = at
        numbers.append(line)
    return numbers


# a plain dict, least recent first: an OrderedDict's items() looks each key
# up again, hashing every pooled tuple of texts (~0.4 ms a plan at 1,000 chunks)
_pooled: dict[tuple[str, ...], tuple[frozenset[str], frozenset[int]]] = {}
_pooled_lock = threading.Lock()  # plans of different sessions run in parallel
POOLED_CACHE_SIZE = 64


def model_facts(model_texts: tuple[str, ...]) -> tuple[frozenset[str], frozenset[int]]:
    """The names and the line numbers the model's texts hold, pooled (cached:
    a plan after a plan with no new model text pays one tuple hash). A
    session that grew adds only its new texts to the pool of the texts it
    held before: pooling every model text again (and `names` of the ones the
    process-wide caches had dropped) was ~5 ms of each plan after an append
    at 10,000 chunks."""
    with _pooled_lock:
        found = _pooled.get(model_texts)
        if found is not None:
            _pooled[model_texts] = _pooled.pop(model_texts)  # now the most recent
            return found
        recent = list(_pooled.items())
    found_names: frozenset[str] = frozenset()
    found_numbers: frozenset[int] = frozenset()
    start = 0
    for before, (pooled_names, pooled_numbers) in reversed(recent):  # likely this session's last
        size = len(before)
        if (
            0 < size <= len(model_texts)
            and before[-1] is model_texts[size - 1]
            and before == model_texts[:size]
        ):
            found_names, found_numbers = pooled_names, pooled_numbers
            start = size
            break
    added = model_texts[start:]
    # one copy of the pool (thousands of names), not a set and a frozenset
    made = (
        found_names.union(*map(names, added)),
        found_numbers.union(*map(cited_numbers, added)),
    )
    with _pooled_lock:
        _pooled[model_texts] = made
        if len(_pooled) > POOLED_CACHE_SIZE:
            del _pooled[next(iter(_pooled))]
    return made


@dataclass(frozen=True, slots=True)
class LineProfile:
    """What the scoring reads of each line of a text, made once per text."""

    lines: tuple[str, ...]
    numbers: tuple[int | None, ...]  # each line's own number, if it prints one
    errors: frozenset[int]  # the error and traceback lines
    all_names: frozenset[str]  # the names its lines hold (`names` of the text)
    all_numbers: frozenset[int]
    headers: tuple[int | None, ...]  # each line's enclosing def/class header

    def lines_naming(self, identifiers: frozenset[str]) -> tuple[int, ...]:
        """The numbers of the lines whose `names` hold one of `identifiers`.
        A line's names are its runs' (`code_names`), each a piece of its run:
        only the runs where one is written (ASCII: found by `bytes.find` in
        the UTF-8 text) are resolved, each once, none per line."""
        wanted = identifiers & self.all_names
        if not wanted:
            return ()
        key = (id(self), wanted)
        found = _naming.get(key)
        if found is not None and found[0] is self:  # not another profile at a reused id
            return found[1]
        naming = self._lines_naming(wanted)
        with _naming_lock:
            _naming[key] = (self, naming)
            if len(_naming) > NAMING_CACHE_SIZE:
                _naming.popitem(last=False)
        return naming

    def _lines_naming(self, wanted: frozenset[str]) -> tuple[int, ...]:
        encoded = "\n".join(self.lines).encode("utf-8", "surrogatepass")
        runs = encoded.translate(RUN_BYTES)  # byte for byte; a newline is a space
        size, of_run = len(runs), run_names.of_run
        resolved: dict[int, bool] = {}  # run start -> whether its names hold one
        # a run holding a path holds each of its tails: the wanted names with
        # no wanted tail reach every run the others do (a fifth of the places)
        for name in [name for name in wanted if "/" not in name or not _tail_in(name, wanted)]:
            piece = name.encode("ascii")
            at = runs.find(piece)
            while at >= 0:
                start = runs.rfind(b" ", 0, at) + 1
                end = runs.find(b" ", at)
                end = size if end < 0 else end
                if start not in resolved:
                    resolved[start] = not wanted.isdisjoint(of_run(runs[start:end]))
                at = runs.find(piece, end)  # a run names one or not as a whole
        starts = sorted(start for start, naming in resolved.items() if naming)
        return tuple(dict.fromkeys(_line_numbers(encoded, starts, b"\n")))


# the names lately resolved in a profile's lines, and the answer: an output
# made again because only its query terms' weights moved (several a plan after
# an append) asks for the same names. A hundred answers, not one kept per
# profile (that held ~5 MB more at 10,000 chunks)
_naming: OrderedDict[tuple[int, frozenset[str]], tuple[LineProfile, tuple[int, ...]]] = (
    OrderedDict()
)
_naming_lock = threading.Lock()
NAMING_CACHE_SIZE = 128  # above the ~55 outputs a plan after an append remakes at 10,000 chunks


def _tail_in(path: str, names: frozenset[str]) -> bool:
    """Whether a tail of `path` after one of its `/` is in `names`."""
    at = path.find("/")
    while at >= 0:
        if path[at + 1 :] in names:
            return True
        at = path.find("/", at + 1)
    return False


def _profile(text: str) -> LineProfile:
    # the lines the line book split already (it keys every chunk's before a
    # plan profiles an output): the same tuple, not a second copy of each line
    lines = text_lines(text).lines
    numbers = _own_numbers(text, lines)
    return LineProfile(
        lines,
        numbers,
        _error_lines(text, lines),
        names(text),
        # a set difference in C, not a test per line
        cast(frozenset[int], frozenset(numbers).difference(_NO_NUMBER)) or NO_NUMBERS,
        enclosing_headers(lines) if _has_header(text) else (None,) * len(lines),
    )


_NO_NUMBER: frozenset[int | None] = frozenset([None])
_ZERO = 0.0
profile_memo = TextMemo(_profile, PROFILE_CACHE_SIZE)
profile = profile_memo.lookup


@dataclass(frozen=True, slots=True)
class LineFacts:
    """What the session says about the lines of one text: per line, the
    summed weight (rarity) of the query terms it holds; the names and line
    numbers the model wrote (or the task names); and the lines other chunks
    echo or the model quoted."""

    relevance: Mapping[int, float] = field(default_factory=dict)
    identifiers: frozenset[str] = frozenset()
    cited: frozenset[int] = frozenset()
    echoed: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class LineWeights:
    """What each signal adds to a line's score (ctxopt.planner.knobs holds the
    defaults); relevance is scaled so the text's most relevant line scores it."""

    relevance: float
    identifier: float
    cited: float
    error: float
    echoed: float


def line_scores(text: LineProfile, facts: LineFacts, weights: LineWeights) -> list[float]:
    """Per line, the sum of its signals (0: nothing points at it)."""
    top = max(facts.relevance.values(), default=0.0)
    scores = [0.0] * len(text.lines)
    if top > 0:
        for number, weight in facts.relevance.items():
            scores[number] += weights.relevance * weight / top
    for number in text.lines_naming(facts.identifiers):
        scores[number] += weights.identifier
    if facts.cited and not facts.cited.isdisjoint(text.all_numbers):
        # the lines printing a cited number, picked out in C (each line once)
        for number in compress(count(), map(facts.cited.__contains__, text.numbers)):
            scores[number] += weights.cited
    for number in text.errors:
        scores[number] += weights.error
    for number in facts.echoed:
        scores[number] += weights.echoed
    return scores


def enclosing_headers(lines: Sequence[str]) -> tuple[int | None, ...]:
    """Per line, its enclosing `def`/`class` header: the nearest header above
    it that is indented less and still open (no line since went back to its
    indentation). A numbered listing's prefix is ignored; blank lines close
    nothing; a tab indents to the next multiple of 4. One pass, a stack of
    open headers."""
    open_headers: list[tuple[int, int]] = []  # (indent, line number)
    enclosing: list[int | None] = []
    numbered = _NUMBERED.match
    for number, line in enumerate(lines):
        found = numbered(line)
        body = line[found.end() :] if found else line
        code = body.lstrip()
        if not code:
            enclosing.append(open_headers[-1][1] if open_headers else None)
            continue
        if "\t" in body:
            expanded = body.expandtabs(4)
            indent = len(expanded) - len(expanded.lstrip())
        else:  # expandtabs changes tabs only: the plain indent, without the copy
            indent = len(body) - len(code)
        while open_headers and open_headers[-1][0] >= indent:
            open_headers.pop()
        enclosing.append(open_headers[-1][1] if open_headers else None)
        # `_HEADER` matches only where the code starts with one of its words
        if code.startswith(_HEADER_WORDS) and _HEADER.match(body):
            open_headers.append((indent, number))
    return tuple(enclosing)


def excerpt_lines(
    headers: Sequence[int | None],
    scores: Sequence[float],
    costs: Sequence[float],
    budget: float,
    context: int = 1,
) -> tuple[int, ...]:
    """The lines to keep: best-scoring first, each with its enclosing headers
    (`headers`, as `enclosing_headers` gives them) and `context` lines either
    side, while their cost stays within `budget`
    (a line whose window does not fit is skipped, a smaller one may follow).
    Lines that score 0 are never the reason to keep anything.
    """
    n = len(scores)
    kept: set[int] = set()
    spent = 0.0
    cost_of = costs.__getitem__
    # best first, ties by line: a stable sort keeps the lines' order among equals
    # the lines scoring above 0 picked out in C (`0.0 < score`: the same test)
    ranked = sorted(
        compress(count(), map(_ZERO.__lt__, scores)), key=scores.__getitem__, reverse=True
    )
    for line in ranked:
        if line in kept:
            continue
        window = set(range(max(0, line - context), min(n, line + context + 1)))
        header = headers[line]
        while header is not None:  # the method's def, then its class
            window.add(header)
            header = headers[header]
        cost = sum(map(cost_of, window - kept))  # summed in the same order as ever
        if spent + cost > budget:
            continue
        kept |= window
        spent += cost
    return tuple(sorted(kept))


def select_lines(
    line_scores: Sequence[float], line_costs: Sequence[float], budget: float, context: int
) -> list[int]:
    """A TRIM excerpt's lines: best-scoring first with `context` lines around
    each, within `budget` (the best one even beyond it).

    With no scoring line, keeps the head and (mostly) the tail: that is where
    commands print what they are and how they ended.
    """
    n = len(line_scores)
    chosen: set[int] = set()
    spent = 0.0
    ranked = sorted((i for i in range(n) if line_scores[i] > 0), key=lambda i: (-line_scores[i], i))
    for i in ranked:
        window = range(max(0, i - context), min(n, i + context + 1))
        cost = sum(line_costs[j] for j in window if j not in chosen)
        if spent + cost > budget and chosen:
            continue
        chosen.update(window)
        spent += cost
    if not chosen:
        head, tail = 0, n
        head_budget = budget * 0.3
        while head < n and spent + line_costs[head] <= head_budget:
            spent += line_costs[head]
            head += 1
        while tail > head and spent + line_costs[tail - 1] <= budget:
            tail -= 1
            spent += line_costs[tail]
        chosen.update(range(head))
        chosen.update(range(tail, n))
    return sorted(chosen)


def with_context(anchors: Sequence[int], n_lines: int, context: int) -> tuple[int, ...]:
    """The anchor lines and `context` lines either side, sorted, inside the text."""
    kept: set[int] = set()
    for line in anchors:
        kept.update(range(max(0, line - context), min(n_lines, line + context + 1)))
    return tuple(sorted(kept))
