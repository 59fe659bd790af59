"""One pipeline for every wire format: parse, sync the new chunks, plan, apply, check.

Per call: the format parses the body into turns of blocks; each block becomes
a chunk whose id is its position plus a hash of its content, so what the host
resends is recognised, and only chunks the engine lacks are appended (chunks
the host no longer sends are removed). The decisions of the last collection
stick: they are applied again to the same chunks, so the prompt's prefix is
byte-identical from call to call and provider caches stay warm. A collection
runs only when the prompt with those decisions reaches the threshold.

Never worse: an engine failure, an infeasible plan or a rewrite that breaks
the format's rules sends the original when it fits the ceiling, else a local
truncation that drops whole exchanges (oldest first) and keeps the rules.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from ctxopt.api.gateway import hosts, windows
from ctxopt.api.gateway.formats.conversation import (
    Conversation,
    Edit,
    JsonObject,
    Rewrite,
    Turn,
    WireFormat,
    chunk_id,
    digest,
    droppable_units,
    first_prompt,
    latest_turns,
)
from ctxopt.api.gateway.sessions import SESSION_HEADER, Sessions, SessionState, owner_of, session_of
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import (
    Action,
    Budget,
    Chunk,
    ChunkKind,
    Decision,
    GcPolicy,
    OptimizeOptions,
    Plan,
    Role,
    Roots,
    Strategy,
)

log = logging.getLogger("ctxopt.gateway")

# As the TS adapter (hostOptimizer.ts, cross-validated on the session replay):
# the latest exchange stays as roots, and policy tiers with age choose what goes.
RECENT_TURNS = 2
STRATEGY = Strategy.BUDGET
QUERY_CHARS = 4000  # the query's tail that matters (a pasted log can be huge)
# The most the provider's count may exceed ours before a report is taken for an
# error (cached or multimodal accounting) rather than a tokenizer counting more.
MAX_TOKEN_SCALE = 2.0
MAX_PASSES = 3  # collections per call at most (see `_collect`)
RESTORE_HINT = 'context_stash_restore(session_id="{session}", ids=["{id}"])'


class Outcome(Enum):
    OPTIMIZED = "optimized"
    BELOW_THRESHOLD = "below-threshold"
    FALLBACK = "fallback"
    PASS_THROUGH = "pass-through"


@dataclass
class Prepared:
    """What goes upstream, and what the response headers and log line say."""

    body: bytes
    outcome: Outcome
    tokens_before: int = 0
    tokens_after: int = 0
    session_id: str = ""
    note: str = ""
    state: SessionState | None = None
    log: dict[str, object] = field(default_factory=dict)


@dataclass
class _Call:
    fmt: WireFormat
    body: JsonObject
    conversation: Conversation
    state: SessionState
    ids: list[list[str]]  # chunk ids per turn
    frame_tokens: int
    ceiling: int  # tokens the request may carry, at our counts
    protected: set[int]
    sizes: Mapping[str, int]  # chunk id -> tokens (the engine's counts, or estimates without it)


class Pipeline:
    def __init__(self, engine: Engine, config: Config) -> None:
        self.engine = engine
        self.config = config
        self.sessions = Sessions()

    def prepare(
        self, fmt: WireFormat, path: str, raw: bytes, headers: Mapping[str, str]
    ) -> Prepared:
        """The request to send upstream for `raw` (headers with lower-case names)."""
        started = time.perf_counter()
        prepared = self._prepare(fmt, path, raw, headers)
        prepared.log.update(
            format=fmt.name,
            session=prepared.session_id,
            tokens_before=prepared.tokens_before,
            tokens_after=prepared.tokens_after,
            outcome=prepared.outcome.value,
            ms=round((time.perf_counter() - started) * 1000, 2),
        )
        if prepared.note:
            prepared.log["note"] = prepared.note
        return prepared

    def report_usage(self, state: SessionState, prompt_tokens: int) -> None:
        """The provider's prompt size for the last request sent: when it counts more
        than our cl100k count, later calls judge sizes against a ceiling shrunk by
        that ratio (at most MAX_TOKEN_SCALE)."""
        if prompt_tokens <= 0 or state.last_sent_tokens <= 0:
            return
        ratio = prompt_tokens / state.last_sent_tokens
        if ratio <= MAX_TOKEN_SCALE:
            state.token_scale = max(1.0, ratio)

    def _prepare(
        self, fmt: WireFormat, path: str, raw: bytes, headers: Mapping[str, str]
    ) -> Prepared:
        try:
            body = json.loads(raw)
            conversation = fmt.parse(body, path) if isinstance(body, dict) else None
        except (ValueError, TypeError, AttributeError) as e:
            return Prepared(raw, Outcome.PASS_THROUGH, note=f"not parsed: {e}"[:200])
        if conversation is None or not conversation.turns:
            return Prepared(raw, Outcome.PASS_THROUGH, note="nothing to prune")
        window = self._window(conversation.model, headers)
        if window is None:
            return Prepared(raw, Outcome.PASS_THROUGH, note=f"unknown model {conversation.model!r}")
        limit = hosts.ceiling(
            window,
            headers.get("user-agent", ""),
            conversation.model,
            host_lines=self.config.gateway_host_ceilings,
        )
        owner = owner_of(headers)
        opening = (conversation.frame[:1], _opening(conversation.turns))
        session_id = session_of(fmt.name, owner, headers.get(SESSION_HEADER, ""), opening)
        state = self.sessions.get(session_id, owner)
        with state.lock:
            prepared = self._run(fmt, body, raw, conversation, state, limit.tokens)
        prepared.session_id = session_id
        prepared.state = state
        prepared.log.update(host=limit.host.value, ceiling=limit.tokens, window=window)
        state.last_sent_tokens = prepared.tokens_after
        return prepared

    def _window(self, model: str, headers: Mapping[str, str]) -> int | None:
        header = headers.get(windows.WINDOW_HEADER)
        if header is not None:
            return windows.parse_window(header)  # the app answers 400 on a bad value
        if self.config.gateway_window_tokens > 0:
            return self.config.gateway_window_tokens
        return windows.model_window(model)

    def _run(
        self,
        fmt: WireFormat,
        body: JsonObject,
        raw: bytes,
        conversation: Conversation,
        state: SessionState,
        ceiling: int,
    ) -> Prepared:
        turns = conversation.turns
        ids = _turn_ids(conversation, state)
        protected = set(latest_turns(turns))
        first = first_prompt(turns)
        if first is not None:
            protected.add(first)
        frame = [
            Chunk(f"f{i}.{digest(text)}", Role.SYSTEM, kind, text, turn=0)
            for i, (kind, text) in enumerate(conversation.frame)
        ]
        scaled = int(ceiling / state.token_scale)
        call = _Call(fmt, body, conversation, state, ids, 0, scaled, protected, state.tokens)
        chunks = _chunks(turns, ids)
        try:
            self._sync(state, frame, chunks)
        except Exception as e:  # never worse: the request goes on without the engine
            log.warning("gateway: engine sync failed for %s: %s", state.session_id, e)
            call.sizes = {c.id: c.tokens or len(c.text) // 3 + 1 for c in (*frame, *chunks)}
            call.frame_tokens = sum(call.sizes[c.id] for c in frame)
            return self._fallback(call, raw, f"engine: {e}"[:200])
        call.frame_tokens = sum(state.tokens.get(c.id, 0) for c in frame)
        before = call.frame_tokens + _total(turns, ids, state.tokens)
        edits, after, _ = self._project(call)
        note = ""
        if after >= scaled * self.config.gc_threshold_percent / 100:
            try:
                note = self._collect(call)
            except Exception as e:  # never worse, as above
                log.warning("gateway: plan failed for %s: %s", state.session_id, e)
                return self._fallback(call, raw, f"engine: {e}"[:200])
            edits, after, _ = self._project(call)
        if not edits:
            if before > scaled:
                return self._fallback(call, raw, "over the ceiling with nothing to prune")
            return Prepared(raw, Outcome.BELOW_THRESHOLD, before, before)
        rendered = fmt.render(body, conversation, edits, frozenset())
        broken = _new_violations(fmt, body, rendered)
        if broken:
            return self._fallback(call, raw, "rewrite breaks: " + "; ".join(broken)[:200])
        if after > scaled:
            return self._truncate(call, edits, f"{note} plan over the ceiling".strip())
        return Prepared(_dump(rendered), Outcome.OPTIMIZED, before, after, note=note)

    def _sync(self, state: SessionState, frame: list[Chunk], chunks: list[Chunk]) -> None:
        """The engine session holds what the host sends: new chunks appended,
        chunks it no longer sends removed (decided ones are not sent again)."""
        present = {c.id for c in frame} | {c.id for c in chunks}
        stale = sorted(state.live - present)
        owner, session = state.owner, state.session_id
        if stale:
            self.engine.remove(owner, session, stale, False)
            state.live.difference_update(stale)
        for gone in [i for i in state.tokens if i not in present]:
            del state.tokens[gone]
            state.decisions.pop(gone, None)
        new = [c for c in (*frame, *chunks) if c.id not in state.tokens]
        if new:
            result = self.engine.append(owner, session, new)
            for counted in result.chunks:
                state.tokens[counted.id] = counted.tokens
                state.live.add(counted.id)

    def _collect(self, call: _Call) -> str:
        """Run collections until the prompt lands at the target; their decisions
        replace the ones that stuck. The engine sees its own view of the chunks
        (a stashed chunk costs it nothing), so each pass restates the ceiling
        without what the request carries beyond that view (placeholders, calls
        kept for pairing), and a later pass is forced."""
        state = call.state
        roots = tuple(i for t in sorted(call.protected) for i in call.ids[t] if i in state.live)
        target = call.ceiling * self.config.gc_target_percent / 100
        note = ""
        for attempt in range(MAX_PASSES):
            _, projected, seen = self._project(call)
            options = OptimizeOptions(
                budget=Budget(
                    max(1, call.ceiling - max(0, projected - seen)),
                    self.config.gc_threshold_percent,
                    self.config.gc_target_percent,
                    self.config.gc_pressure_percent,
                ),
                query=_query(call.conversation.turns),
                roots=Roots(recent_turns=RECENT_TURNS, root_ids=roots),
                strategy=STRATEGY,
                force=attempt > 0,
                lean=True,
            )
            plan = self.engine.optimize(state.owner, state.session_id, options)
            self._remember(state, plan)
            note = "" if plan.feasible or not plan.triggered else "plan infeasible"
            if not plan.triggered or not plan.decisions or self._project(call)[1] <= target:
                break
        return note

    @staticmethod
    def _remember(state: SessionState, plan: Plan) -> None:
        for kept in plan.kept_ids:
            earlier = state.decisions.get(kept)
            if earlier is not None and earlier.action in (Action.STASH, Action.DELETE):
                del state.decisions[kept]  # restored (e.g. through MCP): it comes back
        for decision in plan.decisions:
            if decision.action == Action.KEEP:
                state.decisions.pop(decision.chunk_id, None)
                continue
            state.decisions[decision.chunk_id] = decision
            if decision.action in (Action.STASH, Action.DELETE):
                state.live.discard(decision.chunk_id)

    def _project(self, call: _Call) -> tuple[dict[tuple[int, int], Edit], int, int]:
        """The decisions that stuck as edits, the prompt's size with them, and the
        size the engine sees (its chunks after the decisions)."""
        edits: dict[tuple[int, int], Edit] = {}
        state = call.state
        total = seen = call.frame_tokens
        for t, turn in enumerate(call.conversation.turns):
            for block, cid in zip(turn.blocks, call.ids[t], strict=True):
                tokens = state.tokens.get(cid, 0)
                decision = state.decisions.get(cid)
                if decision is None or turn.locked or t in call.protected:
                    total += tokens
                    seen += tokens
                    continue
                if decision.action in (Action.TRIM, Action.MASK):
                    seen += decision.tokens_after
                if block.rewrite == Rewrite.DROP:
                    edits[block.ref] = Edit(None)
                elif block.rewrite == Rewrite.NEVER:
                    total += tokens
                else:
                    text = _replacement(decision, state.session_id)
                    edits[block.ref] = Edit(text)
                    total += _estimate(decision, text)
        return edits, total, seen

    def _fallback(self, call: _Call, raw: bytes, reason: str) -> Prepared:
        """No usable plan: the original when it fits, else local truncation."""
        tokens = call.frame_tokens + _total(call.conversation.turns, call.ids, call.sizes)
        if tokens <= call.ceiling:
            return Prepared(raw, Outcome.FALLBACK, tokens, tokens, note=reason)
        return self._truncate(call, {}, reason)

    def _truncate(self, call: _Call, edits: dict[tuple[int, int], Edit], reason: str) -> Prepared:
        """Drop whole exchanges, oldest first, until the prompt is at the target."""
        turns = call.conversation.turns
        sizes = [_turn_tokens(call, t, edits) for t in range(len(turns))]
        total = call.frame_tokens + sum(sizes)
        before = call.frame_tokens + _total(turns, call.ids, call.sizes)
        target = call.ceiling * self.config.gc_target_percent / 100
        dropped: set[int] = set()
        for unit in droppable_units(turns, call.protected):
            if total <= target:
                break
            dropped.update(unit)
            total -= sum(sizes[t] for t in unit)
        kept_edits = {
            ref: e for ref, e in edits.items() if ref[0] not in _raw_indices(turns, dropped)
        }
        rendered = call.fmt.render(
            call.body, call.conversation, kept_edits, frozenset(_raw_indices(turns, dropped))
        )
        over = "; still over the ceiling" if total > call.ceiling else ""
        return Prepared(
            _dump(rendered),
            Outcome.FALLBACK,
            before,
            total,
            note=f"{reason}; truncated {len(dropped)} turns{over}",
        )


def _turn_ids(conversation: Conversation, state: SessionState) -> list[list[str]]:
    """Chunk ids per turn; the turns equal to the last call's keep theirs unhashed."""
    raw, previous = conversation.raw_turns, state.raw_turns
    same = 0
    limit = min(len(raw), len(previous), len(state.turn_ids))
    while same < limit and raw[same] == previous[same]:
        same += 1
    ids = state.turn_ids[:same]
    for t in range(same, len(conversation.turns)):
        role = conversation.turns[t].role
        ids.append(
            [chunk_id(t, b, role, block) for b, block in enumerate(conversation.turns[t].blocks)]
        )
    state.raw_turns = list(raw)
    state.turn_ids = ids
    return ids


