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

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import orjson

from ctxopt.api.gateway import hosts, schedule, windows
from ctxopt.api.gateway.arrivals import arrivals, shrink_options
from ctxopt.api.gateway.chunks import engine_chunks, query_of
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
from ctxopt.api.gateway.placeholders import estimate, replacement
from ctxopt.api.gateway.prepared import Outcome, Prepared
from ctxopt.api.gateway.sessions import (
    SESSION_HEADER,
    Sessions,
    SessionState,
    namespace_of,
    session_of,
)
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import (
    Action,
    Budget,
    Chunk,
    OptimizeOptions,
    Plan,
    Role,
    Roots,
    Strategy,
)
from ctxopt.prices import price_of

log = logging.getLogger("ctxopt.gateway")

# As the TS adapter, the latest exchange stays as roots; the budget order (tiers, what the
# model quoted, age) kept more than the service's default on the per-host replay.
RECENT_TURNS = 2
STRATEGY = Strategy.BUDGET
# The most the provider's count may exceed ours before a report is taken for an
# error (cached or multimodal accounting) rather than a tokenizer counting more.
MAX_TOKEN_SCALE = 2.0
MAX_PASSES = 3  # collections per call at most (see `_collect`)
EMPTIED_CALL_TOKENS = 12  # a call's id, name and empty arguments, generously
# What the provider counts around a block's text (role, type, ids, separators):
# the engine counts the text only, and a request must fit by the provider's count.
BLOCK_FRAMING_TOKENS = 4


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
        self, fmt: WireFormat, path: str, raw: bytes, headers: Mapping[str, str], owner: str
    ) -> Prepared:
        """The request to send upstream for `raw` (headers with lower-case names),
        in a session of `owner` (the ctxopt identity)."""
        started = time.perf_counter()
        mode = self.config.gateway_mode
        if mode == "off":
            prepared = Prepared(raw, Outcome.PASS_THROUGH, note="gateway mode off")
        else:
            prepared = self._prepare(fmt, path, raw, headers, owner)
        if mode == "shadow" and prepared.body is not raw:
            # the plan is made, remembered and reported; the original goes upstream
            prepared.body = raw
            if prepared.state is not None:
                prepared.state.last_sent_tokens = prepared.tokens_before
        prepared.log.update(
            mode=mode,
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
        self, fmt: WireFormat, path: str, raw: bytes, headers: Mapping[str, str], owner: str
    ) -> Prepared:
        try:
            body = orjson.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not a JSON object")
            opening = fmt.opening(body)
        except (ValueError, TypeError, AttributeError, KeyError, IndexError) as e:
            return Prepared(raw, Outcome.PASS_THROUGH, note=f"not parsed: {e}"[:200])
        namespace = namespace_of(headers, owner)
        session_id = session_of(fmt.name, namespace, headers.get(SESSION_HEADER, ""), opening)
        state = self.sessions.get(session_id, owner)
        with state.lock:
            try:
                conversation = fmt.parse(body, path, state.conversation)
            except (ValueError, TypeError, AttributeError, KeyError, IndexError) as e:
                return Prepared(raw, Outcome.PASS_THROUGH, note=f"not parsed: {e}"[:200])
            if conversation is None or not conversation.turns:
                return Prepared(raw, Outcome.PASS_THROUGH, note="nothing to prune")
            window = self._window(conversation.model, headers)
            if window is None:
                note = f"unknown model {conversation.model!r}"
                return Prepared(raw, Outcome.PASS_THROUGH, note=note)
            limit = hosts.ceiling(
                window,
                headers.get("user-agent", ""),
                conversation.model,
                host_lines=self.config.gateway_host_ceilings,
            )
            prepared = self._run(fmt, body, raw, conversation, state, limit.tokens)
            state.last_sent_tokens = prepared.tokens_after
        prepared.session_id = session_id
        prepared.state = state
        prepared.log.update(host=limit.host.value, ceiling=limit.tokens, window=window)
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
        reused = conversation.reused if state.conversation is not None else 0
        ids = state.turn_ids[:reused] + [
            [chunk_id(t, b, turns[t].role, block) for b, block in enumerate(turns[t].blocks)]
            for t in range(reused, len(turns))
        ]
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
        chunks = engine_chunks(turns, ids, reused)
        try:
            self._sync(state, frame, chunks, {i for row in ids for i in row})
        except Exception as e:  # never worse: the request goes on without the engine
            log.warning("gateway: engine sync failed for %s: %s", state.session_id, e)
            state.conversation, state.turn_ids = None, []  # map everything again next time
            all_chunks = (*frame, *engine_chunks(turns, ids, 0))
            call.sizes = {c.id: c.tokens or len(c.text) // 3 + 1 for c in all_chunks}
            call.frame_tokens = sum(call.sizes[c.id] for c in frame)
            return self._fallback(call, raw, f"engine: {e}"[:200])
        state.conversation, state.turn_ids = conversation, ids
        try:
            self._forget_restored(state)
        except Exception as e:  # never worse: the decisions that stuck still apply
            log.warning("gateway: restored check failed for %s: %s", state.session_id, e)
        call.frame_tokens = sum(state.tokens.get(c.id, 0) for c in frame)
        edits, after, seen, before = self._project(call)
        note = ""
        try:
            if self._shrink_arrivals(call, seen):
                edits, after, seen, before = self._project(call)
            state.growth = schedule.next_growth(state.growth, last_size=state.last_size, size=after)
            state.last_size = after
            due = schedule.schedule(
                price_of(conversation.model, fmt.name.partition("-")[0]).cache,
                size=after,
                growth=state.growth,
                ceiling=scaled,
                trigger_share=self.config.gateway_trigger_percent / 100,
                landing_share=self.config.gateway_landing_percent / 100,
                pays=self.config.gateway_landing_pays,
            )
            if due is not None:
                note, edits, after = self._collect(call, after, seen, due.target)
        except Exception as e:  # never worse, as above
            log.warning("gateway: plan failed for %s: %s", state.session_id, e)
            return self._fallback(call, raw, f"engine: {e}"[:200])
        if not edits:
            if before > scaled:
                return self._fallback(call, raw, "over the ceiling with nothing to prune")
            return Prepared(raw, Outcome.BELOW_THRESHOLD, before, before)
        if after > scaled:
            return self._truncate(call, edits, f"{note} plan over the ceiling".strip())
        # Edits replace the content of text and result blocks, empty a removed
        # step's call arguments and drop narration and signed blocks whole; no
        # call, id, role or turn goes, so the format's rules hold by
        # construction here; a truncation that drops turns is checked.
        rendered = fmt.render(body, conversation, edits, frozenset())
        return Prepared(_dump(rendered), Outcome.OPTIMIZED, before, after, note=note)

    def _sync(
        self, state: SessionState, frame: list[Chunk], chunks: list[Chunk], present: set[str]
    ) -> None:
        """The engine session holds what the host sends: `chunks` (the turns not
        reused from the last call) appended when new, chunks the host no longer
        sends removed (decided ones are not sent again)."""
        present = present | {c.id for c in frame}
        stale = sorted(state.live - present)
        owner, session = state.owner, state.session_id
        if stale:
            self.engine.remove(owner, session, stale, False)
            state.live.difference_update(stale)
        if len(state.tokens) > len(present):
            for gone in [i for i in state.tokens if i not in present]:
                del state.tokens[gone]
                if state.decisions.pop(gone, None) is not None:
                    state.version += 1
                state.replacements.pop(gone, None)
        new = [c for c in (*frame, *chunks) if c.id not in state.tokens]
        if new:
            result = self.engine.append(owner, session, new)
            for counted in result.chunks:
                state.tokens[counted.id] = counted.tokens
                state.live.add(counted.id)

    def _forget_restored(self, state: SessionState) -> None:
        """Decisions on chunks the engine session holds whole again (brought back
        through MCP, gRPC or the command line) stop sticking: the host's next
        request carries the original instead of the placeholder or excerpt."""
        decided = [i for i, d in state.decisions.items() if d.action != Action.DELETE]
        if not decided:
            return
        back = self.engine.whole(state.owner, state.session_id, decided)
        for whole in back:
            del state.decisions[whole]
            state.replacements.pop(whole, None)
            state.live.add(whole)
        if back:
            state.version += 1

    def _shrink_arrivals(self, call: _Call, seen: int) -> bool:
        """Shrink the tool outputs the model answered since the last call, once
        (arrivals.py); whether any decision changed."""
        state, share = call.state, self.config.gateway_arrival_share
        judged = min(state.judged_turns, call.conversation.reused)
        found = arrivals(
            call.conversation.turns,
            call.ids,
            judged=judged,
            protected=call.protected,
            tokens=state.tokens,
            min_tokens=self.config.gateway_arrival_min_tokens,
        )
        state.judged_turns = found.upto
        if share <= 0 or not found.outputs:
            return False
        options = shrink_options(
            found,
            live=state.live,
            tokens=state.tokens,
            seen=seen,
            ceiling=call.ceiling,
            share=share,
            query=query_of(call.conversation.turns),
        )
        plan = self.engine.optimize(state.owner, state.session_id, options)
        self._remember(state, plan)
        return bool(plan.decisions)

    def _collect(
        self, call: _Call, projected: int, seen: int, target: int
    ) -> tuple[str, dict[tuple[int, int], Edit], int]:
        """Run collections until the prompt lands at the target; their decisions
        replace the ones that stuck. The engine sees its own view of the chunks
        (a stashed chunk costs it nothing), so each pass restates the ceiling
        without what the request carries beyond that view (placeholders, calls
        kept for pairing), and a later pass is forced."""
        state = call.state
        roots = tuple(i for t in sorted(call.protected) for i in call.ids[t] if i in state.live)
        note = ""
        edits: dict[tuple[int, int], Edit] = {}
        for attempt in range(MAX_PASSES):
            beyond = max(0, projected - seen)  # what the request carries beyond the engine's view
            options = OptimizeOptions(
                budget=Budget(
                    max(1, call.ceiling - beyond),
                    self.config.gateway_trigger_percent,
                    self.config.gateway_landing_percent,
                    self.config.gc_pressure_percent,
                    target_tokens=max(1, target - beyond),
                ),
                query=query_of(call.conversation.turns),
                roots=Roots(recent_turns=RECENT_TURNS, root_ids=roots),
                strategy=STRATEGY,
                force=attempt > 0,
                lean=True,
            )
            plan = self.engine.optimize(state.owner, state.session_id, options)
            self._remember(state, plan)
            note = "" if plan.feasible or not plan.triggered else "plan infeasible"
            edits, projected, seen, _ = self._project(call)
            if not plan.triggered or not plan.decisions or projected <= target:
                break
        return note, edits, projected

    @staticmethod
    def _remember(state: SessionState, plan: Plan) -> None:
        state.version += 1
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

    def _project(self, call: _Call) -> tuple[dict[tuple[int, int], Edit], int, int, int]:
        """The decisions that stuck as edits, the prompt's size with them, the
        size the engine sees (its chunks after the decisions), and the prompt's
        size as sent by the host. A turn unchanged since the last projection,
        under the same decisions, is not walked again."""
        edits: dict[tuple[int, int], Edit] = {}
        state = call.state
        total = seen = before = call.frame_tokens
        cache = state.projection
        projection: list[_TurnProjection] = []
        for t, turn in enumerate(call.conversation.turns):
            protected = turn.locked or t in call.protected
            entry = cache[t] if t < call.conversation.reused and t < len(cache) else None
            if entry is None or entry.version != state.version or entry.protected != protected:
                entry = self._project_turn(call, t, protected)
            projection.append(entry)
            edits.update(entry.edits)
            total += entry.total
            seen += entry.seen
            before += entry.before
        state.projection = projection
        return edits, total, seen, before

    @staticmethod
    def _project_turn(call: _Call, t: int, protected: bool) -> _TurnProjection:
        """A removed step keeps only its skeleton: the call with empty arguments
        and the result's placeholder (which restores the whole group); the model's
        narration beside its calls goes without one."""
        state = call.state
        turn = call.conversation.turns[t]
        steps = any(b.call_id for b in turn.blocks)
        entry = _TurnProjection(state.version, protected)
        for block, cid in zip(turn.blocks, call.ids[t], strict=True):
            tokens = state.tokens.get(cid, 0)
            decision = state.decisions.get(cid)
            entry.before += tokens + BLOCK_FRAMING_TOKENS
            if decision is None or protected:
                entry.total += tokens + BLOCK_FRAMING_TOKENS
                entry.seen += tokens
                continue
            shrunk = decision.action in (Action.TRIM, Action.MASK)
            if shrunk:
                entry.seen += decision.tokens_after
            if block.rewrite == Rewrite.NEVER:
                entry.total += tokens + BLOCK_FRAMING_TOKENS
            elif block.rewrite == Rewrite.DROP or (steps and not shrunk and not block.call_id):
                entry.edits.append((block.ref, Edit(None)))
            elif block.rewrite == Rewrite.CALL:
                entry.edits.append((block.ref, Edit("")))
                entry.total += EMPTIED_CALL_TOKENS
            else:
                shown = state.replacements.get(cid)
                if shown is None or shown[0] is not decision:
                    text = replacement(decision, state.session_id)
                    shown = (decision, text, estimate(decision, text))
                    state.replacements[cid] = shown
                entry.edits.append((block.ref, Edit(shown[1])))
                entry.total += shown[2] + BLOCK_FRAMING_TOKENS
        return entry

    def _fallback(self, call: _Call, raw: bytes, reason: str) -> Prepared:
        """No usable plan: the original when it fits, else local truncation."""
        tokens = call.frame_tokens + _total(call.conversation.turns, call.ids, call.sizes)
        if tokens <= call.ceiling:
            return Prepared(raw, Outcome.FALLBACK, tokens, tokens, note=reason)
        return self._truncate(call, {}, reason)

    def _truncate(self, call: _Call, edits: dict[tuple[int, int], Edit], reason: str) -> Prepared:
        """Drop whole exchanges, oldest first: first those the plan already
        emptied (their placeholders only point at the stash, which keeps the
        originals), down to the target; then, only while the prompt is over
        the ceiling, exchanges that still hold content."""
        turns = call.conversation.turns
        sizes = [_turn_tokens(call, t, edits) for t in range(len(turns))]
        total = call.frame_tokens + sum(sizes)
        before = call.frame_tokens + _total(turns, call.ids, call.sizes)
        target = call.ceiling * self.config.gc_target_percent / 100
        units = droppable_units(turns, call.protected)
        emptied = [u for u in units if not any(_holds_content(call, t, edits) for t in u)]
        held = [u for u in units if u not in emptied]
        dropped: set[int] = set()
        for group, limit in ((emptied, target), (held, call.ceiling)):
            for unit in group:
                if total <= limit:
                    break
                dropped.update(unit)
                total -= sum(sizes[t] for t in unit)
        kept_edits = {
            ref: e for ref, e in edits.items() if ref[0] not in _raw_indices(turns, dropped)
        }
        rendered = call.fmt.render(
            call.body, call.conversation, kept_edits, frozenset(_raw_indices(turns, dropped))
        )
        broken = _new_violations(call.fmt, call.body, rendered)
        if broken:
            tokens = before
            note = f"{reason}; truncation would break: {'; '.join(broken)}"[:300]
            return Prepared(_dump(call.body), Outcome.FALLBACK, tokens, tokens, note=note)
        over = "; still over the ceiling" if total > call.ceiling else ""
        return Prepared(
            _dump(rendered),
            Outcome.FALLBACK,
            before,
            total,
            note=f"{reason}; truncated {len(dropped)} turns{over}",
        )


@dataclass
class _TurnProjection:
    """One turn under the decisions of `version`: its edits and sizes."""

    version: int
    protected: bool
    edits: list[tuple[tuple[int, int], Edit]] = field(default_factory=list)
    total: int = 0
    seen: int = 0
    before: int = 0


def _total(turns: Sequence[Turn], ids: list[list[str]], tokens: Mapping[str, int]) -> int:
    return sum(
        tokens.get(cid, 0) + BLOCK_FRAMING_TOKENS for t in range(len(turns)) for cid in ids[t]
    )


def _turn_tokens(call: _Call, t: int, edits: Mapping[tuple[int, int], Edit]) -> int:
    total = 0
    for block, cid in zip(call.conversation.turns[t].blocks, call.ids[t], strict=True):
        edit = edits.get(block.ref)
        if edit is None:
            total += call.sizes.get(cid, 0) + BLOCK_FRAMING_TOKENS
        elif block.rewrite == Rewrite.CALL:
            total += EMPTIED_CALL_TOKENS
        elif edit.text is not None:
            total += len(edit.text) // 3 + 1 + BLOCK_FRAMING_TOKENS
    return total


def _holds_content(call: _Call, t: int, edits: Mapping[tuple[int, int], Edit]) -> bool:
    """Whether turn `t` still carries something of its own: a block sent as
    the host wrote it, or an excerpt or masked placeholder of one."""
    for block, cid in zip(call.conversation.turns[t].blocks, call.ids[t], strict=True):
        edit = edits.get(block.ref)
        if edit is None:
            return True
        decision = call.state.decisions.get(cid)
        if edit.text and decision is not None and decision.action in (Action.TRIM, Action.MASK):
            return True
    return False


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
    return orjson.dumps(body)
