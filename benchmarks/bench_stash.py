"""Stash benchmark: search latency, insert throughput, write cost per fsync mode,
reopen of a big store.

    .venv/bin/python benchmarks/bench_stash.py            # full run (1M stashed tokens)
    .venv/bin/python benchmarks/bench_stash.py --smoke    # tiny run for CI

Prints a table and writes benchmarks/results/bench_stash.json. The corpus is
synthetic and seeded (Zipf-distributed words, so common and rare terms both
occur), spread over sessions of two owners, with kinds, tags, files and tasks to
filter on.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import Action, Budget, Chunk, ChunkKind, OptimizeOptions, Role, StashFilter
from ctxopt.session import stash_id_of
from ctxopt.store import Change, Fsync, StashEntry, Store, StoredChunk

RESULTS = Path(__file__).parent / "results" / "bench_stash.json"
OWNERS = ("alice", "bob")
SESSIONS_PER_OWNER = 10
KINDS = (ChunkKind.MESSAGE, ChunkKind.CODE, ChunkKind.LOG, ChunkKind.TOOL_RESULT)
TAGS = ("ci", "flaky", "review", "deploy", "perf")
TOKENS_PER_WORD = 1.3
PLAN_ENTRIES = 10  # originals stashed by one typical plan


@dataclass(frozen=True, slots=True)
class Scale:
    stash_tokens: int
    queries: int
    write_commits: int
    reopen_chunks: int
    plan_sessions: int  # fresh sessions optimized per durability mode
    plan_chunks: int


FULL = Scale(1_000_000, 400, 200, 100_000, plan_sessions=30, plan_chunks=1_000)
SMOKE = Scale(20_000, 20, 10, 2_000, plan_sessions=3, plan_chunks=100)


class Corpus:
    """Seeded Zipfian text: a few very common words, a long tail of rare ones."""

    def __init__(self, seed: int, vocabulary: int = 20_000) -> None:
        self.rng = random.Random(seed)
        syllables = [c + v for c in "bcdfghklmnprstvz" for v in "aeiou"]
        words: set[str] = set()
        while len(words) < vocabulary:
            words.add("".join(self.rng.choices(syllables, k=self.rng.randint(1, 4))))
        self.words = sorted(words)
        self.rng.shuffle(self.words)
        self.weights = [1.0 / (rank + 1) for rank in range(vocabulary)]

    def text(self, n_words: int) -> str:
        return " ".join(self.rng.choices(self.words, weights=self.weights, k=n_words))

    def word(self, lo_rank: int, hi_rank: int) -> str:
        return self.words[self.rng.randrange(lo_rank, hi_rank)]


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed_ms(action: Callable[..., object], *args: object) -> float:
    start = time.perf_counter()
    action(*args)
    return (time.perf_counter() - start) * 1000.0


@dataclass(frozen=True, slots=True)
class Filled:
    entries: int
    tokens: int
    texts: list[str]
    commit_seconds: float  # inside `Store.commit` only (analysis, SQL, fsync), not text making


def fill_stash(store: Store, corpus: Corpus, target_tokens: int) -> Filled:
    """Stash originals until `target_tokens`, 500 per commit."""
    rng = corpus.rng
    tokens = entries = 0
    commit_ms = 0.0
    texts: list[str] = []
    batches: dict[tuple[str, str], list[StashEntry]] = {}
    while tokens < target_tokens:
        n_words = rng.randint(40, 300)
        owner = rng.choice(OWNERS)
        session = f"{owner}-s{rng.randrange(SESSIONS_PER_OWNER)}"
        chunk = Chunk(
            id=f"c{entries}",
            role=Role.TOOL,
            kind=rng.choice(KINDS),
            text=corpus.text(n_words),
            tokens=int(n_words * TOKENS_PER_WORD),
            created_at_ms=entries,
            tags=tuple(rng.sample(TAGS, rng.randint(0, 2))),
            file_path=f"src/mod{rng.randrange(50)}.py",
            task_id=f"task-{rng.randrange(20)}",
        )
        batch = batches.setdefault((session, owner), [])
        batch.append(stash_entry(chunk, session, owner, at_ms=entries))
        texts.append(chunk.text)
        tokens += chunk.tokens
        entries += 1
        if len(batch) == 500:
            commit_ms += timed_ms(store.commit, Change(session, owner, stash=batch))
            batch.clear()
    for (session, owner), batch in batches.items():
        if batch:
            commit_ms += timed_ms(store.commit, Change(session, owner, stash=batch))
    return Filled(entries, tokens, texts, commit_ms / 1000.0)


def stash_entry(chunk: Chunk, session_id: str, owner: str, at_ms: int) -> StashEntry:
    return StashEntry(
        stash_id=stash_id_of(chunk),
        session_id=session_id,
        owner=owner,
        chunk=chunk,
        action=Action.STASH,
        reasons=("low_score",),
        score=0.1,
        stashed_at_ms=at_ms,
        plan_id=f"plan-{at_ms // PLAN_ENTRIES}",
    )


Latency = dict[str, float]


def bench_search(
    store: Store, corpus: Corpus, texts: list[str], queries: int
) -> dict[str, Latency]:
    """Latency per query shape; every shape searched in one session and across the owner's."""
    rng = corpus.rng

    def phrase() -> str:
        words = rng.choice(texts).split()
        start = rng.randrange(max(1, len(words) - 3))
        return " ".join(words[start : start + 3])

    shapes: dict[str, Callable[[], tuple[str, StashFilter]]] = {
        "common word": lambda: (corpus.word(0, 20), StashFilter()),
        "rare word": lambda: (corpus.word(2_000, 20_000), StashFilter()),
        "two words": lambda: (f"{corpus.word(20, 2_000)} {corpus.word(20, 2_000)}", StashFilter()),
        "3-word phrase": lambda: (phrase(), StashFilter()),
        "word + filters": lambda: (
            corpus.word(20, 2_000),
            StashFilter(kinds=(ChunkKind.LOG,), tags=("ci",), from_ms=len(texts) // 4),
        ),
        "operators only": lambda: ('" AND * NEAR( -', StashFilter()),
    }
    results: dict[str, Latency] = {}
    every: list[float] = []
    for name, make in shapes.items():
        samples: list[float] = []
        for i in range(queries):
            query, filters = make()
            owner = OWNERS[i % 2]
            session = f"{owner}-s{i % SESSIONS_PER_OWNER}" if i % 3 else ""
            samples.append(timed_ms(store.search, owner, session, query, filters, 10, 0))
        every.extend(samples)
        results[name] = latency(samples)
    results["all queries"] = latency(every)
    return results


def latency(samples: Sequence[float]) -> Latency:
    return {
        "p50_ms": round(percentile(samples, 0.50), 3),
        "p99_ms": round(percentile(samples, 0.99), 3),
        "mean_ms": round(statistics.fmean(samples), 3),
    }


def bench_writes(root: Path, corpus: Corpus, fsync: Fsync, commits: int) -> dict[str, Latency]:
    """One plan's commit (PLAN_ENTRIES originals stashed, as many chunks dropped) and one
    append's commit (PLAN_ENTRIES chunks) per sample; reported as commit_plan and
    save_chunks, the names of earlier runs."""
    store = Store(str(root / f"writes-{fsync}"), fsync=fsync)
    try:
        plans: list[float] = []
        appends: list[float] = []
        for n in range(commits):
            chunks = [
                StoredChunk(
                    Chunk(
                        id=f"c{n}-{i}", role=Role.TOOL, kind=ChunkKind.LOG, text=corpus.text(150)
                    ),
                    seq=n * PLAN_ENTRIES + i,
                    born=0,
                    last_touched_ms=n,
                )
                for i in range(PLAN_ENTRIES)
            ]
            appends.append(timed_ms(store.commit, Change("s", "alice", upserts=chunks)))
            entries = [stash_entry(c.chunk, "s", "alice", at_ms=n) for c in chunks]
            ids = [c.chunk.id for c in chunks]
            plan = Change("s", "alice", removals=ids, stash=entries, collections=n)
            plans.append(timed_ms(store.commit, plan))
        return {"commit_plan": latency(plans), "save_chunks": latency(appends)}
    finally:
        store.close()


def bench_reopen(root: Path, corpus: Corpus, n_chunks: int) -> dict[str, float]:
    """Open a store holding one session of `n_chunks` chunks, then load that session."""
    path = str(root / "reopen")
    store = Store(path)
    batch: list[StoredChunk] = []
    for n in range(n_chunks):
        chunk = Chunk(
            id=f"c{n}",
            role=Role.MODEL if n % 2 else Role.USER,
            kind=KINDS[n % len(KINDS)],
            text=corpus.text(60),
            tokens=80,
            turn=n // 4,
            tags=("ci",) if n % 7 == 0 else (),
            references=(f"c{n - 1}",) if n else (),
        )
        batch.append(StoredChunk(chunk, seq=n, born=n % 4, last_touched_ms=n))
        if len(batch) == 5_000:
            store.commit(Change("big", "alice", upserts=batch))
            batch = []
    store.commit(Change("big", "alice", upserts=batch))
    store.close()
    db_bytes = sum(f.stat().st_size for f in Path(path).iterdir())

    start = time.perf_counter()
    reopened = Store(path)
    open_ms = (time.perf_counter() - start) * 1000.0
    loaded = reopened.load_session("big")
    total_ms = (time.perf_counter() - start) * 1000.0
    reopened.close()
    assert loaded is not None and len(loaded.chunks) == n_chunks
    return {
        "chunks": n_chunks,
        "db_mb": round(db_bytes / 1e6, 1),
        "open_ms": round(open_ms, 1),
        "load_session_ms": round(total_ms - open_ms, 1),
        "open_plus_load_ms": round(total_ms, 1),
    }


def bench_durability(root: Path, corpus: Corpus, sessions: int, size: int) -> dict[str, object]:
    """A stashing Optimize (plan applied, originals committed before it returns)
    on an on-disk store against the same with no durability (`:memory:`)."""
    modes = {"memory": ":memory:", "normal": str(root / "durable-normal")}
    engines = {mode: Engine(Config(data_dir=path)) for mode, path in modes.items()}
    samples: dict[str, list[float]] = {mode: [] for mode in modes}
    try:
        for n in range(sessions):
            chunks = [
                Chunk(
                    id=f"c{i}",
                    role=Role.MODEL if i % 2 else Role.USER,
                    kind=KINDS[i % len(KINDS)],
                    text=corpus.text(150),
                    turn=i,
                )
                for i in range(size)
            ]
            for mode, engine in engines.items():  # interleaved: same machine noise
                engine.append("", f"s{n}", chunks)
                tokens = engine.stats("", f"s{n}").tokens
                options = OptimizeOptions(
                    budget=Budget(context_limit_tokens=tokens), query=corpus.text(8), force=True
                )
                samples[mode].append(timed_ms(engine.optimize, "", f"s{n}", options))
    finally:
        for engine in engines.values():
            engine.close()
    p50 = {mode: statistics.median(ms) for mode, ms in samples.items()}
    return {
        "chunks": size,
        "sessions": sessions,
        "optimize_p50_ms": {mode: round(ms, 2) for mode, ms in p50.items()},
        "durable_over_memory": round(p50["normal"] / p50["memory"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run (CI)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="JSON results path")
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="where the stores go (fsync cost is the disk's)"
    )
    args = parser.parse_args()
    scale = SMOKE if args.smoke else FULL
    corpus = Corpus(seed=7)

    with tempfile.TemporaryDirectory(prefix="bench_stash-", dir=args.work_dir) as tmp:
        root = Path(tmp)
        store = Store(str(root / "search"))
        start = time.perf_counter()
        filled = fill_stash(store, corpus, scale.stash_tokens)
        fill_s = time.perf_counter() - start
        search = bench_search(store, corpus, filled.texts, scale.queries)
        store.close()
        modes: tuple[Fsync, ...] = ("normal", "full")
        writes: dict[str, dict[str, Latency]] = {
            fsync: bench_writes(root, corpus, fsync, scale.write_commits) for fsync in modes
        }
        reopen = bench_reopen(root, corpus, scale.reopen_chunks)
        durability = bench_durability(root, corpus, scale.plan_sessions, scale.plan_chunks)

    stash = {
        "entries": filled.entries,
        "tokens": filled.tokens,
        "fill_seconds": round(fill_s, 1),
        "insert_seconds": round(filled.commit_seconds, 3),
        "insert_entries_per_s": round(filled.entries / filled.commit_seconds),
        "insert_tokens_per_s": round(filled.tokens / filled.commit_seconds),
    }
    print_table(stash, search, writes, reopen)
    print(
        f"optimize with stashing, {durability['chunks']} chunks: p50 ms "
        f"{durability['optimize_p50_ms']}, durable / in-memory "
        f"{durability['durable_over_memory']}x (target <= 1.5x)"
    )

    results: dict[str, object] = {
        "scale": "smoke" if args.smoke else "full",
        "machine": {
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "platform": platform.platform(),
        },
        "stash": stash,
        "search": search,
        "writes": writes,
        "reopen": reopen,
        "durability": durability,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {args.out}")


def print_table(
    stash: dict[str, float],
    search: dict[str, Latency],
    writes: dict[str, dict[str, Latency]],
    reopen: dict[str, float],
) -> None:
    print(f"stash: {stash['entries']} entries, {stash['tokens']} tokens")
    print(
        f"insert (500 originals a commit): {stash['insert_entries_per_s']:.0f} originals/s, "
        f"{stash['insert_tokens_per_s']:.0f} tokens/s ({stash['insert_seconds']} s in commits)"
    )
    header = f"{'p50 ms':>10}{'p99 ms':>10}{'mean ms':>10}"
    print(f"\n{'search (limit 10)':<30}{header}")
    for name, row in search.items():
        print(f"{name:<30}{row['p50_ms']:>10}{row['p99_ms']:>10}{row['mean_ms']:>10}")
    print(f"\n{'write (one commit each)':<30}{header}")
    for fsync, ops in writes.items():
        for op, row in ops.items():
            label = f"{op} fsync={fsync}"
            print(f"{label:<30}{row['p50_ms']:>10}{row['p99_ms']:>10}{row['mean_ms']:>10}")
    print(
        f"\nreopen: {reopen['chunks']:.0f} chunks ({reopen['db_mb']} MB): "
        f"open {reopen['open_ms']} ms, load_session {reopen['load_session_ms']} ms, "
        f"total {reopen['open_plus_load_ms']} ms"
    )


if __name__ == "__main__":
    main()
