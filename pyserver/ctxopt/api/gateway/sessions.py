"""Which conversation a request continues, and whose it is.

The owner is the ctxopt identity, as for gRPC and MCP: the owner of the
`x-ctxopt-token` when `CTXOPT_AUTH_TOKEN` is set, "" when auth is off; so the
command line and the agent's MCP tools see, search and restore what the
gateway did. The provider credential (`x-api-key`, `Authorization`,
`x-goog-api-key`) namespaces the session id instead: its keyed one-way hash
leads the id (`<hash12>.<session>`), so two provider keys never share a session
or a stash, and the credential itself is never logged or stored. The session
is the `x-ctxopt-session` header when given, else derived from the
conversation's start (system prompt and first user message), which the host
resends on every call.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxopt.api.gateway.formats.conversation import Conversation
from ctxopt.model import Decision

SESSION_HEADER = "x-ctxopt-session"
CREDENTIAL_HEADERS = ("x-api-key", "authorization", "x-goog-api-key")
# The key of the credential's hash: a fixed domain, so the hash means nothing elsewhere
NAMESPACE_KEY = b"ctxopt gateway session namespace v1"
NAMESPACE_CHARS = 12
MAX_HEADER_SESSION_CHARS = 160
# Conversations whose state (sticky decisions, calibration) stays in memory; a
# forgotten one starts over cold (its engine session and stash stay stored).
MAX_LIVE_SESSIONS = 1024


def namespace_of(headers: Mapping[str, str], owner: str) -> str:
    """The keyed one-way hash of the request's provider credential (of the empty
    credential when it carries none), 12 hex digits; the owner is hashed with it,
    so two ctxopt identities sending one key never meet on a session id either."""
    credential = "\n".join([owner, *(headers.get(name, "") for name in CREDENTIAL_HEADERS)])
    digest = hmac.new(NAMESPACE_KEY, credential.encode(), hashlib.sha256).hexdigest()
    return digest[:NAMESPACE_CHARS]


def session_of(fmt: str, namespace: str, header: str, opening: Any) -> str:
    """The engine session of this conversation, `<namespace>.<session>`: the
    header's name, or `<format>-<hash of its opening>`."""
    if header.strip():
        return f"{namespace}.{header.strip()[:MAX_HEADER_SESSION_CHARS]}"
    key = hashlib.blake2b(digest_size=8)
    key.update(repr(opening).encode("utf-8", "surrogatepass"))
    return f"{namespace}.{fmt}-{key.hexdigest()}"


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
    judged_turns: int = 0  # turns whose answered outputs were shrunk once (arrivals.py)
    growth: float = 0.0  # the prompt's running growth per call, as sent (schedule.py)
    last_size: int = 0  # the last call's prompt size before any collection


class Sessions:
    """The live conversation states, least recently used forgotten first."""

    def __init__(self, limit: int = MAX_LIVE_SESSIONS) -> None:
        self._limit = limit
        self._states: OrderedDict[tuple[str, str], SessionState] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session_id: str, owner: str) -> SessionState:
        with self._lock:
            key = (owner, session_id)
            state = self._states.pop(key, None) or SessionState(session_id, owner)
            self._states[key] = state
            while len(self._states) > self._limit:
                self._states.popitem(last=False)
            return state
