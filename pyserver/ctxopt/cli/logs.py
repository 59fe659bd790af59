"""The server's stderr: one format for every line, ours and the libraries'.

`json` (the default) writes one JSON object per line: a call's record as the
servicer built it (`extra={"fields": {...}}`), any other record as
`{"level", "logger", "message"}` (uvicorn's and warnings' included, and a
traceback as `"exception"`). `text` writes every line plain: the message, or a
call's fields as `key=value`. gRPC's C core writes to the file descriptor
itself, not through Python; it is kept quiet unless `GRPC_VERBOSITY` says
otherwise (its start-up failures are checked first, see preflight.py).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from types import TracebackType

from ctxopt.config import LogFormat


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            return json.dumps(fields)
        line: dict[str, object] = {
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line)


class TextLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            return " ".join(f"{key}={value}" for key, value in fields.items())
        text = record.getMessage()
        if record.exc_info:
            text += " | " + self.formatException(record.exc_info).replace("\n", " | ")
        return text


def configure(log_format: LogFormat) -> None:
    """Route every Python log record, warning and uncaught exception to stderr
    in `log_format`; called once, by the command that runs a server."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if log_format == "json" else TextLines())
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        library = logging.getLogger(name)
        library.handlers.clear()
        library.propagate = True
    logging.captureWarnings(True)
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    threading.excepthook = _thread_exception


def _thread_exception(args: threading.ExceptHookArgs) -> None:
    exc_info: tuple[type[BaseException], BaseException, TracebackType | None] | None = None
    if args.exc_value is not None:
        exc_info = (args.exc_type, args.exc_value, args.exc_traceback)
    thread = args.thread.name if args.thread is not None else "?"
    logging.getLogger("ctxopt").error("thread %s failed", thread, exc_info=exc_info)
