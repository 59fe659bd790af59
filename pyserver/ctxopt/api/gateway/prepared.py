"""What the pipeline answers for one request: the body to send upstream, and
what the response headers and the log line say about it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from ctxopt.api.gateway.formats.conversation import JsonObject
from ctxopt.api.gateway.state import ConversationState


class Outcome(Enum):
    OPTIMIZED = "optimized"
    SHADOW = "shadow"  # shadow mode: it would have sent a changed request, sent the original
    BELOW_THRESHOLD = "below-threshold"
    FALLBACK = "fallback"
    PASS_THROUGH = "pass-through"


@dataclass
class Prepared:
    """What goes upstream, and what the response headers and log line say."""

    body: bytes
    outcome: Outcome
    tokens_before: int = 0
    tokens_after: int = 0
    session_id: str = ""
    note: str = ""
    state: ConversationState | None = None
    # the host's body as the pipeline parsed it (its top-level fields are the sent
    # body's), so the app need not parse it again; None when it was not parsed
    fields: JsonObject | None = None
    log: dict[str, object] = field(default_factory=dict)
