"""Stateless input checks shared by the fronts (gRPC, MCP) and the engine.

Each check raises `InvalidArgument` (or `ResourceExhausted` for limits) naming
the field path, e.g. `chunks[3].text`, and the offending value. Checks that
need session state (capacity, embedding dimension, known ids, removal) are in
`session_checks`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import compress
from operator import attrgetter, eq, lt
from typing import Any

from ctxopt.config import Config
from ctxopt.errors import InvalidArgument, ResourceExhausted
from ctxopt.model import (
    Budget,
    Chunk,
    ChunkKind,
    ChunkUpdate,
    GcPolicy,
    OptimizeOptions,
    Role,
    Roots,
    Strategy,
    Weights,
)
from ctxopt.store import Exported

# Counters and times: what a JSON number holds exactly, far below int64 overflow.
MAX_COUNTER = 2**53 - 1

MAX_ID_CHARS = 256
MAX_SEARCH_LIMIT = 100
DEFAULT_SEARCH_LIMIT = 20  # hits per page when a request leaves `limit` out (gRPC: 0)
# Far beyond any model's window (the largest are a few million tokens).
MAX_CONTEXT_TOKENS = 1_000_000_000


def too_many(field: str, value: object, what: str, limit: int) -> ResourceExhausted:
    return ResourceExhausted(field, value, f"more than {limit:,} {what} (limit)")


def validate_session_id(session_id: str, field: str = "session_id") -> None:
    _check_id(session_id, field)


def _check_id(value: str, field: str) -> None:
    if not value:
        raise InvalidArgument(field, value, "must not be empty")
    if len(value) > MAX_ID_CHARS:
        raise InvalidArgument(field, value, f"longer than {MAX_ID_CHARS} characters")
    if not value.isprintable():
        raise InvalidArgument(field, value, "must be printable text")


def validate_ids(ids: Sequence[str], field: str) -> None:
    if not ids:
        raise InvalidArgument(field, list(ids), "must name at least one chunk")
    seen: set[str] = set()
    for i, chunk_id in enumerate(ids):
        _check_id(chunk_id, f"{field}[{i}]")
        if chunk_id in seen:
            raise InvalidArgument(f"{field}[{i}]", chunk_id, "duplicate id")
        seen.add(chunk_id)


def _check_enum(value: int, enum: type[Role | ChunkKind | GcPolicy | Strategy], field: str) -> None:
    if value not in enum._value2member_map_:
        raise InvalidArgument(field, value, f"not a known {enum.__name__} value")


def _check_finite(value: float, field: str) -> None:
    if not math.isfinite(value):
        raise InvalidArgument(field, value, "must be a finite number")


Columns = Mapping[str, Sequence[Any]]  # a batch's values, field by field


@dataclass(frozen=True, slots=True)
class _Rule:
    """One rule of a chunk's fields, for both ways a batch is checked."""

    fields: tuple[str, ...]  # what it reads (the batch's columns it needs)
    check: Callable[[Chunk, Config, str], None]  # one chunk: raises its failure
    holds: Callable[[Columns, Config], bool]  # a batch: whether every chunk passes


def validate_chunks(chunks: Sequence[Chunk], config: Config, field: str = "chunks") -> None:
    """A batch of chunks to append: ids, texts, enums, numbers, links."""
    if not chunks:
        raise InvalidArgument(field, [], "must hold at least one chunk")
    if len(chunks) > config.max_chunks_per_request:
        raise too_many(field, len(chunks), "chunks in one request", config.max_chunks_per_request)
    _check_unique_chunks(chunks, config, lambda i: f"{field}[{i}]")


def _check_unique_chunks(
    chunks: Sequence[Chunk], config: Config, where_of: Callable[[int], str]
) -> None:
    if not _plainly_valid(chunks, config):
        _check_each_chunk(chunks, config, where_of)


def _check_each_chunk(
    chunks: Sequence[Chunk], config: Config, where_of: Callable[[int], str]
) -> None:
    """The checks one chunk at a time, raising the first failure."""
    seen: set[str] = set()
    for i, chunk in enumerate(chunks):
        where = where_of(i)
        _check_id(chunk.id, f"{where}.id")
        if chunk.id in seen:
            raise InvalidArgument(f"{where}.id", chunk.id, "duplicate id in one batch")
        seen.add(chunk.id)
        validate_chunk(chunk, config, where)


def _text_check(chunk: Chunk, config: Config, where: str) -> None:
    if not chunk.text:
        raise InvalidArgument(f"{where}.text", chunk.text, "must not be empty")
    if len(chunk.text) > config.max_text_chars:
        raise ResourceExhausted(
            f"{where}.text",
            f"{len(chunk.text):,} characters",
            f"longer than the {config.max_text_chars:,}-character limit",
        )


