"""Cross-cutting gRPC concerns, one interceptor each, installed by `server.py`
in this order: `DecodeInterceptor` (outermost), then `auth.AuthInterceptor`.

Per-call concerns that need the servicer's context (owner, deadline, engine
errors to status codes, the access log line) live in `service._call`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

if TYPE_CHECKING:  # the stubs make the interceptor generic; the runtime class is not
    _Interceptor = grpc.ServerInterceptor[Any, Any]
else:
    _Interceptor = grpc.ServerInterceptor


class _Undecodable:
    """A request whose bytes did not parse, carried to the handler to refuse."""

    def __init__(self, error: Exception) -> None:
        self.error = error


class DecodeInterceptor(_Interceptor):
    """Request bytes that are not the method's message answer INVALID_ARGUMENT
    (grpc reports a failing deserialiser as INTERNAL, which blames the server)."""

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
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

        return grpc.unary_unary_rpc_method_handler(
            guarded,
            request_deserializer=tolerant,
            response_serializer=handler.response_serializer,
        )
