"""What the gateway remembers of each conversation between calls, and the
rules that keep it consistent.

`ConversationState.lock` guards everything in a state except its
`Calibration`: the pipeline takes it once per request (`Pipeline._prepare`),
from parsing the body to the bytes that go upstream, so two calls of one
conversation never interleave. A state changes only through its methods; each
keeps the invariants: `version` moves with every change of `decisions` (a
projection made under an older version is stale), and `live` holds exactly the
chunk ids the engine session holds whole or shrunk (a stashed or deleted chunk
leaves it, a restored one comes back). The provider's usage reports arrive on
the response path, without that lock: they go to `Calibration`, behind its own
leaf lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence, Set

from ctxopt.api.gateway.formats.conversation import Conversation
from ctxopt.api.gateway.generations import Generations
from ctxopt.api.gateway.placeholders import estimate, replacement
from ctxopt.api.gateway.projection import Projection
from ctxopt.api.gateway.schedule import Pace
from ctxopt.model import Action, ChunkTokens, Decision, Plan

# Conversations whose state (sticky decisions, calibration) stays in memory; a
# forgotten one starts over cold (its engine session and stash stay stored).
MAX_LIVE_CONVERSATIONS = 1024
# The most the provider's count may exceed ours before a report is taken for an
# error (cached or multimodal accounting) rather than a tokenizer counting more.
MAX_TOKEN_SCALE = 2.0


class Calibration:
    """The provider's count against ours: the size of the last request sent, and
    the ratio the provider's report gave. `_lock` is a leaf lock: the response
    path reports here while a later call of the conversation may hold the
    conversation's lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent = 0
        self._scale = 1.0

    @property
    def scale(self) -> float:
        """The provider's count / ours (1.0 until a report says more)."""
        with self._lock:
            return self._scale

    def sent(self, tokens: int) -> None:
        """Our count of the request that went upstream."""
        with self._lock:
            self._sent = tokens

    def report(self, prompt_tokens: int) -> None:
        """The provider's prompt size for the last request sent: a ratio above 1
        (at most MAX_TOKEN_SCALE) shrinks the ceiling later calls judge against."""
        with self._lock:
            if prompt_tokens <= 0 or self._sent <= 0:
                return
            ratio = prompt_tokens / self._sent
            if ratio <= MAX_TOKEN_SCALE:
                self._scale = max(1.0, ratio)


