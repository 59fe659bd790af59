"""Bearer tokens, the owner they stand for, and the interceptor that checks them.

`CTXOPT_AUTH_TOKEN` holds comma-separated tokens, each `owner=secret` or a bare
`secret` (owner ""). A session belongs to the owner that created it, so two
teams sharing one server never see each other's sessions or stash. With no
tokens configured every caller is owner "" (the loopback default).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import grpc

from ctxopt.errors import InvalidArgument


class Unauthenticated(Exception):
    """The call carries no token, or one this server does not know."""


class Tokens:
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
        if not self._owners:
            return ""
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


if TYPE_CHECKING:  # the stubs make the interceptor generic; the runtime class is not
    _Interceptor = grpc.ServerInterceptor[Any, Any]
else:
    _Interceptor = grpc.ServerInterceptor


class AuthInterceptor(_Interceptor):
    """Refuses calls to `protected_prefix` methods without a known token before
    any handler runs; health and reflection stay open for probes and tools."""

    def __init__(self, tokens: Tokens, protected_prefix: str) -> None:
        self._tokens = tokens
        self._prefix = protected_prefix

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        details = handler_call_details
        if self._tokens.required and details.method.startswith(self._prefix):
            try:
                self._tokens.owner(details.invocation_metadata)
            except Unauthenticated as e:
                return _refusal(str(e))
        return continuation(details)


def _refusal(message: str) -> grpc.RpcMethodHandler[Any, Any]:
    def refuse(_request: Any, context: grpc.ServicerContext) -> None:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    return grpc.unary_unary_rpc_method_handler(refuse)