def _role_check(chunk: Chunk, config: Config, where: str) -> None:
    _check_enum(chunk.role, Role, f"{where}.role")
    if chunk.role == Role.UNSPECIFIED:
        raise InvalidArgument(f"{where}.role", chunk.role, "must be set")


def _enum_rule(name: str, enum: type[ChunkKind | GcPolicy]) -> _Rule:
    known = frozenset(enum._value2member_map_)

    def check(chunk: Chunk, config: Config, where: str) -> None:
        _check_enum(getattr(chunk, name), enum, f"{where}.{name}")

    return _Rule((name,), check, lambda columns, config: known.issuperset(columns[name]))


def _counter_rule(name: str) -> _Rule:
    def check(chunk: Chunk, config: Config, where: str) -> None:
        _check_counter(getattr(chunk, name), f"{where}.{name}")

    return _Rule((name,), check, lambda columns, config: _within(columns[name], 0, MAX_COUNTER))


def _line_range_check(chunk: Chunk, config: Config, where: str) -> None:
    if chunk.line_end and chunk.line_end < chunk.line_start:
        raise InvalidArgument(f"{where}.line_end", chunk.line_end, "before line_start")


def _line_ranges_hold(columns: Columns, config: Config) -> bool:
    starts, ends = columns["line_start"], columns["line_end"]
    # a line range is checked where it ends
    return not any(map(lt, filter(None, ends), compress(starts, ends)))


def _boost_check(chunk: Chunk, config: Config, where: str) -> None:
    _check_finite(chunk.boost, f"{where}.boost")
    if not -1.0 <= chunk.boost <= 1.0:
        raise InvalidArgument(f"{where}.boost", chunk.boost, "must be within [-1, 1]")


def _embedding_check(chunk: Chunk, config: Config, where: str) -> None:
    if len(chunk.embedding) > config.max_embedding_dim:
        raise ResourceExhausted(
            f"{where}.embedding",
            len(chunk.embedding),
            f"more than {config.max_embedding_dim} dimensions",
        )
    for j, value in enumerate(chunk.embedding):
        _check_finite(value, f"{where}.embedding[{j}]")


def _links_rule(name: str) -> _Rule:
    def check(chunk: Chunk, config: Config, where: str) -> None:
        for j, target in enumerate(getattr(chunk, name)):
            _check_id(target, f"{where}.{name}[{j}]")
            if target == chunk.id:
                raise InvalidArgument(f"{where}.{name}[{j}]", target, "refers to the chunk itself")

    return _Rule(("id", name), check, _none_in(name))


def _parent_check(chunk: Chunk, config: Config, where: str) -> None:
    if chunk.parent_id == chunk.id:
        raise InvalidArgument(f"{where}.parent_id", chunk.parent_id, "refers to the chunk itself")


def _none_in(name: str) -> Callable[[Columns, Config], bool]:
    """A column a batch must leave empty to be vouched for whole: a chunk with
    an embedding or links is checked chunk by chunk (rare in an append)."""
    return lambda columns, config: not any(columns[name])


def _within(values: Sequence[float], low: float, high: float) -> bool:
    """Every value in [low, high] (a NaN anywhere makes the sum NaN: `min`
    and `max` may step over one)."""
    total = sum(values)
    return low <= min(values) and max(values) <= high and total == total


# The rules a chunk must pass, in the order `validate_chunk` checks them (so
# in the order of its first error). Each row is written once for both paths:
# `check` raises a chunk's failure with its field path, `holds` vouches for a
# whole batch's columns in C (`_plainly_valid`; False is no verdict, the batch
# is then checked chunk by chunk). A rule cannot reach one path only.
_SET_ROLES = frozenset(Role._value2member_map_).difference([Role.UNSPECIFIED])
_CHUNK_RULES: tuple[_Rule, ...] = (
    _Rule(
        ("text",),
        _text_check,
        lambda columns, config: (
            min(map(len, columns["text"])) > 0
            and max(map(len, columns["text"])) <= config.max_text_chars
        ),
    ),
    _Rule(("role",), _role_check, lambda columns, config: _SET_ROLES.issuperset(columns["role"])),
    _enum_rule("kind", ChunkKind),
    _enum_rule("policy", GcPolicy),
    *map(_counter_rule, ("tokens", "turn", "line_start", "line_end", "created_at_ms")),
    _Rule(("line_start", "line_end"), _line_range_check, _line_ranges_hold),
    _Rule(("boost",), _boost_check, lambda columns, config: _within(columns["boost"], -1.0, 1.0)),
    _Rule(("embedding",), _embedding_check, _none_in("embedding")),
    _links_rule("references"),
    _links_rule("summary_of"),
    _Rule(
        ("id", "parent_id"),
        _parent_check,
        lambda columns, config: not any(map(eq, columns["parent_id"], columns["id"])),
    ),
)
# Every field a rule reads (and the id), taken from each chunk in one C call.
_FIELDS = tuple(dict.fromkeys(("id", *(f for rule in _CHUNK_RULES for f in rule.fields))))
_CHECKED = attrgetter(*_FIELDS)
_CHUNK_CHECKS = tuple(rule.check for rule in _CHUNK_RULES)  # no attribute read per rule


