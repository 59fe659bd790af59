"""Text -> BM25 terms, for chat and code alike.

A text is cut into raw tokens (runs of word characters; with identifier
splitting, `.` and `/` inside identifiers and paths too); each distinct raw
token is analysed once and its terms cached, so the hot path is a byte
translate, a split and one dict lookup per token. Analysing a raw token:

1. (optional, off by default) identifiers are split into their parts
   (`snake_case`, `camelCase`, `HTTPServer`, `os.path.join`,
   `src/app/main.py`); a compound identifier also keeps its whole, lowercased
   form (and each compound path component, e.g. `main.py`);
2. words are lowercased; English stopwords are dropped;
3. words are stemmed with Snowball English (PyStemmer).

benchmarks/analyzer_ablation.py measures each step on the development data
(BM25-only selection). Stopwords and stemming pay on LoCoMo (evidence recall
at a 30% budget: 0.812 plain -> 0.867 with both; without stemming 0.809,
without stopwords 0.858). Identifier splitting changed no LoCoMo figure and
did not help on the SWE-agent trajectories (hunk MRR 0.459 without it,
0.430 with it; coverage within noise), so it is off by default: the plain
word split already cuts dotted and slashed names, and an issue names an
identifier the way the code spells it. With all three steps off the analyzer
is plain lowercase `\\w+` splitting.
"""

from __future__ import annotations

import operator
import re
import threading
from collections import Counter
from itertools import chain, compress

import Stemmer

