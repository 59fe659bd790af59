"""Small builders shared by the engine tests."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import Budget, Chunk, ChunkKind, OptimizeOptions, Role, Roots
from ctxopt.session import Session
from ctxopt.text.analyzer import Analyzer


def engine(**overrides: object) -> Engine:
    return Engine(replace(Config(data_dir=":memory:"), **overrides))  # type: ignore[arg-type]


def chunk(
    chunk_id: str,
    text: str = "",
    role: Role = Role.USER,
    kind: ChunkKind = ChunkKind.MESSAGE,
    **fields: object,
) -> Chunk:
    return Chunk(id=chunk_id, role=role, kind=kind, text=text or f"text of {chunk_id}", **fields)  # type: ignore[arg-type]


def books_through(steps: list[tuple[int, str | None]]) -> Iterator[Session]:
    """A session through `steps` ((chunk number, its text, or None to remove it);
    the model writes the odd numbers), its line book synced after each, which is
    yielded: the book's marks are then the ones a live book keeps."""
    session = Session("s", "", Analyzer())
    for turn, (number, text) in enumerate(steps):
        if text is None:
            session.remove(f"c{number}")
        else:
            role = Role.MODEL if number % 2 else Role.USER
            session.upsert(chunk(f"c{number}", text, role=role, turn=turn), 10, 0)
        session.line_book()
        yield session


def filler(words: int, seed: str = "") -> str:
    """Plain text of about `words` tokens that matches no query used in tests."""
    return " ".join(f"lorem{seed}{i % 97}" for i in range(words))


def conversation(turns: int, words: int = 50) -> list[Chunk]:
    """Alternating user/model turns, one chunk each, turn numbers set."""
    return [
        chunk(
            f"t{i}",
            filler(words, str(i)),
            role=Role.USER if i % 2 == 0 else Role.MODEL,
            turn=i,
        )
        for i in range(turns)
    ]


def options(
    target: int,
    query: str = "",
    *,
    limit: int = 100_000,
    recent_turns: int = 2,
    **fields: object,
) -> OptimizeOptions:
    fields.setdefault("roots", Roots(recent_turns=recent_turns))
    return OptimizeOptions(
        budget=Budget(context_limit_tokens=limit, target_tokens=target),
        query=query,
        force=True,
        **fields,  # type: ignore[arg-type]
    )
