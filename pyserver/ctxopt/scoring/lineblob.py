"""A text's line facts, kept beside it in the store.

A session's first plan after a restart spent most of its time making again
what `line_value` knows of each text without any query: the code names of
every model text and tool output, the line numbers each model text cites,
and each tool output's line profile (its lines' own numbers, error lines and
enclosing headers). A plan that made them stores them with their chunk
(`Engine.optimize`, `LiveSessions.keep_line_facts`), and a restart tells them
to `line_value`'s caches (`tell`) instead of making them again.

As with `text/termblob.py`, a blob is trusted only when everything it
depends on matches: its format, the rules (the facts of a probe text every
rule changes), the text (a digest) and its own checksum; anything else
decodes to None and the facts are made from the text when a plan asks.

Layout, little-endian: magic `CL`, format (1 byte), rules digest (8), text
digest (8), which facts it holds (1 byte: `NAMES`, `CITED`, `PROFILE`), six
counts (uint32): lines, numbered lines, error lines, lines under a header,
cited numbers, names; then int64s: the numbered lines, their numbers, the
error lines, the lines under a header, their headers, the cited numbers;
then the names in UTF-8 joined by NUL (a name is ASCII code: never one);
and a checksum (8) of everything before it.
"""

from __future__ import annotations

import marshal
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from ctxopt.scoring.line_value import (
    LineProfile,
    cited_memo,
    cited_numbers,
    names,
    names_memo,
    profile,
    profile_memo,
)
from ctxopt.text.sealed import DIGEST, digest, opened, packed, seal, text_digest, unpacked

FORMAT = 1
NAMES, CITED, PROFILE = 1, 2, 4
_MAGIC = b"CL"
_HEAD = struct.Struct(f"<2sB{DIGEST}s{DIGEST}sB6I")
_KEPT_MAGIC = b"CK"
_KEPT_HEAD = struct.Struct(f"<2sB{DIGEST}s{DIGEST}s")
_INT64 = range(-(1 << 63), 1 << 63)
# Numbered lines, a traceback, a header stack, paths and names, cited ranges:
# every rule of `line_value` changes the facts of this text.
_PROBE = (
    "   10\tclass Cart(Base):\n   11\t    def total_price(self):\n"
    '  File "src/app/main.py", line 42, in parse_config\nValueError: bad os.path.join\n'
    "FAILED tests/test_cart.py::test_total - AssertionError\nE   assert 1 == 2\n"
    "sed -n '120,140p' cart.py; see line 7 and cart.py:9 for HTTPServer2 snake_case_name"
)


@dataclass(frozen=True, slots=True)
class TextFacts:
    """What is known of one text's line facts (None: not made)."""

    names: frozenset[str] | None = None
    cited: frozenset[int] | None = None
    profile: LineProfile | None = None

    @property
    def held(self) -> int:
        """Which facts these are, as `NAMES | CITED | PROFILE` bits."""
        return (
            (NAMES if self.names is not None else 0)
            | (CITED if self.cited is not None else 0)
            | (PROFILE if self.profile is not None else 0)
        )


def remembered(text: str) -> TextFacts:
    """The facts of `text` this process has made or been told (nothing made here)."""
    return TextFacts(names_memo.peek(text), cited_memo.peek(text), profile_memo.peek(text))


def tell(told: Sequence[tuple[str, TextFacts]]) -> None:
    """Put each text's facts where `line_value` looks for them, as if it had
    made them (in order; each cache taken once, not per text and fact)."""
    names_memo.tell_many([(text, f.names) for text, f in told if f.names is not None])
    cited_memo.tell_many([(text, f.cited) for text, f in told if f.cited is not None])
    profile_memo.tell_many([(text, f.profile) for text, f in told if f.profile is not None])


