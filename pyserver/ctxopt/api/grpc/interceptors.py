"""Cross-cutting gRPC concerns, one interceptor each. `server.py` installs them
in this order, outermost first:

1. `DecodeInterceptor`: request bytes that are not the method's message answer
   INVALID_ARGUMENT (grpc reports a failing deserialiser as INTERNAL, which
   blames the server).
2. `AuthInterceptor`: a ContextOptimizer call without a known bearer token is
   refused before any handler runs (health and reflection stay open); a known
   one runs its handler as that token's owner (`current_owner`).

Per-call concerns that need the servicer's context (the deadline, engine errors
to status codes, the access log line) live in `service._call`.

The bearer tokens themselves are `ctxopt.api.auth`, shared with the gateway.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import grpc

from ctxopt.api.auth import Tokens, Unauthenticated

if TYPE_CHECKING:  # the stubs make these generic; the runtime classes are not
    _Interceptor = grpc.ServerInterceptor[Any, Any]
    Handler = grpc.RpcMethodHandler[Any, Any]
    Continuation = Callable[[grpc.HandlerCallDetails], Handler | None]
    Behaviour = Callable[[Any, grpc.ServicerContext], Any]
else:
    _Interceptor = grpc.ServerInterceptor

_owner: ContextVar[str] = ContextVar("ctxopt_owner", default="")


def current_owner() -> str:
    """The owner of the call this thread is serving ("" when auth is off)."""
    return _owner.get()


def _wrapped(
    handler: Handler, behaviour: Behaviour, decode: Callable[[bytes], Any] | None
) -> Handler:
    return grpc.unary_unary_rpc_method_handler(
        behaviour, request_deserializer=decode, response_serializer=handler.response_serializer
    )


class DecodeInterceptor(_Interceptor):
    """Undecodable request bytes answer INVALID_ARGUMENT naming the method."""

    def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> Handler | None:
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None or handler.request_deserializer is None:
            return handler
        decode = handler.request_deserializer
        behaviour = handler.unary_unary
        method = handler_call_details.method

        def tolerant(data: bytes) -> Any:
            try:
                return decode(data)
            except Exception as e:  # any parse failure is the client's
                return _Undecodable(e)

        def guarded(request: Any, context: grpc.ServicerContext) -> Any:
            if isinstance(request, _Undecodable):
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"request: not a valid message for {method} ({request.error})",
                )
            return behaviour(request, context)

        return _wrapped(handler, guarded, tolerant)


class _Undecodable:
    """A request whose bytes did not parse, carried to the handler to refuse."""

    def __init__(self, error: Exception) -> None:
        self.error = error


class AuthInterceptor(_Interceptor):
    """Checks the bearer token of `protected_prefix` methods once, and runs their
    handlers as its owner."""

    def __init__(self, tokens: Tokens, protected_prefix: str) -> None:
        self._tokens = tokens
        self._prefix = protected_prefix

    def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> Handler | None:
        details = handler_call_details
        if not self._tokens.required or not details.method.startswith(self._prefix):
            return continuation(details)
        try:
            owner = self._tokens.owner(details.invocation_metadata)
        except Unauthenticated as e:
            return _refusal(str(e))
        handler = continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        behaviour = handler.unary_unary

        def as_owner(request: Any, context: grpc.ServicerContext) -> Any:
            token = _owner.set(owner)
            try:
                return behaviour(request, context)
            finally:
                _owner.reset(token)

        return _wrapped(handler, as_owner, handler.request_deserializer)


def _refusal(message: str) -> Handler:
    def refuse(_request: Any, context: grpc.ServicerContext) -> None:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    return grpc.unary_unary_rpc_method_handler(refuse)
