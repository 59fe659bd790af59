"""Which conversation a request continues, and whose it is (the engine session
id the gateway plans it in; state.py holds what it remembers of it).

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
from collections.abc import Iterator, Mapping
from typing import Any

SESSION_HEADER = "x-ctxopt-session"
CREDENTIAL_HEADERS = ("x-api-key", "authorization", "x-goog-api-key")
# The key of the credential's hash: a fixed domain, so the hash means nothing elsewhere
NAMESPACE_KEY = b"ctxopt gateway session namespace v1"
NAMESPACE_CHARS = 12
MAX_HEADER_SESSION_CHARS = 160


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
    for piece in _repr_pieces(opening):
        key.update(piece.encode("utf-8", "surrogatepass"))
    return f"{namespace}.{fmt}-{key.hexdigest()}"


def _repr_pieces(value: Any) -> Iterator[str]:
    """`repr(value)` in pieces, for parsed JSON in tuples, without recursion: a
    body nested a thousand levels deep is valid JSON, and `repr` would raise
    RecursionError on it (the pieces join to what `repr` gives, so ids derived
    before stay the same).

    >>> value = ({"a": [1, 2.5, None, True]}, ("x",), [], {}, "it's")
    >>> "".join(_repr_pieces(value)) == repr(value)
    True
    """
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Text):
            yield item
        elif isinstance(item, dict):
            inner: list[Any] = []
            for k, v in item.items():
                inner += [_Text(", "), _Text(f"{k!r}: "), v]
            stack += [_Text("}"), *reversed(inner[1:]), _Text("{")]
        elif isinstance(item, list | tuple):
            opens, closes = (
                ("[", "]") if isinstance(item, list) else ("(", ",)" if len(item) == 1 else ")")
            )
            inner = []
            for v in item:
                inner += [_Text(", "), v]
            stack += [_Text(closes), *reversed(inner[1:]), _Text(opens)]
        else:
            yield repr(item)


class _Text(str):
    """Punctuation `_repr_pieces` writes as is (a plain str in the value is repr'd)."""