def _body(rules: bytes, text: str, facts: TextFacts, *, ordered: bool = False) -> bytes | None:
    """The blob less its checksum; None when a number does not fit an int64.
    The names go in set order unless `ordered` (the rules' probe: its digest
    must not depend on the process's string hashing)."""
    held = facts.held
    known = facts.profile.all_names if facts.profile is not None else facts.names
    found = (sorted(known) if ordered else list(known)) if known is not None else []
    n_lines = 0
    numbered: list[int] = []
    numbers: list[int] = []
    errors: list[int] = []
    under: list[int] = []
    headers: list[int] = []
    if facts.profile is not None:
        # most outputs print no line numbers and have no header: skip their lines
        p = facts.profile
        n_lines = len(p.lines)
        if p.all_numbers:
            numbered = [i for i, own in enumerate(p.numbers) if own is not None]
            numbers = [own for own in p.numbers if own is not None]
        errors = sorted(p.errors)
        if p.headers.count(None) != n_lines:
            under = [i for i, h in enumerate(p.headers) if h is not None]
            headers = [h for h in p.headers if h is not None]
    cited = sorted(facts.cited) if facts.cited is not None else []
    values = numbers + cited
    if values and (min(values) < _INT64.start or max(values) >= _INT64.stop):
        return None
    ints = [*numbered, *numbers, *errors, *under, *headers, *cited]
    counts = (n_lines, len(numbered), len(errors), len(under), len(cited), len(found))
    head = _HEAD.pack(_MAGIC, FORMAT, rules, text_digest(text), held, *counts)
    return head + packed("q", ints) + "\0".join(found).encode("utf-8")


class LineBlobs:
    """Encodes and decodes the blobs of this process's line rules (thread-safe)."""

    def __init__(self) -> None:
        probe = TextFacts(names(_PROBE), cited_numbers(_PROBE), profile(_PROBE))
        probe_body = _body(b"\0" * DIGEST, _PROBE, probe, ordered=True)
        assert probe_body is not None
        self._rules = digest(bytes([FORMAT]) + probe_body)

    def encode(self, text: str, facts: TextFacts) -> bytes | None:
        """The blob of `facts` (made from `text`); None when there is nothing
        to keep or a number does not fit."""
        if not facts.held:
            return None
        body = _body(self._rules, text, facts)
        return None if body is None else seal(body)

    def decode(self, text: str, blob: bytes | None) -> TextFacts | None:
        """The facts `blob` holds for `text`, None when it cannot be trusted."""
        body = opened(blob, head_size=_HEAD.size)
        if body is None:
            return None
        magic, version, rules, of_text, held, *counts = _HEAD.unpack_from(body)
        if (magic, version, rules) != (_MAGIC, FORMAT, self._rules) or held & ~7 or not held:
            return None
        n_lines, n_numbered, n_errors, n_under, n_cited, n_names = counts
        ints_end = _HEAD.size + 8 * (2 * n_numbered + n_errors + 2 * n_under + n_cited)
        if ints_end > len(body) or of_text != text_digest(text):
            return None
        ints = unpacked("q", body[_HEAD.size : ints_end])
        try:
            joined = body[ints_end:].decode("utf-8")
        except UnicodeDecodeError:
            return None
        found = joined.split("\0") if n_names else []
        if len(found) != n_names or (not n_names and joined):
            return None
        # interned: made names are shared across texts (`line_value`'s cache of
        # each match), and a restart's decoded ones should weigh no more
        known = frozenset(map(sys.intern, found))
        cited = frozenset(ints[len(ints) - n_cited :]) if held & CITED else None
        made = None
        if held & PROFILE:
            made = _profile(text, n_lines, ints, (n_numbered, n_errors, n_under), known)
            if made is None:
                return None
        return TextFacts(known if held & (NAMES | PROFILE) else None, cited, made)

    def encode_kept(self, facts: Sequence[TextFacts], chunks: bytes) -> bytes:
        """One blob of the facts of a session's live texts, in slot order, bound
        to the chunks whose digest is `chunks` (`text/indexblob.chunks_digest`):
        a restart reads them in one piece instead of a blob per text."""
        head = _KEPT_HEAD.pack(_KEPT_MAGIC, FORMAT, self._rules, chunks)
        return seal(head + marshal.dumps([_kept(f) for f in facts]))

    def kept_facts(self, blob: bytes | None, chunks: bytes) -> bytes | None:
        """The marshalled facts of a kept blob that may be trusted (`read_kept`
        tells whether they fit the texts), else None."""
        body = opened(blob, head_size=_KEPT_HEAD.size)
        if body is None:
            return None
        if _KEPT_HEAD.unpack_from(body) != (_KEPT_MAGIC, FORMAT, self._rules, chunks):
            return None
        return body[_KEPT_HEAD.size :]


