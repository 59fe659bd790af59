"""Lines that other chunks repeat: the trail an agent leaves through its history.

An agent reads a file, then quotes the lines it will change in its next
command; a later run of the same command or a later view of the same region
prints the same lines again. A line (stripped, at least ECHO_MIN_CHARS long)
that two live chunks hold is an *echo*; its *owner* is the latest chunk that
holds it. Three signals follow:

- anchors: the echo lines a chunk owns. They are what an excerpt keeps
  verbatim (the lines the work points at, once each, in their newest copy);
- links: the lines that hold a rare term of the query (the current step's
  paths, identifiers, line numbers; rare: few chunks of the session hold it).
  They are kept verbatim beside the anchors;
- repeated share: the share of a chunk's keyed characters that a later chunk
  holds too. An output printed again later (the same command run again, the
  same file region viewed again, an exact duplicate) carries nothing new;
- quoted: a chunk from outside the model (a tool output, a user message)
  one of whose lines a later model chunk wrote out (the line an edit
  replaces, the code a step reasons about). The agent works from that
  output, and quotes it again: on the development trajectories an output the
  model has quoted holds three times the later-needed lines per token of one
  it has not. The mark stays when the quoting chunk goes.

`LineBook` keeps, per session, which live slots hold each line, updated
incrementally: a plan re-reads only chunks whose text changed since the last.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from operator import is_
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ctxopt.model import Chunk, Role
from ctxopt.text.book_state import first_places, fresh_quoted
from ctxopt.text.lines import text_lines

UNKNOWN, NONE = -2.0, -1.0  # LineBook.excerpts: not computed yet, no excerpt
_NONE: frozenset[int] = frozenset()

FloatArray = npt.NDArray[np.float64]


class Slotted(Protocol):
    """A live chunk at its slot (a session's entry)."""

    @property
    def chunk(self) -> Chunk: ...

    @property
    def slot(self) -> int: ...


class LineBook:
    """Which live slots of one session hold each keyed line."""

    def __init__(self) -> None:
        self.text: dict[int, str] = {}  # slot -> the text indexed for it
        self.holders: dict[str, set[int]] = defaultdict(set)
        # key -> its latest holder, kept while its holders stay: a line many
        # chunks hold is asked for by each of them, and max() over its holders
        # each time made a session's first plan quadratic in them
        self._latest: dict[str, int] = {}
        # the keys two or more live slots hold: the only ones that make an
        # anchor, a quote or a repeat, so a slot's answers read only these
        # (most of a text's lines are its own)
        self._shared: set[str] = set()
        self.quoted: set[int] = set()  # slots a later model chunk quoted a line of
        self._by_model: set[int] = set()  # slots the model wrote (never marked quoted)
        # shared key -> how many slots the model wrote hold it (absent: none):
        # whether another of them holds a slot's line is one lookup (a set
        # operation over the holders of a line thousands of chunks hold took
        # ~12 ms per 1,000 chunks at 10,000)
        self._model_held: Counter[str] = Counter()
        self._anchors: dict[int, tuple[int, ...]] = {}  # slot -> cached anchors
        self._quoted_lines: dict[int, frozenset[int]] = {}  # slot -> cached quoted lines
        self._repeated: dict[int, float] = {}
        # excerpts: per slot its tokens (NONE: no excerpt, UNKNOWN: to compute)
        self._excerpt_key: object = None
        self._excerpt_tokens: FloatArray = np.zeros(0, dtype=np.float64)
        self._excerpt_text: dict[int, str] = {}
        self._owns: npt.NDArray[np.int8] = np.zeros(0, dtype=np.int8)  # -1 unknown, 0, 1
        self._repeated_all: tuple[int, FloatArray] | None = None
        # slots whose repeated share may differ from `_repeated_all`'s
        self._repeat_stale: set[int] = set()
        # slots whose cached anchors or quoted lines were forgotten since the
        # last `take_moved` (True: every slot's): a plan re-checks only those
        self._moved: set[int] = set()
        self._moved_all = True
        self.version = 0  # bumps on every change
        self._synced_index = -1  # the session index version last synced with
        self._synced: tuple[Slotted, ...] = ()  # the live chunks last synced, in order

    def sync(self, index_version: int, live_chunks: Iterable[Slotted]) -> None:
        """Bring the book up to a session's live chunks (changed texts only);
        `index_version` is its text index's version: every change of a chunk's
        text goes through that index, so an unchanged version needs no work.
        The chunks come in the session's order (an added one last, a replaced
        one a new object): when the last synced lead them, only the rest are
        read (a pass over every chunk was ~0.5 ms a plan at 1,000 chunks)."""
        if index_version == self._synced_index:
            return
        self._synced_index = index_version
        now, last = tuple(live_chunks), self._synced
        self._synced = now
        grew = 0 < len(last) <= len(now) and now[len(last) - 1] is last[-1]
        if self.text and grew and all(map(is_, last, now)):
            self._sync_changed([(e.slot, e.chunk) for e in now[len(last) :]], set())
            return
        live = {e.slot: e.chunk for e in now}
        if not self.text:
            self._fill(live)
            return
        touched: set[str] = set()
        for slot in [s for s in self.text if s not in live]:
            touched |= self._drop(slot)
        self._sync_changed(list(live.items()), touched)

    def _sync_changed(self, candidates: list[tuple[int, Chunk]], touched: set[str]) -> None:
        """Hold the candidates whose text changed; `touched`: keys already stale."""
        changed = [(slot, c) for slot, c in candidates if self.text.get(slot) is not c.text]
        # a line's new holder above all its holders (an append) stales only its
        # previous latest holder's anchors and repeat (each other holder had a
        # later holder already), and, when the model wrote it, each holder's
        # quoted lines: an append then re-checks a few slots, not every holder
        # of every line it repeats
        was_latest: set[int] = set()
        quoting: set[str] = set()  # lines whose holders' quoted lines are stale
        quoting_model: set[str] = set()  # ... whose model holders' are
        # in slot order, so a model chunk finds the earlier chunks it quotes
        for slot, chunk in sorted(changed, key=lambda pair: pair[0]):
            if slot in self.text:
                touched |= self._drop(slot)
            by_model = chunk.role == Role.MODEL
            keys, above = self._add(slot, chunk.text, by_model, was_latest)
            if by_model:
                self._mark_quoted(slot, keys)
                # a holder's quoted lines change only where the model's count of
                # a line went 0 -> 1 (for the others) or 1 -> 2 (for the model's
                # holder): ~20 -> ~1 outputs re-read a plan at ~1,200 chunks
                model_held = self._model_held
                quoting.update(key for key in above if model_held[key] == 1)
                quoting_model.update(key for key in above if model_held[key] == 2)
            touched |= keys - above
        # once per sync, not per chunk: a line many chunks hold would make a
        # first sync quadratic
        self._touch(touched)
        for slot in was_latest:
            self._forget_placement(slot)
        holders = self.holders
        stale = set().union(*(holders[key] for key in quoting if key in holders))
        stale.update(*(holders[key] & self._by_model for key in quoting_model if key in holders))
        for slot in stale:
            self._quoted_lines.pop(slot, None)
            self._moved.add(slot)

    def _fill(self, live: dict[int, Chunk]) -> None:
        """`sync` of a book that holds nothing (a session's first plan, a
        restart's): ~40% of a restart's first sync went to undoing answers no
        one had asked and to finding each line's latest holder among holders
        added in slot order. In slot order the slot being added is above every
        holder of its lines, so it is their latest and a model chunk quotes
        every holder so far that the model did not write. Any answer still
        cached is of a slot that went, so all are forgotten at once."""
        self._forget_all()
        text, holders, latest, shared = self.text, self.holders, self._latest, self._shared
        by_model, quoted, model_held = self._by_model, self.quoted, self._model_held
        for slot in sorted(live):
            chunk = live[slot]
            text[slot] = chunk.text
            keys = text_lines(chunk.text).distinct
            is_model = chunk.role == Role.MODEL
            if is_model:
                by_model.add(slot)
                for key in keys:
                    held = holders.get(key)
                    if held is not None:
                        quoted |= held - by_model
            for key in keys:
                held = holders.get(key)
                if held is None:
                    holders[key] = {slot}
                else:
                    held.add(slot)
                    latest[key] = slot  # kept for lines two or more hold, as `_add` does
                    if len(held) == 2:
                        shared.add(key)
                        if not held.isdisjoint(by_model):
                            model_held[key] = len(held & by_model)
                    elif is_model:
                        model_held[key] += 1
        self._repeat_stale.update(text)

    def _forget_all(self) -> None:
        """Every slot's cached answers are stale."""
        self.version += 1
        self._anchors.clear()
        self._quoted_lines.clear()
        self._moved_all = True
        self._repeated.clear()
        self._repeated_all = None
        self._repeat_stale = set()
        self._excerpt_key = None
        self._excerpt_text.clear()
        self._owns = np.zeros(0, dtype=np.int8)

    def _touch(self, keys: set[str]) -> None:
        """Cached answers of every slot sharing these keys are stale."""
        self.version += 1
        holders = self.holders
        # each slot once: a line held by many slots would visit each per line
        for slot in set().union(*(holders[key] for key in keys if key in holders)):
            self._quoted_lines.pop(slot, None)
            self._forget_placement(slot)

    def _forget_placement(self, slot: int) -> None:
        """The slot's answers that depend on which holder of a line is the
        latest (its anchors, repeat, excerpt) are stale."""
        self._anchors.pop(slot, None)
        self._moved.add(slot)
        self._repeated.pop(slot, None)
        self._repeat_stale.add(slot)
        self._forget_excerpt(slot)

    def _forget_excerpt(self, slot: int) -> None:
        if slot < len(self._excerpt_tokens):
            self._excerpt_tokens[slot] = UNKNOWN
        if slot < len(self._owns):
            self._owns[slot] = -1
        self._excerpt_text.pop(slot, None)

    def take_moved(self) -> set[int] | None:
        """The slots whose anchors or quoted lines may have changed since the
        last call (None: any slot's), and start a new log. One reader per book
        (`planner.line_levels`)."""
        moved = None if self._moved_all else self._moved
        self._moved, self._moved_all = set(), False
        return moved

    def owns_anchors(self, n_slots: int) -> npt.NDArray[np.bool_]:
        """Per slot, whether it is the latest holder of some echo line."""
        if len(self._owns) < n_slots:
            grown = np.full(n_slots, -1, dtype=np.int8)
            grown[: len(self._owns)] = self._owns
            self._owns = grown
        owns = self._owns
        for slot in np.flatnonzero(owns[:n_slots] < 0).tolist():
            owns[slot] = 1 if slot in self.text and self.anchors(slot) else 0
        result: npt.NDArray[np.bool_] = owns[:n_slots] == 1
        return result

    def excerpts(
        self,
        wanted: npt.NDArray[np.bool_],
        key: object,
        make: Callable[[int], tuple[str, int] | None],
    ) -> FloatArray:
        """Per slot, the tokens of its excerpt (NONE when it has none), for the
        slots `wanted` marks: `make(slot)` runs only for slots whose text or
        anchors changed since it last ran with this `key`; `excerpt_text`
        gives the text."""
        n = len(wanted)
        if key != self._excerpt_key:
            self._excerpt_key = key
            self._excerpt_tokens = np.full(n, UNKNOWN, dtype=np.float64)
            self._excerpt_text.clear()
        elif len(self._excerpt_tokens) < n:
            grown = np.full(n, UNKNOWN, dtype=np.float64)
            grown[: len(self._excerpt_tokens)] = self._excerpt_tokens
            self._excerpt_tokens = grown
        tokens = self._excerpt_tokens
        for slot in np.flatnonzero(wanted & (tokens[:n] == UNKNOWN)).tolist():
            made = make(slot)
            if made is None:
                tokens[slot] = NONE
            else:
                self._excerpt_text[slot], tokens[slot] = made
        return tokens[:n]

    def excerpt_text(self, slot: int) -> str:
        return self._excerpt_text[slot]

    def _add(
        self, slot: int, text: str, by_model: bool, was_latest: set[int]
    ) -> tuple[frozenset[str], frozenset[str]]:
        """Hold the slot's lines (`by_model`: the model wrote them); returns
        them, and those of them it holds above every other holder (their
        previous latest holders are added to `was_latest`; every holder of the
        other lines has stale answers)."""
        self.version += 1
        if by_model:
            self._by_model.add(slot)
        self.text[slot] = text
        keys = text_lines(text).distinct
        self._anchors.pop(slot, None)  # answered while the slot was empty or held another text
        self._quoted_lines.pop(slot, None)
        self._moved.add(slot)
        self._repeated.pop(slot, None)
        self._repeat_stale.add(slot)
        self._forget_excerpt(slot)
        latest, holders, shared = self._latest, self.holders, self._shared
        model, model_held = self._by_model, self._model_held
        above: list[str] = []
        for key in keys:
            held = holders[key]
            if held:
                before = self._latest_holder(key)
                if before < slot:
                    above.append(key)
                    was_latest.add(before)
                    latest[key] = slot
                else:
                    latest.pop(key, None)
            held.add(slot)
            if len(held) == 2:
                shared.add(key)
                if not held.isdisjoint(model):
                    model_held[key] = len(held & model)
            elif by_model and len(held) > 2:
                model_held[key] += 1
        return keys, frozenset(above)

    def _mark_quoted(self, slot: int, keys: frozenset[str]) -> None:
        by_model = self._by_model
        for key in keys & self._shared:
            self.quoted.update(h for h in self.holders[key] if h < slot and h not in by_model)

    def quoted_mask(self, n_slots: int) -> npt.NDArray[np.bool_]:
        """Per slot, whether a later model chunk quoted one of its lines."""
        mask = np.zeros(n_slots, dtype=bool)
        mask[[s for s in self.quoted if s < n_slots]] = True
        return mask

    def _drop(self, slot: int) -> frozenset[str]:
        """Forget the slot's lines; returns them (their holders' answers are stale)."""
        keys = text_lines(self.text.pop(slot)).distinct
        self.quoted.discard(slot)
        by_model = slot in self._by_model
        self._by_model.discard(slot)
        model_held = self._model_held
        for key in keys:
            holders = self.holders[key]
            holders.discard(slot)
            self._latest.pop(key, None)
            if len(holders) < 2:
                self._shared.discard(key)
                model_held.pop(key, None)
            elif by_model:
                if model_held[key] > 1:
                    model_held[key] -= 1
                else:
                    del model_held[key]
            if not holders:
                del self.holders[key]
        self._anchors.pop(slot, None)
        self._quoted_lines.pop(slot, None)
        self._forget_placement(slot)
        return keys

    def anchors(self, slot: int) -> tuple[int, ...]:
        """Line numbers of the echo lines this slot owns (it is their latest holder)."""
        found = self._anchors.get(slot)
        if found is not None:
            return found
        lines = text_lines(self.text[slot])
        latest, holder = self._latest, self._latest_holder  # inlined: ~16,000 calls at 10,000
        owned = {
            k
            for k in lines.distinct & self._shared
            if (latest[k] if k in latest else holder(k)) == slot
        }
        result = tuple(n for n, key in enumerate(lines.keys) if key in owned) if owned else ()
        self._anchors[slot] = result
        return result

    def _latest_holder(self, key: str) -> int:
        found = self._latest.get(key)
        if found is None:
            found = self._latest[key] = max(self.holders[key])
        return found

    def quoted_lines(self, slot: int) -> frozenset[int]:
        """Line numbers of this slot's lines that a chunk the model wrote also
        holds (the lines an edit replaces, the code a step reasons about)."""
        found = self._quoted_lines.get(slot)
        if found is not None:
            return found
        model_held = self._model_held
        # another slot the model wrote holds the line
        others = 1 if slot in self._by_model else 0
        lines = text_lines(self.text[slot])
        quoted = {k for k in lines.distinct & self._shared if model_held[k] > others}
        result = (
            frozenset(n for n, key in enumerate(lines.keys) if key in quoted) if quoted else _NONE
        )
        self._quoted_lines[slot] = result
        return result

    def repeated_share(self, slot: int) -> float:
        """The share of this slot's keyed characters a later live slot holds."""
        found = self._repeated.get(slot)
        if found is not None:
            return found
        lines = text_lines(self.text[slot])
        latest, holder = self._latest, self._latest_holder
        later = sum(
            len(k)
            for k in lines.distinct & self._shared
            if (latest[k] if k in latest else holder(k)) > slot
        )
        share = later / lines.key_chars if lines.key_chars else 0.0
        self._repeated[slot] = share
        return share

    def repeated(self, n_slots: int) -> FloatArray:
        """`repeated_share` of every slot (0 for dead ones): the last array
        with the slots whose share may have changed since made again (a copy:
        the last one may be held by a plan)."""
        cached = self._repeated_all
        if cached is not None and cached[0] == self.version and len(cached[1]) == n_slots:
            return cached[1]
        out = np.zeros(n_slots, dtype=np.float64)
        todo: Iterable[int] = self.text
        if cached is not None:
            # every slot held since was added through `_add`, so is stale
            size = min(n_slots, len(cached[1]))
            out[:size] = cached[1][:size]
            todo = self._repeat_stale
        text = self.text
        for slot in todo:
            if slot < n_slots:  # a slot removed past a compacted session's end is gone
                out[slot] = self.repeated_share(slot) if slot in text else 0.0
        self._repeat_stale = set()
        self._repeated_all = (self.version, out)
        return out

    # ---- kept with a session's last plan at a clean close (engine/kept_plans.py) ----

    def quoted_as_fresh(self) -> bool:
        """Whether it marks quoted the slots a book filled from its texts would."""
        return fresh_quoted(self.holders, self._shared, self._by_model) == self.quoted

    def state(self) -> tuple[Any, ...]:
        """The book's lines, marks and cached answers as plain data for
        `marshal`, without its texts (`restore` takes the texts loaded at its
        slots): what a restart's first sync and plan would make again. A line
        is kept as where a holder's text has it (its bytes were most of the
        book's: ~0.5 MB per 1,000 chunks)."""
        holders = {key: held for key, held in self.holders.items() if held}
        at = {key: i for i, key in enumerate(holders)}
        place = first_places(self.text)
        return (
            tuple(sorted(self.text)),
            tuple(map(place.__getitem__, holders)),
            tuple(map(len, holders)),
            tuple(map(tuple, holders.values())),
            tuple((at[key], slot) for key, slot in self._latest.items() if key in at),
            tuple(self.quoted),
            tuple(self._by_model),
            tuple((at[key], n) for key, n in self._model_held.items() if key in at),
            self._anchors,
            self._quoted_lines,
            self._repeated,
            (self._excerpt_key, self._excerpt_tokens.tobytes(), self._excerpt_text),
        )

    def restore(self, state: tuple[Any, ...], texts: dict[int, str]) -> None:
        """Hold `state()`'s book, of `texts` (slot -> the text loaded there, the
        ones it was made of), as a book synced to them; into a book holding
        nothing. ValueError, TypeError, IndexError when `state` is not one of
        these texts'."""
        slots, places, sizes, held, latest, quoted, by_model, model_held = state[:8]
        anchors, quoted_lines, repeated, (excerpt_key, excerpt_tokens, excerpt_text) = state[8:]
        if self.text or tuple(sorted(texts)) != slots:
            raise ValueError("restore: not a book of these texts into an empty one")
        keys = [texts[slot][at : at + size] for (slot, at), size in zip(places, sizes, strict=True)]
        holders: defaultdict[str, set[int]] = defaultdict(
            set, zip(keys, map(set, held), strict=True)
        )
        shared = {key for key, slots_of in zip(keys, held, strict=True) if len(slots_of) > 1}
        model = Counter({keys[i]: count for i, count in model_held})
        latest_of = {keys[i]: slot for i, slot in latest}
        tokens = np.frombuffer(excerpt_tokens, dtype=np.float64).copy()
        self._forget_all()  # nothing raises from here on: the book is whole or empty
        self.text, self.holders, self._shared = dict(texts), holders, shared
        self._model_held, self._latest = model, latest_of
        self.quoted, self._by_model = set(quoted), set(by_model)
        self._anchors, self._quoted_lines = dict(anchors), dict(quoted_lines)
        self._repeated = dict(repeated)
        self._repeat_stale = set(texts)
        self._excerpt_key, self._excerpt_text = excerpt_key, dict(excerpt_text)
        self._excerpt_tokens = tokens