def _chunks(turns: Sequence[Turn], ids: list[list[str]]) -> list[Chunk]:
    chunks: list[Chunk] = []
    for t, turn in enumerate(turns):
        steps = any(b.call_id for b in turn.blocks)
        for block, cid in zip(turn.blocks, ids[t], strict=True):
            kind = ChunkKind.SYSTEM if turn.locked else block.kind
            policy = GcPolicy.UNSPECIFIED
            if steps and kind == ChunkKind.MESSAGE:
                policy = (
                    GcPolicy.EPHEMERAL
                )  # a step's narration: its facts come back in the results
            chunks.append(
                Chunk(
                    cid,
                    Role.SYSTEM if turn.locked else turn.role,
                    kind,
                    block.text,
                    tokens=block.tokens,
                    turn=t + 1,
                    policy=policy,
                    group_id=block.call_id or block.answers,
                )
            )
    return chunks


def _opening(turns: Sequence[Turn]) -> str:
    first = first_prompt(turns)
    return "" if first is None else "\n".join(b.text for b in turns[first].blocks)


def _query(turns: Sequence[Turn]) -> str:
    for turn in reversed(turns):
        if turn.role == Role.USER:
            text = "\n".join(b.text for b in turn.blocks if b.kind == ChunkKind.MESSAGE)
            if text.strip():
                return text[-QUERY_CHARS:]
    return ""


