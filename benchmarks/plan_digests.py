"""Digests of every plan of a growing session, to prove a change leaves the
planner's decisions as they were: run it on two trees and compare the output.

    PYTHONPATH=<tree>/pyserver:. .venv/bin/python -m benchmarks.plan_digests \
        [--sizes 3000,10000] [--out FILE]

Per size, one session of the bench corpus (`benchmarks.corpus`) is planned
at every step a warm plan may reuse or must redo work: between appends, the
same plan again, other queries, aggressive, with breakdowns, after a pin, a
touch and a removal, stateless, committed, after the commit and after a
restart on the same data directory. Each plan's digest covers its kept ids,
every decision (action, tokens, score, reasons, text, stash id), its totals
and outcome; timing fields are left out. Prints one line per plan and writes
them as JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import Budget, ChunkUpdate, OptimizeOptions, Plan, Roots

from benchmarks.corpus import DEFAULT_DATA, QUERY, chunks, swe_texts

OTHER_QUERIES = (
    "where is the config parser's empty section handled",
    "pytest output of the last run, assertion errors",
    "",
)
SESSION = "digests"


def plan_digest(plan: Plan) -> str:
    """A hash of everything a client reads in a plan but its timing."""
    d = plan.decisions
    body = [
        plan.kept_ids,
        d.chunk_ids,
        [a.name for a in d.actions],
        d.tokens,
        d.tokens_after,
        [repr(s) for s in d.scores],
        [list(r) for r in d.reasons],
        d.replacement_texts,
        d.stash_ids,
        None if d.breakdowns is None else [repr(b) for b in d.breakdowns],
        plan.tokens_before,
        plan.tokens_after,
        plan.target_tokens,
        plan.outcome.name,
        [repr(r) for r in plan.repairs],
        plan.explanation,
        plan.mandatory_tokens,
    ]
    return hashlib.sha256(json.dumps(body).encode()).hexdigest()[:16]


def session_digests(size: int, texts: list[str], data_dir: Path) -> list[tuple[str, str]]:
    """(step, digest) of every plan of one session grown to `size` chunks."""
    batch = list(chunks(size, texts))
    out: list[tuple[str, str]] = []
    engine = Engine(Config(data_dir=str(data_dir)))

    def options(query: str = QUERY, **knobs: object) -> OptimizeOptions:
        tokens = engine.stats("", SESSION).tokens
        return OptimizeOptions(
            budget=Budget(tokens, target_percent=60.0),
            query=query,
            roots=Roots(recent_turns=10),
            dry_run=True,
            force=True,
            lean=True,
            **knobs,  # type: ignore[arg-type]
        )

    def record(step: str, plan_of: Callable[[], Plan]) -> None:
        out.append((step, plan_digest(plan_of())))

    step = max(size // 6, 1)
    for start in range(0, size, step):
        engine.append("", SESSION, batch[start : start + step])
        grown = f"after append to {min(start + step, size)}"
        record(grown, lambda: engine.optimize("", SESSION, options()))
    record("again", lambda: engine.optimize("", SESSION, options()))
    for i, query in enumerate(OTHER_QUERIES):
        record(f"query {i}", lambda q=query: engine.optimize("", SESSION, options(q)))  # type: ignore[misc]
    record("back to the first query", lambda: engine.optimize("", SESSION, options()))
    record("aggressive", lambda: engine.optimize("", SESSION, options(aggressive=True)))
    record("breakdowns", lambda: engine.optimize("", SESSION, replace(options(), lean=False)))
    middle = batch[size // 2].id
    engine.update("", SESSION, [ChunkUpdate(middle, pinned=True)])
    record("after a pin", lambda: engine.optimize("", SESSION, options()))
    engine.update("", SESSION, [ChunkUpdate(batch[size // 3].id, touch=True)])
    record("after a touch", lambda: engine.optimize("", SESSION, options()))
    engine.remove("", SESSION, [batch[size // 4].id], stash_originals=True)
    record("after a removal", lambda: engine.optimize("", SESSION, options()))
    changed = replace(batch[size // 5], text=batch[size // 5].text + "\nKeyError: 'section'")
    engine.append("", SESSION, [changed])
    record("after a text change", lambda: engine.optimize("", SESSION, options()))
    stateless = batch[: size // 2]
    record("stateless", lambda: engine.optimize_context(stateless, options()))
    record("stateless again", lambda: engine.optimize_context(stateless, options()))
    record("committed", lambda: engine.optimize("", SESSION, replace(options(), dry_run=False)))
    record("after the commit", lambda: engine.optimize("", SESSION, options()))
    engine.close()
    engine = Engine(Config(data_dir=str(data_dir)))
    record("after a restart", lambda: engine.optimize("", SESSION, options()))
    engine.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="3000,10000")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=None, help="JSON file (default: none)")
    args = parser.parse_args()
    texts = swe_texts(args.data)
    result: dict[str, list[tuple[str, str]]] = {}
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            result[str(size)] = session_digests(size, texts, Path(tmp))
        for step, digest in result[str(size)]:
            print(f"{size:>7} {step:<28} {digest}")
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