class ConversationState:
    """One conversation as the gateway knows it between calls: the last call's
    mapping, the engine's counts, the decisions that stick and the engine's live
    set. Guarded by `lock` (see the module's docstring); read through its
    properties, changed only through its methods."""

    def __init__(self, session_id: str, owner: str) -> None:
        self.session_id = session_id
        self.owner = owner
        self.lock = threading.Lock()
        self.calibration = Calibration()
        self._conversation: Conversation | None = None  # the last call's, for its unchanged prefix
        self._turn_ids: list[list[str]] = []  # its chunk ids, turn by turn
        self._live: set[str] = set()
        self._tokens: dict[str, int] = {}  # chunk id -> the engine's count as sent
        self._decisions: dict[str, Decision] = {}
        self._version = 0
        self._returnable: tuple[int, list[str]] = (-1, [])  # `returnable`, with its version
        # each rewritten chunk's text and size for its decision (made once per decision)
        self._replacements: dict[str, tuple[Decision, str, int]] = {}
        self._projection: Projection | None = None  # the last call's
        self._judged = 0  # leading turns whose answered outputs were judged (arrivals.py)
        self.pace = Pace()  # the prompt's growth per call (schedule.py)
        self.generations = Generations()  # the old generation (generations.py)
        # what this call found restored since the last one: roots of its collection
        self.just_restored: tuple[str, ...] = ()

    @property
    def conversation(self) -> Conversation | None:
        return self._conversation

    @property
    def turn_ids(self) -> list[list[str]]:
        return self._turn_ids

    @property
    def live(self) -> Set[str]:
        """The chunk ids the engine session holds (not stashed, not deleted)."""
        return self._live

    @property
    def tokens(self) -> Mapping[str, int]:
        return self._tokens

    @property
    def decisions(self) -> Mapping[str, Decision]:
        """The decisions that stick, by chunk id (none is KEEP)."""
        return self._decisions

    @property
    def returnable(self) -> list[str]:
        """The decided chunks that can come back whole (every decision but a
        deletion), made once per version: the pipeline asks on every call."""
        if self._returnable[0] != self._version:
            ids = [i for i, d in self._decisions.items() if d.action != Action.DELETE]
            self._returnable = (self._version, ids)
        return self._returnable[1]

    @property
    def version(self) -> int:
        """Moves with every change of `decisions`."""
        return self._version

    @property
    def projection(self) -> Projection | None:
        """The last call's projection."""
        return self._projection

    @property
    def judged_turns(self) -> int:
        """How many leading turns' answered outputs were judged for shrinking
        once; never more than the turns reused from the last call (a host that
        rewrote its history is judged again from where it changed)."""
        reused = self._conversation.reused if self._conversation is not None else 0
        return min(self._judged, reused)

    def judged(self, upto: int) -> None:
        self._judged = upto

    def mapped(self, conversation: Conversation, turn_ids: list[list[str]]) -> None:
        """This call's mapping, for the next call to reuse."""
        self._conversation, self._turn_ids = conversation, turn_ids

    def forget_mapping(self) -> None:
        """The next call maps every turn again (the engine may not hold them)."""
        self._conversation, self._turn_ids = None, []

    def projected(self, projection: Projection) -> None:
        self._projection = projection

    def removed(self, ids: Iterable[str]) -> None:
        """The engine session no longer holds `ids`."""
        self._live.difference_update(ids)

    def not_sent(self, present: Set[str]) -> None:
        """Chunks the host no longer sends are forgotten, with their decisions."""
        if len(self._tokens) <= len(present):
            return
        for gone in [i for i in self._tokens if i not in present]:
            del self._tokens[gone]
            if self._decisions.pop(gone, None) is not None:
                self._version += 1
            self._replacements.pop(gone, None)

    def appended(self, counted: Sequence[ChunkTokens]) -> None:
        """Chunks the engine session took, with its counts."""
        for chunk in counted:
            self._tokens[chunk.id] = chunk.tokens
            self._live.add(chunk.id)

    def restored(self, ids: Sequence[str]) -> None:
        """Chunks the engine holds whole again (restored through MCP, gRPC or the
        command line): their decisions stop sticking, and this call's collection
        keeps them (someone asked for them back: they reach the model at least once)."""
        self.just_restored = tuple(ids)
        for whole in ids:
            del self._decisions[whole]
            self._replacements.pop(whole, None)
            self._live.add(whole)
        if ids:
            self._version += 1

    def planned(self, plan: Plan) -> None:
        """A collection's decisions replace the ones that stuck on its chunks."""
        self._version += 1
        for kept in plan.kept_ids:
            earlier = self._decisions.get(kept)
            if earlier is not None and earlier.action in (Action.STASH, Action.DELETE):
                del self._decisions[kept]  # restored (e.g. through MCP): it comes back
        for decision in plan.decisions:
            if decision.action == Action.KEEP:
                self._decisions.pop(decision.chunk_id, None)
                continue
            self._decisions[decision.chunk_id] = decision
            if decision.action in (Action.STASH, Action.DELETE):
                self._live.discard(decision.chunk_id)

    def shown(self, chunk_id: str, decision: Decision) -> tuple[str, int]:
        """The text a rewritten chunk shows under `decision`, and its estimated
        size; made once per decision, so the same decision gives the same bytes."""
        shown = self._replacements.get(chunk_id)
        if shown is None or shown[0] is not decision:
            text = replacement(decision, self.session_id)
            shown = (decision, text, estimate(decision, text))
            self._replacements[chunk_id] = shown
        return shown[1], shown[2]


class ConversationStates:
    """The live conversation states, least recently used forgotten first;
    `_lock` guards the map only (a leaf lock)."""

    def __init__(self, limit: int = MAX_LIVE_CONVERSATIONS) -> None:
        self._limit = limit
        self._states: OrderedDict[tuple[str, str], ConversationState] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session_id: str, owner: str) -> ConversationState:
        with self._lock:
            key = (owner, session_id)
            state = self._states.pop(key, None) or ConversationState(session_id, owner)
            self._states[key] = state
            while len(self._states) > self._limit:
                self._states.popitem(last=False)
            return state