def _ids_hold(ids: Sequence[str]) -> bool:
    """`_check_each_chunk`'s id checks, over a batch's id column."""
    return (
        len(set(ids)) == len(ids)
        and min(map(len, ids)) > 0
        and max(map(len, ids)) <= MAX_ID_CHARS
        and all(map(str.isprintable, ids))
    )


def _plainly_valid(chunks: Sequence[Chunk], config: Config) -> bool:
    """Whether every chunk passes `validate_chunk` and no id repeats, by
    whole-batch passes (an append checks hundreds of chunks per call; the
    per-chunk checks name each field as they go). False is no verdict: the
    caller then checks chunk by chunk, which raises the first failure."""
    if not chunks:
        return True
    columns = dict(zip(_FIELDS, zip(*map(_CHECKED, chunks), strict=True), strict=True))
    try:
        return _ids_hold(columns["id"]) and all(
            rule.holds(columns, config) for rule in _CHUNK_RULES
        )
    except TypeError:  # a value not of its field's type (an in-process caller's):
        return False  # the checks chunk by chunk name the field, as they did


def validate_chunk(chunk: Chunk, config: Config, where: str) -> None:
    """A chunk's own fields (its id is the batch's to check), each rule of
    `_CHUNK_RULES` in order: the first failure raises."""
    for check in _CHUNK_CHECKS:
        check(chunk, config, where)


def validate_updates(updates: Sequence[ChunkUpdate], field: str = "updates") -> None:
    validate_ids([u.id for u in updates], field)
    for i, update in enumerate(updates):
        _check_enum(update.policy, GcPolicy, f"{field}[{i}].policy")
        if update.boost is not None:
            _check_finite(update.boost, f"{field}[{i}].boost")
            if not -1.0 <= update.boost <= 1.0:
                raise InvalidArgument(f"{field}[{i}].boost", update.boost, "must be within [-1, 1]")
        for j, target in enumerate(update.references or ()):
            _check_id(target, f"{field}[{i}].references[{j}]")
            if target == update.id:
                raise InvalidArgument(
                    f"{field}[{i}].references[{j}]", target, "refers to the chunk itself"
                )


def validate_budget(budget: Budget, field: str = "budget") -> None:
    if not 0 < budget.context_limit_tokens <= MAX_CONTEXT_TOKENS:
        raise InvalidArgument(
            f"{field}.context_limit_tokens",
            budget.context_limit_tokens,
            f"must be within [1, {MAX_CONTEXT_TOKENS:,}]",
        )
    for name in ("threshold_percent", "target_percent", "pressure_percent"):
        value = getattr(budget, name)
        _check_finite(value, f"{field}.{name}")
        if not 0 < value <= 100:
            raise InvalidArgument(f"{field}.{name}", value, "must be within (0, 100]")
    if not budget.target_tokens and budget.target_percent > budget.threshold_percent:
        raise InvalidArgument(
            f"{field}.target_percent", budget.target_percent, "must not exceed threshold_percent"
        )
    if not 0 <= budget.target_tokens <= MAX_CONTEXT_TOKENS:
        raise InvalidArgument(
            f"{field}.target_tokens",
            budget.target_tokens,
            f"must be within [0, {MAX_CONTEXT_TOKENS:,}]",
        )


def validate_roots(roots: Roots, field: str = "roots") -> None:
    if roots.recent_turns < 0:
        raise InvalidArgument(f"{field}.recent_turns", roots.recent_turns, "must not be negative")
    for i, root_id in enumerate(roots.root_ids):
        _check_id(root_id, f"{field}.root_ids[{i}]")


def validate_weights(weights: Weights, field: str = "weights", separator: str = ".") -> None:
    """Each weight finite and not negative; a refusal names `field`, the
    separator and the weight (MCP's settings spell them `weight_bm25`)."""
    for name in ("bm25", "recency", "gc", "embedding", "boost"):
        value = getattr(weights, name)
        where = f"{field}{separator}{name}"
        _check_finite(value, where)
        if value < 0:
            raise InvalidArgument(where, value, "must not be negative")


