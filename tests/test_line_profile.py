"""A text's line profile takes shortcuts (error lines read only where their
marks are, headers only when a line of the whole text is one, each name-like
word resolved once per process, the lines naming an identifier read only
where it is written, cited numbers searched from their patterns' literal
parts): it must stay exactly what the plain definitions give, whatever the
text, or plans would change."""

from __future__ import annotations

import re

from ctxopt.scoring import code_names, line_value
from ctxopt.text.lines import text_lines
from hypothesis import example, given, settings
from hypothesis import strategies as st

# Pieces that reach every branch: error and traceback marks (also as parts of
# words and at a line's start), header keywords with and without a numbered
# prefix, paths, snake_case, camelCase, numbers and the separators around them.
PIECES = [
    "E",
    "E  ",
    "Error",
    "ValueError",
    "xError",
    "Exception",
    "FAILED",
    "error:",
    "Traceback (most recent call last)",
    'File "a.py", line 12',
    '  File "b/c.py", line 7, in f',
    "def ",
    "class ",
    "async def ",
    "fn ",
    "func",
    "struct",
    "impl",
    "interface",
    "defined",
    "    12\t",
    "  7: ",
    "a/b/query.py",
    "./x/",
    "compute_total",
    "QuerySet",
    "self",
    "_x_",
    "x.y",
    "line 40",
    "sed -n '3,9p'",
    " ",
    "\t",
    "\n",
    "\n\n",
    "(",
    ":",
    # halves of a match split by a line's end: a whole-text search must not join them
    'File "x',
    '", line 5',
    "async ",
    "E\t\t",
    "\r",
    "3  ",
    # names are found in a text's UTF-8 bytes: characters outside ASCII (one
    # unpaired surrogate too) around and inside words, hyphens, digits first
    "é",
    "日本",
    "\udcff",
    "-",
    "a-b/c-d",
    "9ab_c",
    "xY",
    # indents: Python's whitespace beyond ASCII, tabs among spaces
    "    ",
    "\u00a0",
    "\x1c",
    " \t ",
]
TEXTS = st.lists(st.sampled_from(PIECES), max_size=40).map("".join)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[./][A-Za-z_][A-Za-z0-9_-]*)*")


def plain_names(line: str) -> frozenset[str]:
    """The definition of a line's names, without any cache."""
    found: set[str] = set()
    for match in _NAME.finditer(line):
        name = match.group(0).strip("./-")
        parts = name.split("/")
        found.update("/".join(parts[i:]) for i in range(len(parts)))
    return frozenset(n for n in found if code_names.is_code_name(n))


def plain_number(line: str) -> int | None:
    """The definition of a line's own number, without the shortcut."""
    found = line_value._NUMBERED.match(line) or line_value._TRACEBACK_AT.search(line)
    return int(found.group(1)) if found else None


def plain_headers(lines: list[str]) -> tuple[int | None, ...]:
    """The definition of each line's enclosing header, without the shortcuts."""
    open_headers: list[tuple[int, int]] = []  # (indent, line number)
    enclosing: list[int | None] = []
    for number, line in enumerate(lines):
        numbered = line_value._NUMBERED.match(line)
        body = line[numbered.end() :] if numbered else line
        if not body.strip():
            enclosing.append(open_headers[-1][1] if open_headers else None)
            continue
        expanded = body.expandtabs(4)
        indent = len(expanded) - len(expanded.lstrip())
        while open_headers and open_headers[-1][0] >= indent:
            open_headers.pop()
        enclosing.append(open_headers[-1][1] if open_headers else None)
        if line_value._HEADER.match(body):
            open_headers.append((indent, number))
    return tuple(enclosing)


@settings(max_examples=300, deadline=None)
@given(TEXTS)
@example("Ex\nclass A:\n    def f(self):\n        raise KeyError")
@example('ok\n  File "a.py", line 3\nE  assert')
@example("    12\tdef f():\n    13\t    x = 1")
@example("x = defaults\n    def f(self):\n        y")
@example('E\n\nok\nFile "x\n", line 5\nasync\ndef g()')
def test_a_profile_is_its_lines_plain_definitions(text: str) -> None:
    lines = text.split("\n")
    made = line_value.profile(text)
    assert made.lines == tuple(lines)
    assert made.errors == frozenset(i for i, line in enumerate(lines) if line_value.is_error(line))
    assert made.headers == line_value.enclosing_headers(lines) == plain_headers(lines)
    assert made.numbers == tuple(plain_number(line) for line in lines)
    assert made.all_numbers == {n for n in map(plain_number, lines) if n is not None}
    line_names = [plain_names(line) for line in lines]
    assert made.all_names == line_value.names(text) == frozenset().union(*line_names)


def test_texts_with_nothing_found_share_one_empty_set_each() -> None:
    """A text naming nothing, citing nothing, with no error, numbered or
    keyed line gets the one shared empty set of each kind (each frozenset a
    cache keeps stays tracked by the cyclic collector), still equal to what
    was found: nothing."""
    texts = ["plain words only\nan Errorless day", "just one more\nno Exception here"]
    for text in texts:
        made = line_value.profile(text)
        assert made.all_names == frozenset() and made.all_names is code_names.NO_NAMES
        assert line_value.names(text) is code_names.NO_NAMES
        assert made.errors == made.all_numbers == frozenset()
        assert made.errors is made.all_numbers is line_value.NO_NUMBERS
        assert line_value.cited_numbers(text) is line_value.NO_NUMBERS
    first, second = (text_lines(text).distinct for text in texts)
    assert first == frozenset() and first is second
    named = line_value.profile('see compute_total\nFile "a.py", line 3\nValueError: x')
    assert named.all_names == {"compute_total", "a.py", "ValueError"}
    assert named.errors == {1, 2}
    assert named.all_numbers == {3}


