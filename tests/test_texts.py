"""TRIM excerpts and MASK placeholders: relevant lines, stable bytes."""

from __future__ import annotations

from ctxopt.planner.knobs import TRIM_CONTEXT_LINES
from ctxopt.planner.texts import Trimmer, _excerpt, mask_text, ranged_excerpt
from ctxopt.scoring.line_value import select_lines
from ctxopt.session import stash_id
from ctxopt.text.analyzer import Analyzer
from hypothesis import given, settings
from hypothesis import strategies as st

LOG = "\n".join(
    [f"line {i}: compiling module {i}" for i in range(40)]
    + ["ERROR KeyError: 'section' in config parser"]
    + [f"line {i}: ok" for i in range(41, 80)]
)
TOKENS = 800


def trim(trimmer: Trimmer, query: str, goal: int = 120) -> str:
    terms = frozenset(Analyzer().terms(query))
    return trimmer.trim("log", LOG, stash_id("log", LOG), terms, goal, TOKENS)


def test_trim_keeps_the_query_lines_and_names_what_it_left_out() -> None:
    excerpt = trim(Trimmer(Analyzer()), "KeyError in the config parser")
    assert "ERROR KeyError: 'section' in config parser" in excerpt
    assert excerpt.startswith("[ctxopt: trimmed log; showing lines ")
    assert f"full text in stash {stash_id('log', LOG)}" in excerpt
    assert "[... lines 1-" in excerpt and "omitted ...]" in excerpt
    assert len(excerpt) < len(LOG) / 2


def test_without_query_terms_the_head_and_tail_stay() -> None:
    excerpt = trim(Trimmer(Analyzer()), "")
    body = excerpt.split("\n")[1:]
    assert body[0] == "line 0: compiling module 0" and body[-1] == "line 79: ok"


def test_same_state_same_bytes_cached_or_not() -> None:
    warm = Trimmer(Analyzer())
    first = trim(warm, "config parser")
    assert trim(warm, "config parser") == first == trim(Trimmer(Analyzer()), "config parser")
    # terms the text lacks change nothing: the excerpt is the no-query one
    assert trim(warm, "zebra quantum") == trim(Trimmer(Analyzer()), "")


TRIM_PIECES = ["config", "Config", "configs", "parser", "parse_config", "KeyError", "a/config.py"]
TRIM_PIECES += [" ", "\t", ".", "é", "\n", "\n\n", "x" * 60]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(TRIM_PIECES), max_size=60).map("".join),
    st.sampled_from(["config parser", "KeyError parse", "zebra", ""]),
    st.integers(min_value=1, max_value=80),
)
def test_a_trim_scores_each_line_by_the_query_terms_its_own_terms_hold(
    text: str, query: str, goal: int
) -> None:
    """The query terms' lines come from the text's postings, not from
    analysing each line: still the excerpt each line's own terms give."""
    analyzer = Analyzer()
    terms = frozenset(analyzer.terms(query))
    lines = text.split("\n")
    scores = [float(len(terms.intersection(analyzer.terms(line)))) for line in lines]
    per_char = TOKENS / max(len(text), 1)
    costs = [(len(line) + 1) * per_char for line in lines]
    expected = _excerpt("c", lines, select_lines(scores, costs, goal, TRIM_CONTEXT_LINES), "c@s")
    assert Trimmer(analyzer).trim("c", text, "c@s", terms, goal, TOKENS) == expected


def test_caches_stay_bounded() -> None:
    trimmer = Trimmer(Analyzer(), cache_size=3)
    for goal in range(50, 60):
        trim(trimmer, "parser", goal)
    assert len(trimmer._excerpts) == 3


def test_mask_is_stable_and_names_the_stash() -> None:
    masked = mask_text("log", LOG, "log@abc", TOKENS)
    assert masked == mask_text("log", LOG, "log@abc", TOKENS)
    assert masked.startswith("[ctxopt: masked log (800 tokens); full text in stash log@abc]")
    assert "line 0" in masked and "line 79: ok" in masked and len(masked) < len(LOG)


def plain_ranged_excerpt(lines: list[str], kept: list[int]) -> str:
    """The definition of a line excerpt: line by line, a mark for each gap."""
    out = [f"[ctxopt: excerpt of c, {len(kept)} of {len(lines)} lines; the rest in stash s]"]
    previous = -1
    for line in [*kept, len(lines)]:
        if line > previous + 1:
            first, last = previous + 2, line
            out.append(f"[... lines {first if first == last else f'{first}-{last}'} dropped ...]")
        if line < len(lines):
            out.append(lines[line])
        previous = line
    return "\n".join(out)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.booleans(), max_size=40), st.sampled_from(["x", "", "  y = 1"]))
def test_a_line_excerpt_copies_runs_of_kept_lines_as_its_lines_plain_definition(
    keeps: list[bool], line: str
) -> None:
    """Each run of kept lines copied as one slice: still the excerpt the
    line-by-line definition writes, gaps at the start, the end and between."""
    lines = [f"{line}{i}" for i in range(len(keeps))]
    kept = [i for i, keep in enumerate(keeps) if keep]
    assert ranged_excerpt("c", lines, kept, "s") == plain_ranged_excerpt(lines, kept)
