"""The database file and its directory: one process per data directory, and
clear errors for what SQLite reports about the file or the disk."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
from pathlib import Path

from ctxopt.errors import DataLoss, FailedPrecondition, ResourceExhausted

DB_FILE = "ctxopt.db"
PID_FILE = "ctxopt.pid"  # who holds the directory, for the refusal message only


def damaged(path: str, err: BaseException) -> DataLoss:
    return DataLoss(
        "data_dir",
        path,
        f"the database is damaged ({err}); move it aside and restart, "
        "then import sessions from their JSON exports",
    )


def classify(path: str, err: sqlite3.Error) -> Exception:
    """A clear error for what SQLite reports about the file or the disk."""
    message = str(err).lower()
    if "full" in message:
        return ResourceExhausted("data_dir", path, f"the disk is full ({err}); free space")
    if "readonly" in message or "read-only" in message or "unable to open" in message:
        return FailedPrecondition(
            "data_dir", path, f"cannot write the database ({err}); check its permissions"
        )
    if isinstance(err, sqlite3.DatabaseError) and not isinstance(err, sqlite3.OperationalError):
        return damaged(path, err)
    return err


class Directory:
    """One process per data directory: each keeps its sessions in memory, so a
    second writer would diverge from the first. The lock is on the database file
    itself (deleting a side file must not let a second server in); the kernel drops
    it when the process dies, even by SIGKILL."""

    def __init__(self, path: Path) -> None:
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._fd = os.open(path / DB_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as err:
            raise FailedPrecondition(
                "data_dir", str(path), f"cannot open the data directory ({err.strerror})"
            ) from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            holder = _read_pid(path / PID_FILE)
            raise FailedPrecondition(
                "data_dir", str(path), f"in use by another ctxopt process (pid {holder})"
            ) from None
        # informational only: a read-only directory is reported when SQLite writes
        with contextlib.suppress(OSError):
            (path / PID_FILE).write_text(str(os.getpid()))

    def release(self) -> None:
        os.close(self._fd)  # releases the flock


def _read_pid(path: Path) -> str:
    try:
        return path.read_text().strip() or "unknown"
    except OSError:
        return "unknown"