def test_a_profile_holds_the_line_books_split_of_its_text() -> None:
    """A profile's lines are the tuple `text_lines` keeps for the line book
    (one copy of each line per process), still `text.split("\n")`."""
    text = "first line\n    second = line_two(x)\n\nlast"
    split = text_lines(text)
    made = line_value.profile(text)
    assert made.lines is split.lines
    assert made.lines == tuple(text.split("\n"))


@settings(max_examples=300, deadline=None)
@given(TEXTS, st.sets(st.sampled_from([*PIECES, "query.py", "b/query.py", "c.py", "y"])))
@example("a.py x_y a.py\nx_ya.py\n", {"a.py", "x_y"})
def test_the_lines_naming_identifiers_are_the_lines_whose_names_hold_one(
    text: str, extra: set[str]
) -> None:
    """Only lines where an identifier is written are read: still exactly the
    lines whose names (the plain definition) hold one of them."""
    lines = text.split("\n")
    line_names = [plain_names(line) for line in lines]
    held = frozenset().union(*line_names)
    for identifiers in (held, frozenset(extra), frozenset(extra) | set(list(held)[:2])):
        expected = [i for i, found in enumerate(line_names) if found & identifiers]
        assert list(line_value.profile(text).lines_naming(identifiers)) == expected


CODE = ["def f():", "async def g():", "class A:", "function h() {", "fn main()", "impl X"]
CODE += ["x = 1", "return x", "defined", "", "\t"]
CODE_LINES = st.lists(
    st.tuples(
        st.sampled_from(["", "    12\t", "  7: ", "3  "]),
        st.lists(st.sampled_from([" ", "\t", "    ", "\u00a0", "\x1c", "\r"]), max_size=4),
        st.sampled_from(CODE),
    ).map(lambda parts: parts[0] + "".join(parts[1]) + parts[2]),
    max_size=30,
)


@settings(max_examples=500, deadline=None)
@given(CODE_LINES)
@example(["async def f():", "    x = 1", "\tdef g():", "\t\ty", " \tz"])
def test_enclosing_headers_are_their_plain_definition(lines: list[str]) -> None:
    """Code read by its words and indents without copying each line: still
    the headers the plain pass (each line's tabs expanded) finds."""
    assert line_value.enclosing_headers(lines) == plain_headers(lines)


def plain_excerpt(
    headers: list[int | None], scores: list[float], costs: list[float], budget: float
) -> tuple[int, ...]:
    """The definition of an excerpt's lines (context 1), without the shortcuts."""
    n = len(scores)
    kept: set[int] = set()
    spent = 0.0
    for line in sorted((i for i in range(n) if scores[i] > 0), key=lambda i: (-scores[i], i)):
        if line in kept:
            continue
        window = set(range(max(0, line - 1), min(n, line + 2)))
        header = headers[line]
        while header is not None:
            window.add(header)
            header = headers[header]
        cost = sum(costs[i] for i in window - kept)
        if spent + cost > budget:
            continue
        kept |= window
        spent += cost
    return tuple(sorted(kept))


@settings(max_examples=500, deadline=None)
@given(CODE_LINES, st.data())
def test_an_excerpts_lines_are_their_plain_definition(
    lines: list[str], data: st.DataObject
) -> None:
    """Ranked by a stable sort and costed through `map`: still the plain
    ranking (ties by line) and the same float sums, so the same lines."""
    headers = list(line_value.enclosing_headers(lines))
    n = len(lines)
    scores = data.draw(
        st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.25]), min_size=n, max_size=n)
    )
    costs = data.draw(st.lists(st.floats(0.01, 9.0), min_size=n, max_size=n))
    budget = data.draw(st.floats(0.0, 40.0))
    made = line_value.excerpt_lines(headers, scores, costs, budget, context=1)
    assert made == plain_excerpt(headers, scores, costs, budget)


CITING = ["line", "lines", "Line", "xline", "_line", " ", "\n", "12", "7", "٣", ",", "p", "P"]
CITING += [".py:", ".", ":", "a", "é", "sed -n '", "'"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(CITING), max_size=30).map("".join))
@example("1,2,3p 12,34,56p 5,6p7,8p 1,2p,3p a.py:9 xline 30 (line 4) lines 5")
def test_cited_numbers_are_the_plain_patterns(text: str) -> None:
    """Searched from the patterns' literal parts: still exactly what the two
    plain patterns find."""
    cited: set[int] = set()
    for match in re.finditer(r"(\d+),(\d+)p", text):
        first, last = int(match.group(1)), int(match.group(2))
        if 0 <= last - first <= line_value.MAX_CITED_RANGE:
            cited.update(range(first, last + 1))
    cited.update(int(m.group(1)) for m in re.finditer(r"(?:\bline[s]? |\.\w{1,5}:)(\d+)\b", text))
    assert line_value.cited_numbers(text) == cited


RUN_TEXTS = st.lists(
    st.text(alphabet="aZ_./-9 é\n", max_size=12) | st.sampled_from(PIECES), max_size=12
).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(RUN_TEXTS, min_size=1, max_size=6), st.integers(1, 8))
def test_a_run_book_gives_the_plain_names_across_its_refills(texts: list[str], size: int) -> None:
    """Runs resolved once and taken out of a text's runs by set operations
    (those naming nothing apart), the book replaced when full: every text
    and run still has exactly its plain names, asked again or not."""
    book = code_names.RunNames(size)
    for text in [*texts, *texts]:
        assert book.of_text(text) == plain_names(text)
        for run in code_names.runs(text):
            assert frozenset(book.of_run(run)) == plain_names(run.decode("ascii"))
