"""Who a request belongs to and which conversation it continues.

The owner is a one-way hash of the request's credential (`x-api-key`,
`Authorization`, `x-goog-api-key`): two keys never share a session or a stash,
and the credential itself is never logged or stored. The session is the
`x-ctxopt-session` header when given, else derived from the conversation's
start (system prompt and first user message), which the host resends on every
call; either way it is scoped by the owner.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxopt.api.gateway.formats.conversation import Conversation
from ctxopt.model import Decision

SESSION_HEADER = "x-ctxopt-session"
CREDENTIAL_HEADERS = ("x-api-key", "authorization", "x-goog-api-key")
# Conversations whose state (sticky decisions, calibration) stays in memory; a
# forgotten one starts over cold (its engine session and stash stay stored).
MAX_LIVE_SESSIONS = 1024


def owner_of(headers: Mapping[str, str]) -> str:
    """A one-way hash of the credential ("" when the request carries none)."""
    credential = "\n".join(headers.get(name, "") for name in CREDENTIAL_HEADERS)
    if not credential.strip():
        return ""
    return "gw-" + hashlib.sha256(credential.encode()).hexdigest()[:32]


def session_of(fmt: str, owner: str, header: str, opening: Any) -> str:
    """The engine session of this conversation: the header's name, or a hash of
    its opening; prefixed by the owner's hash so two owners never meet."""
    if header:
        scope = owner[3:11] if owner else "anon"
        return f"gw-{scope}-{header.strip()[:160]}"
    key = hashlib.blake2b(digest_size=8)
    key.update(owner.encode())
    key.update(repr(opening).encode("utf-8", "surrogatepass"))
    return f"gw-{fmt}-{key.hexdigest()}"


@dataclass
class SessionState:
    """What the gateway remembers of one conversation between calls."""

    session_id: str
    owner: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    conversation: Conversation | None = None  # the last call's, for its unchanged prefix
    turn_ids: list[list[str]] = field(default_factory=list)  # its chunk ids, turn by turn
    live: set[str] = field(default_factory=set)  # chunk ids the engine session holds
    tokens: dict[str, int] = field(default_factory=dict)  # chunk id -> count as sent
    decisions: dict[str, Decision] = field(default_factory=dict)  # sticky between collections
    # each rewritten chunk's text and size for its decision (made once per decision)
    replacements: dict[str, tuple[Decision, str, int]] = field(default_factory=dict)
    version: int = 0  # bumped whenever `decisions` change
    projection: list[Any] = field(default_factory=list)  # the last call's, turn by turn
    token_scale: float = 1.0  # provider's count / ours, from the last reported usage
    last_sent_tokens: int = 0


class Sessions:
    """The live conversation states, least recently used forgotten first."""

    def __init__(self, limit: int = MAX_LIVE_SESSIONS) -> None:
        self._limit = limit
        self._states: OrderedDict[str, SessionState] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session_id: str, owner: str) -> SessionState:
        with self._lock:
            state = self._states.pop(session_id, None) or SessionState(session_id, owner)
            self._states[session_id] = state
            while len(self._states) > self._limit:
                self._states.popitem(last=False)
            return state
