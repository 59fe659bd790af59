"""One pipeline for every wire format: parse, sync the new chunks, plan, apply, check.

Per call: the format parses the body into turns of blocks; each block becomes
a chunk whose id is its position plus a hash of its content, so what the host
resends is recognised, and only chunks the engine lacks are appended (chunks
the host no longer sends are removed). The decisions of the last collection
stick: they are applied again to the same chunks, so the prompt's prefix is
byte-identical from call to call and provider caches stay warm.

Where it decides to collect, and under which lock: `_run` projects the request
under the decisions that stuck (`projection.project`), first shrinks the tool
outputs the model answered since the last call, once each (`_shrink_arrivals`,
arrivals.py), then asks the schedule (schedule.py: the provider's cache prices
and the conversation's growth) whether to collect now and how deep; only then
does `_collect` call `Engine.optimize` for a full collection. All of it runs
under the conversation's `ConversationState.lock`, which `_prepare` holds from
parsing the body to the bytes that go upstream (state.py says what it guards;
the engine package's docstring gives the whole lock order).

Never worse: an engine failure, an infeasible plan or a rewrite that breaks
the format's rules sends the original when it fits the ceiling, else a local
truncation (truncation.py) that drops whole exchanges (oldest first) and keeps
the rules.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

import orjson

from ctxopt.api.gateway import hosts, schedule, windows
from ctxopt.api.gateway.arrivals import ARRIVAL_MIN_TOKENS, arrivals, shrink_options
from ctxopt.api.gateway.chunks import engine_chunks, query_of
from ctxopt.api.gateway.formats.conversation import (
    Conversation,
    Edit,
    JsonObject,
    Resume,
    WireFormat,
    chunk_id,
    digest,
    first_prompt,
    latest_turns,
)
from ctxopt.api.gateway.generations import (
    Kind,
    latest_count,
    latest_start,
    minor_floor,
    old_prefix,
    promoted,
)
from ctxopt.api.gateway.prepared import Outcome, Prepared
from ctxopt.api.gateway.projection import (
    Call,
    Projection,
    Ref,
    fixed_prefix,
    project,
    tokens_as_sent,
    unchanged_prefix,
)
from ctxopt.api.gateway.reuse import Bodies
from ctxopt.api.gateway.schedule import Collection
from ctxopt.api.gateway.sent import Sent
from ctxopt.api.gateway.sessions import SESSION_HEADER, namespace_of, session_of
from ctxopt.api.gateway.state import ConversationState, ConversationStates
from ctxopt.api.gateway.threads import Threads
from ctxopt.api.gateway.truncation import truncate
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import Budget, Chunk, OptimizeOptions, Role, Roots, Strategy
from ctxopt.prices import price_of

log = logging.getLogger("ctxopt.gateway")

# The budget order (tiers, what the model quoted, age) kept more than the service's default
# on the per-host replay.
STRATEGY = Strategy.BUDGET
MAX_PASSES = 3  # plans per collection at most (see `_passes`)
# A minor collection this share of the ceiling over its target counts as landed: a
# full one would rewrite the whole prompt to gain that little.
MINOR_SLACK = 0.05


class Pipeline:
    def __init__(self, engine: Engine, config: Config) -> None:
        self.engine = engine
        self.config = config
        self.conversations = ConversationStates()
        self.threads = Threads()
        self.bodies = Bodies()  # the last bodies parsed, for the next call's unchanged prefix
        self.sent = Sent()  # the last bodies sent, for the next call's unchanged prefix

    def prepare(
        self, fmt: WireFormat, path: str, raw: bytes, headers: Mapping[str, str], owner: str
    ) -> Prepared:
        """The request to send upstream for `raw` (headers with lower-case names),
        in a session of `owner` (the ctxopt identity)."""
        started = time.perf_counter()
        mode = self.config.gateway_mode
        if mode == "off":
            return self.passed_through(fmt, raw)
        prepared = self._prepare(fmt, path, raw, headers, owner, shadow=mode == "shadow")
        if mode == "shadow" and prepared.body is not raw:
            # the plan is made, remembered and reported; the original goes upstream
            prepared.body, prepared.outcome = raw, Outcome.SHADOW
        return self._logged(fmt, prepared, started)

    def passed_through(self, fmt: WireFormat, raw: bytes = b"") -> Prepared:
        """Mode off: the request goes up as sent, unread (the app may stream `raw`
        up without this pipeline ever holding it)."""
        prepared = Prepared(raw, Outcome.PASS_THROUGH, note="gateway mode off")
        return self._logged(fmt, prepared, time.perf_counter())

    def _logged(self, fmt: WireFormat, prepared: Prepared, started: float) -> Prepared:
        """`prepared` with its log line's fields."""
        mode = self.config.gateway_mode
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

    def report_usage(self, state: ConversationState, prompt_tokens: int) -> None:
        """The provider's prompt size for the last request sent (`Calibration`)."""
        state.calibration.report(prompt_tokens)

    def _prepare(
        self,
        fmt: WireFormat,
        path: str,
        raw: bytes,
        headers: Mapping[str, str],
        owner: str,
        *,
        shadow: bool,
    ) -> Prepared:
        namespace = namespace_of(headers, owner)
        header = headers.get(SESSION_HEADER, "")
        try:
            body = self.bodies.parse(raw, fmt.list_key, (owner, namespace, fmt.name, header))
            opening = fmt.opening(body)
        except (ValueError, TypeError, AttributeError, KeyError, IndexError) as e:
            return Prepared(raw, Outcome.PASS_THROUGH, note=f"not parsed: {e}"[:200])
        session_id = session_of(fmt.name, namespace, header, opening)
        followed = None
        try:
            if not header.strip():  # which live conversation this one continues

                def last(session: str) -> Conversation | None:
                    return self.conversations.get(session, owner).conversation

                followed = self.threads.follow(fmt, body, path, session_id, last)
                session_id = followed.session_id
        except (ValueError, TypeError, AttributeError, KeyError, IndexError) as e:
            return Prepared(raw, Outcome.PASS_THROUGH, note=f"not parsed: {e}"[:200])
        state = self.conversations.get(session_id, owner)
        with state.lock:
            try:
                if followed is not None and followed.previous is state.conversation:
                    conversation = followed.conversation
                else:
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
                threshold=hosts.compression_threshold(headers.get(hosts.COMPRESSION_HEADER)),
            )
            prepared = self._run(fmt, body, raw, conversation, state, limit.tokens)
            # in shadow mode the original goes upstream: the provider's count is of it
            state.calibration.sent(prepared.tokens_before if shadow else prepared.tokens_after)
        prepared.session_id = session_id
        prepared.state = state
        prepared.fields = body
        prepared.log.update(host=limit.host.value, ceiling=limit.tokens, window=window)
        prepared.log["model"] = conversation.model  # for the usage ledger's prices
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
        state: ConversationState,
        ceiling: int,
    ) -> Prepared:
        """Sync, project, and collect when the projection reaches the threshold.
        The caller holds `state.lock`."""
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
        scaled = int(ceiling / state.calibration.scale)
        chunks = engine_chunks(turns, ids, reused)
        try:
            self._sync(state, frame, chunks, {i for row in ids for i in row})
        except Exception as e:  # never worse: the request goes on without the engine
            log.warning("gateway: engine sync failed for %s: %s", state.session_id, e)
            state.forget_mapping()
            every = (*frame, *engine_chunks(turns, ids, 0))
            sizes = {c.id: c.tokens or len(c.text) // 3 + 1 for c in every}
            frame_tokens = sum(sizes[c.id] for c in frame)
            call = Call(
                fmt, body, conversation, ids, frozenset(protected), frame_tokens, scaled, sizes
            )
            return self._fallback(call, state, raw, f"engine: {e}"[:200])
        state.mapped(conversation, ids)
        try:
            self._forget_restored(state)
        except Exception as e:  # never worse: the decisions that stuck still apply
            log.warning("gateway: restored check failed for %s: %s", state.session_id, e)
        frame_tokens = sum(state.tokens.get(c.id, 0) for c in frame)
        call = Call(
            fmt, body, conversation, ids, frozenset(protected), frame_tokens, scaled, state.tokens
        )
        projection = self._project(call, state)
        note = ""
        try:
            if self._shrink_arrivals(call, state, projection):
                projection = self._project(call, state)
            size = projection.tokens_after
            growth = state.pace.observe(size)
            trigger = self.config.gateway_trigger_percent / 100
            # the prefixes are scans of every turn: only a call that is due needs them
            if schedule.crosses(size=size, growth=growth, ceiling=scaled, trigger_share=trigger):
                full_landing, kept = None, 0
                if self.config.gateway_generations:
                    full_landing = self.config.gateway_full_landing_percent / 100
                    kept = old_prefix(call, projection.turns, state.generations.old)
                due = schedule.schedule(
                    price_of(conversation.model, fmt.name.partition("-")[0]).cache,
                    size=size,
                    growth=growth,
                    ceiling=scaled,
                    trigger_share=trigger,
                    landing_share=self.config.gateway_landing_percent / 100,
                    full_landing_share=full_landing,
                    fixed=fixed_prefix(call, projection.turns, first),
                    old_prefix=kept,
                )
                if due is not None:
                    note, projection = self._collect(call, state, projection, due, first)
        except Exception as e:  # never worse, as above
            log.warning("gateway: plan failed for %s: %s", state.session_id, e)
            return self._fallback(call, state, raw, f"engine: {e}"[:200])
        before, after = projection.tokens_before, projection.tokens_after
        if not projection.edits:
            if before > scaled:
                return self._fallback(call, state, raw, "over the ceiling with nothing to prune")
            return Prepared(raw, Outcome.BELOW_THRESHOLD, before, before)
        if after > scaled:
            reason = f"{note} plan over the ceiling".strip()
            return self._truncate(call, state, projection.edits, reason)
        # Edits replace the content of text and result blocks, empty a removed
        # step's call arguments and drop narration and signed blocks whole; no
        # call, id, role or turn goes, so the format's rules hold by
        # construction here; a truncation that drops turns is checked.
        stable = unchanged_prefix(conversation, projection.turns, conversation.renders.basis)
        resume = Resume(stable, projection.turns)
        rendered = fmt.render(body, conversation, projection.edits, frozenset(), resume)
        sent = self.sent.dump((state.owner, state.session_id), rendered, fmt.list_key)
        return Prepared(sent, Outcome.OPTIMIZED, before, after, note=note)

    def _sync(
        self, state: ConversationState, frame: list[Chunk], chunks: list[Chunk], present: set[str]
    ) -> None:
        """The engine session holds what the host sends: `chunks` (the turns not
        reused from the last call) appended when new, chunks the host no longer
        sends removed (decided ones are not sent again)."""
        present = present | {c.id for c in frame}
        stale = sorted(state.live - present)
        owner, session = state.owner, state.session_id
        if stale:
            self.engine.remove(owner, session, stale, stash_originals=False)
            state.removed(stale)
        state.not_sent(present)
        new = [c for c in (*frame, *chunks) if c.id not in state.tokens]
        if new:
            state.appended(self.engine.append(owner, session, new).chunks)

    def _forget_restored(self, state: ConversationState) -> None:
        """Decisions on chunks the engine session holds whole again (brought back
        through MCP, gRPC or the command line) stop sticking: the host's next
        request carries the original instead of the placeholder or excerpt."""
        state.just_restored = ()  # an engine failure below restores nothing this call
        decided = state.returnable
        state.restored(
            self.engine.held_whole(state.owner, state.session_id, decided) if decided else []
        )

    def _shrink_arrivals(
        self, call: Call, state: ConversationState, projection: Projection
    ) -> bool:
        """Shrink the tool outputs the model answered since the last call, once
        each (arrivals.py); whether any decision changed."""
        found = arrivals(
            call.conversation.turns,
            call.ids,
            judged=state.judged_turns,
            protected=call.protected,
            tokens=state.tokens,
            min_tokens=ARRIVAL_MIN_TOKENS,
        )
        state.judged(found.upto)
        share = self.config.gateway_arrival_share
        if share <= 0 or not found.outputs:
            return False
        options = shrink_options(
            found,
            live=state.live,
            tokens=state.tokens,
            seen=projection.engine_tokens,
            ceiling=call.ceiling,
            share=share,
            query=query_of(call.conversation.turns),
        )
        plan = self.engine.optimize(state.owner, state.session_id, options)
        state.planned(plan)
        return bool(plan.decisions)

    def _collect(
        self,
        call: Call,
        state: ConversationState,
        projection: Projection,
        due: Collection,
        task: int | None,
    ) -> tuple[str, Projection]:
        """A minor collection when generations are on and it can land (its
        floor is under the target, generations.py), else a full one, which
        starts a new old generation (`task`: the first prompt's turn)."""
        roots = tuple(i for t in sorted(call.protected) for i in call.ids[t] if i in state.live)
        roots += tuple(i for i in state.just_restored if i in state.live)
        old = state.generations.old
        after = -1 if task is None else task
        share = self.config.gateway_recent_share
        recent = latest_count(
            projection.turns,
            after=after,
            most=self.config.gateway_recent_turns,
            room=call.ceiling - due.fixed,
            share=share,
        )

        def latest(target: int) -> int:
            return latest_start(projection.turns, after=after, room=target - due.fixed, share=share)

        def whole_from(start: int) -> tuple[str, ...]:
            return tuple(i for row in call.ids[start:] for i in row if i in state.live)

        if self.config.gateway_generations and old:
            floor = minor_floor(call, projection.turns, old, recent_turns=recent)
            if floor <= due.target:
                frozen = tuple(i for i in sorted(old) if i in state.live)
                kept = roots + frozen + whole_from(latest(due.target))
                note, projection = self._passes(
                    call, state, projection, due.target, Roots(recent_turns=recent, root_ids=kept)
                )
                if projection.tokens_after <= due.target + MINOR_SLACK * call.ceiling:
                    return f"{Kind.MINOR.value} collection {note}".strip(), projection
        start = latest(due.full_target)
        kept = roots + whole_from(start)
        note, projection = self._passes(
            call, state, projection, due.full_target, Roots(recent_turns=recent, root_ids=kept)
        )
        state.generations.promote(promoted(call, recent_turns=recent, kept_from=start))
        return f"{Kind.FULL.value} collection {note}".strip(), projection

    def _passes(
        self,
        call: Call,
        state: ConversationState,
        projection: Projection,
        target: int,
        roots: Roots,
    ) -> tuple[str, Projection]:
        """Run plans until the prompt lands at the target; their decisions
        replace the ones that stuck on the chunks they decide (`roots`, the
        latest turns and the chunks named, are kept as they are). The engine
        sees its own view of the chunks (a stashed chunk costs it nothing), so
        each pass restates the ceiling and the target without what the request
        carries beyond that view."""
        note = ""
        for _ in range(MAX_PASSES):
            options = OptimizeOptions(
                budget=Budget(
                    context_limit_tokens=max(1, call.ceiling - projection.overhead),
                    threshold_percent=self.config.gateway_trigger_percent,
                    target_percent=self.config.gateway_landing_percent,
                    pressure_percent=self.config.gc_pressure_percent,
                    target_tokens=max(1, target - projection.overhead),
                ),
                query=query_of(call.conversation.turns),
                roots=roots,
                strategy=STRATEGY,
                force=True,  # the schedule decided (on the next call's size)
                lean=True,
            )
            plan = self.engine.optimize(state.owner, state.session_id, options)
            state.planned(plan)
            note = "" if plan.feasible or not plan.triggered else "plan infeasible"
            projection = self._project(call, state)
            if not plan.triggered or not plan.decisions or projection.tokens_after <= target:
                break
        return note, projection

    @staticmethod
    def _project(call: Call, state: ConversationState) -> Projection:
        projection = project(call, state, state.projection)
        state.projected(projection)
        return projection

    def _fallback(self, call: Call, state: ConversationState, raw: bytes, reason: str) -> Prepared:
        """No usable plan: the original when it fits, else local truncation."""
        tokens = tokens_as_sent(call)
        if tokens <= call.ceiling:
            return Prepared(raw, Outcome.FALLBACK, tokens, tokens, note=reason)
        return self._truncate(call, state, {}, reason)

    def _truncate(
        self, call: Call, state: ConversationState, edits: Mapping[Ref, Edit], reason: str
    ) -> Prepared:
        target = call.ceiling * self.config.gateway_landing_percent / 100
        cut = truncate(call, edits, state.decisions, target)
        note = cut.note(reason)
        return Prepared(
            _dump(cut.body), Outcome.FALLBACK, cut.tokens_before, cut.tokens_after, note=note
        )


def _dump(body: JsonObject) -> bytes:
    return orjson.dumps(body)