# Snowball's English stop list, plus contraction fragments left when `'` splits
# a word ("don't" -> "don", "t").
_STOPWORD_TEXT = """
    i me my myself we our ours ourselves you your yours yourself yourselves he him
    his himself she her hers herself it its itself they them their theirs themselves
    what which who whom this that these those am is are was were be been being have
    has had having do does did doing would should could ought a an the and but if or
    because as until while of at by for with about against between into through
    during before after above below to from up down in out on off over under again
    further then once here there when where why how all any both each few more most
    other some such no nor not only own same so than too very s t d ll m re ve y can
    will just don doesn didn isn aren wasn weren hasn haven hadn won wouldn shan
    shouldn couldn mustn mightn needn let
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

MAX_TERM_CHARS = 80  # longer runs (hashes, base64) are cut: they still match themselves
MAX_CACHED_TOKEN_BYTES = 256  # longer raw tokens are too rare to be worth remembering
MAX_CACHE_ENTRIES = 300_000  # distinct raw tokens; the cache starts over beyond this


def _separator_table(keep: bytes) -> bytes:
    """A bytes.translate table mapping every ASCII byte that cannot be part of a
    raw token to a space (non-ASCII bytes pass: the slow path splits them)."""
    word = set(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_" + keep)
    return bytes(b if b >= 0x80 or b in word else 0x20 for b in range(256))


_IDENTIFIER_TABLE = _separator_table(b"./")
_WORD_TABLE = _separator_table(b"")
_IDENTIFIER_RUN = re.compile(r"[\w./]+")
_WORD_RUN = re.compile(r"\w+")
_SEGMENT_SEPARATOR = re.compile(r"[._/]+")
# camelCase parts: "HTTPServerError2" -> HTTP, Server, Error2
_CAMEL_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z]+")


class _TermCache(dict[bytes, tuple[str, ...]]):
    """raw token -> its terms; a miss analyses the token (called from C by
    dict lookups, so hits never run Python code)."""

    def __init__(self, analyze: _TokenAnalyzer) -> None:
        super().__init__()
        # a bound method: calling an instance's `__call__` from here cost a
        # slot lookup per miss, and a new text's thousands of words each miss once
        self._analyze = analyze.terms_of

    def __missing__(self, raw: bytes) -> tuple[str, ...]:
        terms = self._analyze(raw)
        if len(raw) <= MAX_CACHED_TOKEN_BYTES:
            if len(self) >= MAX_CACHE_ENTRIES:
                self.clear()
            self[raw] = terms
        return terms


class _TokenAnalyzer:
    """The slow path: the terms of one raw token."""

    def __init__(self, split_identifiers: bool, stopwords: bool, stem: bool) -> None:
        self.split_identifiers = split_identifiers
        self.stopwords = stopwords
        # PyStemmer's own cache (10,000 words by default) only doubles the cost
        # of a miss: every word stemmed here is then cached per raw token above.
        self._stemmer = Stemmer.Stemmer("english", 0) if stem else None
        self._stem_lock = threading.Lock()  # PyStemmer objects are not thread-safe

    def terms_of(self, raw: bytes) -> tuple[str, ...]:
        text = raw.decode("utf-8", "surrogatepass")
        if not text.isascii():
            run = _IDENTIFIER_RUN if self.split_identifiers else _WORD_RUN
            return tuple(t for piece in run.findall(text) for t in self._run_terms(piece))
        if self.split_identifiers:
            return self._run_terms(text)
        # one ASCII word, `_words([text])` (most raw tokens), written out here:
        # a new text's distinct words each come through once
        lowered = text.lower()[:MAX_TERM_CHARS]
        if self.stopwords and lowered in STOPWORDS:
            return ()
        if self._stemmer is None:
            return (lowered,)
        with self._stem_lock:
            return (self._stemmer.stemWord(lowered),)

    def _run_terms(self, run: str) -> tuple[str, ...]:
        if not self.split_identifiers:
            return self._words([run])
        core = run.strip("./")
        leaves = [
            part
            for segment in _SEGMENT_SEPARATOR.split(core)
            for part in self._camel_parts(segment)
        ]
        if len(leaves) <= 1:
            return self._words(leaves)
        wholes = [core.lower()[:MAX_TERM_CHARS]]
        if "/" in core:
            wholes += [
                c.lower()[:MAX_TERM_CHARS]
                for c in core.split("/")
                if len(_SEGMENT_SEPARATOR.split(c)) > 1 or len(self._camel_parts(c)) > 1
            ]
        return (*dict.fromkeys(wholes), *self._words(leaves))

    @staticmethod
    def _camel_parts(segment: str) -> list[str]:
        if not segment:
            return []
        if segment.isascii() and not segment.islower() and not segment.isupper():
            return _CAMEL_PART.findall(segment)
        return [segment]

    def _words(self, words: list[str]) -> tuple[str, ...]:
        lowered = [w.lower()[:MAX_TERM_CHARS] for w in words]
        if self.stopwords:
            lowered = [w for w in lowered if w not in STOPWORDS]
        if self._stemmer is None or not lowered:
            return tuple(lowered)
        with self._stem_lock:
            return tuple(self._stemmer.stemWords(lowered))


class Analyzer:
    """Turns text into BM25 terms (thread-safe; terms of each distinct raw
    token are computed once and cached).

    `split_identifiers`: split snake_case, camelCase, dotted and slashed
    names into parts and keep the whole of a compound one as an extra term
    (off by default: it did not pay on the development data, see above).
    `stopwords`: drop English stopwords. `stem`: Snowball English stemming.
    All three off: lowercase `\\w+` words.
    """

    def __init__(
        self, *, split_identifiers: bool = False, stopwords: bool = True, stem: bool = True
    ) -> None:
        self._options = (split_identifiers, stopwords, stem)
        self._table = _IDENTIFIER_TABLE if split_identifiers else _WORD_TABLE
        self._cache = _TermCache(_TokenAnalyzer(split_identifiers, stopwords, stem))

    def with_identifier_parts(self) -> Analyzer:
        """This analyzer with identifier splitting on (itself when it splits already).

        >>> Analyzer().with_identifier_parts().terms("parseConfig")
        ['parseconfig', 'pars', 'config']
        """
        split, stopwords, stem = self._options
        return self if split else Analyzer(split_identifiers=True, stopwords=stopwords, stem=stem)

    def raw_tokens(self, text: str) -> list[bytes]:
        """The runs of `text` whose terms `terms` looks up, in order (UTF-8).

        >>> Analyzer().raw_tokens("Don't panic: ünïcode")
        [b'Don', b't', b'panic', b'\\xc3\\xbcn\\xc3\\xafcode']
        """
        return text.encode("utf-8", "surrogatepass").translate(self._table).split()

    def terms(self, text: str) -> list[str]:
        """The terms of `text` in order (a term repeats as often as it occurs)."""
        return list(chain.from_iterable(map(self._cache.__getitem__, self.raw_tokens(text))))

    def term_counts(self, text: str) -> tuple[list[str], list[int]]:
        """The distinct terms of `text` in first-occurrence order and how often
        each occurs: `Counter(self.terms(text))`'s keys and values, counted as
        the lookups give them (no list of every term in between; an append
        analyses every new text this way).

        >>> Analyzer().term_counts("the cats and a cat, cats")
        (['cat'], [3])
        """
        counted = Counter(chain.from_iterable(map(self._cache.__getitem__, self.raw_tokens(text))))
        return list(counted), list(counted.values())

    def line_postings(self, text: str, terms: frozenset[str]) -> dict[str, tuple[int, ...]]:
        """Per term of `terms` the text holds, the numbers of the lines
        (`text.split("\\n")`) holding it: what `terms` of each line gives,
        reached without analysing line by line. The text's distinct raw tokens
        are analysed in C (cache lookups); only the few whose terms are wanted
        are looked up in place (a raw token never spans a line: a newline
        separates tokens).

        >>> Analyzer().line_postings("a cat\\nno\\ncats here", frozenset({"cat", "dog"}))
        {'cat': (0, 2)}
        """
        encoded = text.encode("utf-8", "surrogatepass")
        translated = encoded.translate(self._table)
        distinct = list(set(translated.split()))
        held = map(terms.isdisjoint, map(self._cache.__getitem__, distinct))
        found: dict[str, set[int]] = {}
        for raw in compress(distinct, map(operator.not_, held)):
            numbers = _token_lines(translated, encoded, raw)
            for term in terms.intersection(self._cache[raw]):
                found.setdefault(term, set()).update(numbers)
        return {term: tuple(sorted(lines)) for term, lines in found.items()}


def _token_lines(translated: bytes, encoded: bytes, raw: bytes) -> list[int]:
    """The line numbers of the whole-token occurrences of `raw` in
    `translated` (where a space is the only separator left)."""
    numbers: list[int] = []
    line, counted = 0, 0  # the line number at byte `counted`
    end = len(translated)
    at = translated.find(raw)
    while at >= 0:
        after = at + len(raw)
        if (at == 0 or translated[at - 1] == 0x20) and (after == end or translated[after] == 0x20):
            line += encoded.count(b"\n", counted, at)
            counted = at
            numbers.append(line)
        at = translated.find(raw, after)
    return numbers