def validate_query(query: str, config: Config, field: str = "query") -> None:
    if len(query) > config.max_query_chars:
        raise ResourceExhausted(
            field, f"{len(query):,} characters", f"longer than {config.max_query_chars:,}"
        )


def validate_incremental_batch(batch: int, field: str = "incremental_batch") -> None:
    """Most removal steps of a minor collection (0: the server's default)."""
    if batch < 0:
        raise InvalidArgument(field, batch, "must not be negative")


def validate_page_size(size: int, field: str) -> None:
    """How many rows a listing answers (0: the server's default)."""
    if size < 0:
        raise InvalidArgument(field, size, "must be 0 (the default) or more")


def validate_options(options: OptimizeOptions, config: Config) -> None:
    """An Optimize / OptimizeContext request besides its chunks."""
    validate_budget(options.budget)
    validate_roots(options.roots)
    validate_weights(options.weights)
    validate_query(options.query, config)
    _check_enum(options.strategy, Strategy, "strategy")
    validate_query_embedding(options.query_embedding, config)
    if options.max_chunks < 0:
        raise InvalidArgument("max_chunks", options.max_chunks, "must not be negative")
    validate_incremental_batch(options.incremental_batch)
    if options.delete_ids:
        validate_ids(options.delete_ids, "delete_ids")


def validate_search(limit: int, offset: int, *, offset_field: str = "page_token") -> None:
    """One page of stash hits (gRPC sends its offset as `page_token`)."""
    if not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise InvalidArgument("limit", limit, f"must be within [1, {MAX_SEARCH_LIMIT}]")
    if offset < 0:
        raise InvalidArgument(offset_field, offset, "must not be negative")


def validate_query_embedding(values: Sequence[float], config: Config) -> None:
    if len(values) > config.max_embedding_dim:
        raise ResourceExhausted(
            "query_embedding", len(values), f"more than {config.max_embedding_dim} dimensions"
        )
    for i, value in enumerate(values):
        _check_finite(value, f"query_embedding[{i}]")


def validate_export(exported: Exported, config: Config) -> Exported:
    """An export to import, checked as an append of its live chunks and of its
    stashed originals would be. Positions come back as exported when they are
    distinct and no sparser than a server leaves them; otherwise they are
    renumbered 0, 1, ... in their order (memory follows the largest position).

    The session's limits and embedding dimension are the engine's to check."""
    session = exported.session
    validate_session_id(session.session_id, "json.session_id")
    _check_counter(session.collections, "json.collections")
    live = [c.chunk for c in session.chunks]
    _check_unique_chunks(live, config, lambda i: f"json.chunks[{i}].chunk")
    stash_ids: set[str] = set()
    for i, entry in enumerate(exported.stash):
        where = f"json.stash[{i}]"
        _check_id(entry.stash_id, f"{where}.stash_id")
        if entry.stash_id in stash_ids:
            raise InvalidArgument(f"{where}.stash_id", entry.stash_id, "duplicate stash id")
        stash_ids.add(entry.stash_id)
        validate_chunk(entry.chunk, config, f"{where}.chunk")
        _check_id(entry.chunk.id, f"{where}.chunk.id")
        _check_finite(entry.score, f"{where}.score")
        _check_counter(entry.stashed_at_ms, f"{where}.stashed_at_ms")
    ordered = sorted(range(len(session.chunks)), key=lambda i: (session.chunks[i].seq, i))
    seq_of = {i: seq for seq, i in enumerate(ordered)}
    for i, stored in enumerate(session.chunks):
        where = f"json.chunks[{i}]"
        _check_counter(stored.seq, f"{where}.seq")
        if not 0 <= stored.born <= session.collections:
            raise InvalidArgument(
                f"{where}.born",
                stored.born,
                f"must be within [0, collections={session.collections}]",
            )
        _check_counter(stored.last_touched_ms, f"{where}.last_touched_ms")
        if stored.origin and stored.origin not in stash_ids:
            raise InvalidArgument(f"{where}.origin", stored.origin, "names no stash entry")
    seqs = [c.seq for c in session.chunks]
    if len(set(seqs)) == len(seqs) and max(seqs, default=0) <= _sparsest(exported):
        return exported
    chunks = [replace(c, seq=seq_of[i]) for i, c in enumerate(session.chunks)]
    return replace(exported, session=replace(session, chunks=chunks))


def _sparsest(exported: Exported) -> int:
    """The largest position a server leaves for this many chunks: one per chunk
    ever appended, live or stashed, with room to spare."""
    return 4 * (len(exported.session.chunks) + len(exported.stash)) + 1024


def _check_counter(value: int, field: str) -> None:
    if not 0 <= value <= MAX_COUNTER:
        raise InvalidArgument(field, value, f"must be within [0, {MAX_COUNTER}]")