def read_kept(texts: Sequence[str], facts: bytes) -> list[TextFacts | None] | None:
    """The facts of `LineBlobs.kept_facts`'s bytes, None when they do not fit `texts`."""
    try:
        kept = marshal.loads(facts)
        if len(kept) != len(texts):
            return None
        return [_told(text, k) for text, k in zip(texts, kept, strict=True)]
    except (ValueError, TypeError, EOFError):
        return None


# One text's facts in a session's kept blob: which are held, the names, the
# cited numbers, and the profile's per-line numbers, error lines and headers.
_Lines = tuple[tuple[int | None, ...], tuple[int, ...], tuple[int | None, ...]]
Kept = tuple[int, tuple[str, ...], tuple[int, ...], _Lines | tuple[()]] | None


def _kept(facts: TextFacts) -> Kept:
    held = facts.held
    if not held:
        return None
    known = facts.profile.all_names if facts.profile is not None else facts.names
    p = facts.profile
    lines = () if p is None else (p.numbers, tuple(sorted(p.errors)), p.headers)
    return (held, tuple(known or ()), tuple(facts.cited or ()), lines)


def _told(text: str, kept: Kept) -> TextFacts | None:
    """The facts `kept` describes of `text` (as `LineBlobs.decode` makes them);
    ValueError or TypeError when they do not fit it."""
    if kept is None:
        return None
    held, found, cited, profiled = kept
    if held & ~7 or not held:
        raise ValueError("held: not a set of facts")
    known = frozenset(map(sys.intern, found))
    made = None
    if held & PROFILE:
        numbers, errors, headers = profiled  # type: ignore[misc]
        lines = tuple(text.split("\n"))
        if not len(lines) == len(numbers) == len(headers):
            raise ValueError("profile: not of this text")
        own = frozenset(n for n in numbers if n is not None)
        made = LineProfile(lines, numbers, frozenset(errors), known, own, headers)
    return TextFacts(
        known if held & (NAMES | PROFILE) else None,
        frozenset(cited) if held & CITED else None,
        made,
    )


def _profile(
    text: str, n_lines: int, ints: list[int], counts: tuple[int, int, int], known: frozenset[str]
) -> LineProfile | None:
    """The profile the ints describe, None when they do not fit the text."""
    lines = tuple(text.split("\n"))
    n_numbered, n_errors, n_under = counts
    if n_lines != len(lines):
        return None
    at = 2 * n_numbered
    numbered, numbers = ints[:n_numbered], ints[n_numbered:at]
    errors = ints[at : at + n_errors]
    at += n_errors
    under, headers = ints[at : at + n_under], ints[at + n_under : at + 2 * n_under]
    places = ints[: at + 2 * n_under]
    del places[n_numbered : 2 * n_numbered]  # the numbers themselves may be anything
    if places and (min(places) < 0 or max(places) >= n_lines):
        return None
    own: list[int | None] = [None] * n_lines
    for i, number in zip(numbered, numbers, strict=True):
        own[i] = number
    enclosing: list[int | None] = [None] * n_lines
    for i, header in zip(under, headers, strict=True):
        enclosing[i] = header
    return LineProfile(
        lines, tuple(own), frozenset(errors), known, frozenset(numbers), tuple(enclosing)
    )
