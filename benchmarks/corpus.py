"""Realistic benchmark chunks cut from the SWE-agent trajectories.

Benchmarks need many chunks of real agent text (code, logs, prose) at a known
size; this module cuts the development data into ~300-token pieces and
recycles them (with a distinct suffix, so every chunk text is unique) to reach
any count.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

from ctxopt.model import Chunk, ChunkKind, Role

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
SWE_FILE = "swe-agent-gemini3-dev.jsonl.gz"
PIECE_CHARS = 1200  # about 300 cl100k tokens of agent text


def swe_texts(data_dir: Path = DEFAULT_DATA) -> list[str]:
    """Every message of the SWE trajectories, cut into ~300-token pieces."""
    pieces: list[str] = []
    with gzip.open(data_dir / SWE_FILE, "rt", encoding="utf-8") as handle:
        for line in handle:
            for message in json.loads(line)["messages"]:
                text = str(message["content"])
                pieces += [
                    text[i : i + PIECE_CHARS]
                    for i in range(0, len(text), PIECE_CHARS)
                    if len(text[i : i + PIECE_CHARS]) > 200
                ]
    return pieces


def chunks(count: int, texts: list[str], prefix: str = "c") -> Iterator[Chunk]:
    """`count` chunks of alternating user/model turns over recycled texts."""
    for i in range(count):
        text = texts[i % len(texts)]
        if i >= len(texts):
            text = f"{text}\n(copy {i // len(texts)})"
        yield Chunk(
            id=f"{prefix}{i}",
            role=Role.USER if i % 2 == 0 else Role.MODEL,
            kind=ChunkKind.TOOL_RESULT if i % 2 == 0 else ChunkKind.MESSAGE,
            text=text,
            turn=i,
        )


QUERY = (
    "fix the failing test in the parser module: KeyError raised when the config file "
    "has an empty section, check setup.py and the traceback"
)