def _replacement(decision: Decision, session_id: str) -> str:
    """A shrunk block's text, or a removed one's placeholder: both name the chunk
    and how to get the original back (the ctxopt MCP tool)."""
    hint = RESTORE_HINT.format(session=session_id, id=decision.chunk_id)
    if decision.action in (Action.TRIM, Action.MASK) and decision.replacement_text:
        return f"{decision.replacement_text}\n[ctxopt restore: {hint}]"
    return f"[ctxopt: stashed; restore: {hint}]"


def _estimate(decision: Decision, text: str) -> int:
    """A replacement's size without counting it: the engine's count of its part
    plus a generous bound on the hint (about 3 characters a token)."""
    base = decision.tokens_after if decision.action in (Action.TRIM, Action.MASK) else 0
    extra = len(text) - len(decision.replacement_text) if base else len(text)
    return base + extra // 3 + 1


def _total(turns: Sequence[Turn], ids: list[list[str]], tokens: Mapping[str, int]) -> int:
    return sum(tokens.get(cid, 0) for t in range(len(turns)) for cid in ids[t])


def _turn_tokens(call: _Call, t: int, edits: Mapping[tuple[int, int], Edit]) -> int:
    total = 0
    for block, cid in zip(call.conversation.turns[t].blocks, call.ids[t], strict=True):
        edit = edits.get(block.ref)
        if edit is None:
            total += call.sizes.get(cid, 0)
        elif edit.text is not None:
            total += len(edit.text) // 3 + 1
    return total


def _raw_indices(turns: Sequence[Turn], dropped: set[int]) -> set[int]:
    """The raw messages (or items) the dropped turns are made of."""
    return {item for t in dropped for item in turns[t].items}


def _new_violations(fmt: WireFormat, original: JsonObject, rendered: JsonObject) -> list[str]:
    found = fmt.violations(rendered)
    if not found:
        return []
    known = set(fmt.violations(original))
    return [v for v in found if v not in known]


def _dump(body: JsonObject) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
