"""The code names a text holds: paths, dotted names, snake_case, camelCase.

A name is a match of `NAME` that `is_code_name` keeps, and a path also by
its tails (`a/b/query.py` -> also `b/query.py`, `query.py`). `NAME` matches
only the characters of `NAME_BYTES` and has no anchor or lookaround, so a
text's names are those of its maximal runs of them: `text_names` splits the
runs out in C and resolves each distinct run once per process
(`RunNames`), most of them plain words that name nothing.

>>> sorted(text_names("edit django/db/query.py then call compute_total(x) in Cart"))
['compute_total', 'db/query.py', 'django/db/query.py', 'query.py']
"""

from __future__ import annotations

import re
from itertools import chain

# A name worth matching: dotted or slashed paths, snake_case, camelCase or
# CapWords with an inner capital; plain words (`self`, `list`) match everywhere.
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[./][A-Za-z_][A-Za-z0-9_-]*)*")
# The characters `NAME` matches; a table turning every other byte into a space.
NAME_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./-"
RUN_BYTES = bytes(byte if byte in NAME_BYTES else 32 for byte in range(256))
_INNER_CAPITAL = re.compile(r"[a-z][A-Z]")
_INNER_CAPITAL_BYTES = re.compile(rb"[a-z][A-Z]")
# What every code name holds (`is_code_name`): one of these or an inner capital;
# a run with neither names nothing. One charset is found by a fast scan, an
# alternation is tried at every byte (4,400 instructions a run).
_MARK = re.compile(rb"[_./]")
MIN_NAME_CHARS = 4
# What a text naming nothing gets: one object for all of them. Every frozenset
# is tracked by the cyclic collector for as long as a cache holds it (a
# never-seen 1,000-chunk first plan left ~1,200 empty ones behind).
NO_NAMES: frozenset[str] = frozenset()
NAME_CACHE_SIZE = 65536  # distinct runs resolved, then forgotten all at once


def is_code_name(name: str) -> bool:
    if len(name) < MIN_NAME_CHARS:
        return False
    return "_" in name.strip("_") or "." in name or "/" in name or bool(_INNER_CAPITAL.search(name))


def runs(text: str) -> list[bytes]:
    """The text's maximal runs of `NAME_BYTES`, in order (a non-ASCII
    character's UTF-8 bytes are no run's)."""
    return text.encode("utf-8", "surrogatepass").translate(RUN_BYTES).split()


def resolve(run: bytes) -> tuple[str, ...]:
    """The code names one run of `NAME_BYTES` holds (no cache): each `NAME`
    match less its edge `./-`, a path also by its tails, those that are code
    names. One loop, no helper call per match (a third of a marked run's
    instructions were calls and iterator layers)."""
    if _MARK.search(run) is None and (run.islower() or _INNER_CAPITAL_BYTES.search(run) is None):
        return ()  # most runs: a plain word (no capital at all, the usual one) names nothing
    found: list[str] = []
    for match in NAME.findall(run.decode("ascii")):
        name = match.strip("./-")
        if "/" in name:
            parts = name.split("/")
            found.extend(filter(is_code_name, ["/".join(parts[i:]) for i in range(len(parts))]))
        elif is_code_name(name):
            found.append(name)
    return tuple(found)


class RunNames:
    """Every run resolved so far (up to `size`, then all forgotten at once):
    those naming nothing in a set a text's runs are taken out of in C, the
    others with their names. One `lru_cache` lookup per distinct run of each
    text (a bytes key is wrapped in a tuple, and an entry moved to the
    front) cost about as much as splitting the text. Thread-safe without a
    lock: the two containers only grow, and a full book is replaced, not
    cleared, so a caller's own reference stays whole."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._plain: set[bytes] = set()
        self._named: dict[bytes, tuple[str, ...]] = {}

    def of_text(self, text: str) -> frozenset[str]:
        """The code names `text` holds."""
        plain, named = self._plain, self._named
        # each a pass over the text's own runs (`difference_update` could walk `plain`)
        found = set(runs(text)).difference(plain)
        new = found.difference(named)
        for run in new:
            if not _filed(run, plain, named):
                found.discard(run)
        if new:
            self._bound(plain, named)
        return frozenset(chain.from_iterable(map(named.__getitem__, found))) or NO_NAMES

    def of_run(self, run: bytes) -> tuple[str, ...]:
        """The code names one run holds."""
        plain, named = self._plain, self._named
        if run in plain:
            return ()
        made = named.get(run)
        if made is None:
            made = _filed(run, plain, named)
            self._bound(plain, named)
        return made

    def _bound(self, plain: set[bytes], named: dict[bytes, tuple[str, ...]]) -> None:
        if len(plain) + len(named) > self._size:
            self._plain, self._named = set(), {}

    def clear(self) -> None:
        """Forget every run (a fresh process's state)."""
        self._plain, self._named = set(), {}


def _filed(run: bytes, plain: set[bytes], named: dict[bytes, tuple[str, ...]]) -> tuple[str, ...]:
    """A run not seen yet, resolved and filed in the caller's own book (a full
    book replaced meanwhile by another thread is not written to)."""
    made = resolve(run)
    if made:
        named[run] = made
    else:
        plain.add(run)
    return made


run_names = RunNames(NAME_CACHE_SIZE)
text_names = run_names.of_text
