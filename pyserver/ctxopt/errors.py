"""Errors the engine raises; the gRPC servicer maps each to its status code.

Every error names the field and the offending value, so a client can fix its
request without reading server logs.
"""

from __future__ import annotations

from typing import ClassVar

_MAX_VALUE_CHARS = 80


def _show(value: object) -> str:
    text = repr(value)
    if len(text) > _MAX_VALUE_CHARS:
        text = text[: _MAX_VALUE_CHARS - 3] + "..."
    return text


class CtxoptError(Exception):
    """Base: `field` is a request path such as `chunks[3].text`."""

    status: ClassVar[str] = "INTERNAL"

    def __init__(self, field: str, value: object, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(f"{field}: {problem} (got {_show(value)})")


class InvalidArgument(CtxoptError):
    status = "INVALID_ARGUMENT"


class NotFound(CtxoptError):
    status = "NOT_FOUND"


class FailedPrecondition(CtxoptError):
    status = "FAILED_PRECONDITION"


class ResourceExhausted(CtxoptError):
    status = "RESOURCE_EXHAUSTED"


class PermissionDenied(CtxoptError):
    status = "PERMISSION_DENIED"


class DataLoss(CtxoptError):
    status = "DATA_LOSS"
