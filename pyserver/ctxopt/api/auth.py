"""Bearer tokens, shared by the fronts that check them (the gRPC interceptor,
the gateway's routes).

`CTXOPT_AUTH_TOKEN` holds comma-separated tokens, each `owner=secret` or a bare
`secret` (owner ""). A session belongs to the owner that created it, so two
teams sharing one server never see each other's sessions or stash. With no
tokens configured every caller is owner "" (the loopback default).
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from ctxopt.errors import InvalidArgument


class Unauthenticated(Exception):
    """The call carries no token, or one this server does not know."""


class Tokens:
    """The configured bearer tokens and the owner each one stands for."""

    def __init__(self, spec: str) -> None:
        self._owners: list[tuple[bytes, str]] = []
        for i, item in enumerate(part.strip() for part in spec.split(",")):
            if not item:
                continue
            owner, _, secret = item.rpartition("=")
            if not secret:
                raise InvalidArgument(f"auth_token[{i}]", "<hidden>", "empty secret")
            self._owners.append((secret.encode(), owner))

    @property
    def required(self) -> bool:
        return bool(self._owners)

    def owner(self, metadata: Sequence[tuple[str, str | bytes]]) -> str:
        """The owner of the call's `authorization: Bearer <token>` header."""
        header = next((v for k, v in metadata if k == "authorization"), None)
        if not isinstance(header, str) or not header.startswith("Bearer "):
            raise Unauthenticated("missing 'authorization: Bearer <token>' metadata")
        presented = header.removeprefix("Bearer ").strip().encode()
        owner: str | None = None
        # compare against every token in constant time (no early exit on a match)
        for secret, name in self._owners:
            if hmac.compare_digest(presented, secret):
                owner = name
        if owner is None:
            raise Unauthenticated("unknown bearer token")
        return owner
