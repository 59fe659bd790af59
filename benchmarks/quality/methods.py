"""What each method keeps of a case under a token budget.

ctxopt's engine (`default`, `truncate`, `budget`) sees the chunks, the query and
the roots. The baselines and peers keep the case's mandatory chunks (SWE: the
system prompt, the task and the last two messages) and choose among the rest
with what is left of the budget:

- `recent`: newest first, each turn that still fits;
- `random`: a seeded shuffle, greedily while chunks fit;
- `bm25`: rank_bm25 (Okapi) over the engine's analyzer terms, by score;
- `gemini-cli`: Gemini CLI's `findCompressSplitPoint` with its preserve
  fraction set to the budget; what follows the split stays verbatim (the CLI
  would summarise the rest with an LLM, which is not counted here);
- `langchain`: langchain-core `trim_messages(strategy="last")`;
- `obs-mask`: observation masking ("The Complexity Trap", arXiv 2508.21433):
  every turn stays, tool outputs other than the newest are replaced by a short
  placeholder, as many of the newest outputs verbatim as the budget allows;
  if still over budget, the oldest turns go.

A case the engine refuses (a request over one of the service's limits) is
not a crash: the method answers with what a client does then (its local
fallback, newest first, as `recent`), marked `refused` so the run counts it.

For needed-later recall every method sees each trajectory's steps in order;
the engine's `optimize_context` keeps the conversation warm between calls, so
each step adds only the new messages to its session and indexes, as an agent
that sends its growing history would.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ctxopt.engine import Engine
from ctxopt.errors import CtxoptError
from ctxopt.model import (
    Action,
    Budget,
    Chunk,
    ChunkKind,
    OptimizeOptions,
    Plan,
    Role,
    Strategy,
    Weights,
)
from rank_bm25 import BM25Okapi

from benchmarks.quality.datasets import Case

PEERS_DIR = Path(__file__).resolve().parents[1] / "peers"
GEMINI_CORE = PEERS_DIR / "node_modules" / "@google" / "gemini-cli-core" / "package.json"
RANDOM_SEED = 20240607
NPM_TIMEOUT_S = 600
NODE_TIMEOUT_S = 600
OBS_MASK_PLACEHOLDER = "[Old environment observation omitted for brevity.]"

# Why a chunk is not in the prompt as is (the loss-by-cause table).
CAUSE_TRIM = "TRIM excerpt"
CAUSE_MASK = "MASK placeholder"
CAUSE_REPAIR = "coherence repair"
CAUSE_GROUP = "removed with its group"
CAUSE_VALUE = "STASH by value per token"
CAUSE_NOT_CHOSEN = "not chosen"


class PeerUnavailable(Exception):
    """A peer that cannot be installed or run here; the message says why."""


@dataclass(frozen=True, slots=True)
class Kept:
    """A method's prompt: kept ids in prompt order, the prompt's tokens, the
    text that replaced a kept chunk (TRIM excerpt or MASK placeholder), the ids
    masked (their content is gone), and, for a choice made ahead in `prepare`,
    the ms it took (otherwise the runner times `select`), per chunk not
    kept as is, why (one of the CAUSE_* labels; engine methods only), and,
    when the engine refused the case, its error (the prompt is then the
    client's fallback)."""

    ids: tuple[str, ...]
    tokens: int
    replacements: Mapping[str, str] = field(default_factory=dict)
    masked: frozenset[str] = frozenset()
    ms: float | None = None
    causes: Mapping[str, str] = field(default_factory=dict)
    refused: str = ""

    def content_ids(self) -> frozenset[str]:
        """Chunks whose content is still in the prompt (verbatim or excerpted)."""
        return frozenset(self.ids) - self.masked

    def text(self, case: Case) -> str:
        by_id = {c.id: c.text for c in case.chunks}
        return "\n".join(self.replacements.get(i, by_id[i]) for i in self.ids)


class Method(ABC):
    name: str
    # Query-independent choices are computed once per history and budget.
    query_dependent: bool = True
    # Needs nothing beyond the Python environment (the smoke run uses these).
    fast: bool = True
    # Third-party code: a failure is reported and the run goes on without it.
    peer: bool = False

    def prepare(self, cases: Sequence[Case], budgets: Sequence[float]) -> None:  # noqa: B027
        """Precompute for all cases at once (a peer in another process)."""

    @abstractmethod
    def select(self, case: Case, budget: float) -> Kept: ...

    def select_step(self, trajectory: str, case: Case, budget: float) -> Kept:
        """A step of a trajectory, steps in order (needed-later recall)."""
        return self.select(case, budget)

    def end_trajectory(self, trajectory: str) -> None:  # noqa: B027
        """Forget what `select_step` kept of a trajectory."""


def budget_tokens(case: Case, budget: float) -> int:
    return int(case.prompt_tokens * budget)


def fill(case: Case, order: Iterable[str], budget: float) -> Kept:
    """Keep the mandatory chunks, then each chunk in `order` that fits what
    is left of the budget (one that does not is skipped, not a stop)."""
    tokens = {c.id: c.tokens for c in case.chunks}
    kept = set(case.mandatory)
    room = budget_tokens(case, budget) - sum(tokens[i] for i in kept)
    for chunk_id in order:
        if chunk_id in kept:
            continue
        if tokens[chunk_id] <= room:
            kept.add(chunk_id)
            room -= tokens[chunk_id]
    ids = tuple(c.id for c in case.chunks if c.id in kept)
    return Kept(ids, sum(tokens[i] for i in ids))


def optional_chunks(case: Case) -> list[Chunk]:
    return [c for c in case.chunks if c.id not in case.mandatory]


def room_share(case: Case, budget: float) -> float:
    """The budget left after the mandatory chunks, as a share of the rest."""
    optional = sum(c.tokens for c in optional_chunks(case))
    mandatory = case.prompt_tokens - optional
    return (budget_tokens(case, budget) - mandatory) / optional if optional else 1.0


# ---- ctxopt ------------------------------------------------------------------


DEFAULT_WEIGHTS = Weights()


class EngineMethod(Method):
    """ctxopt's stateless `optimize_context`, one shared engine."""

    def __init__(
        self, name: str, engine: Engine, strategy: Strategy, weights: Weights = DEFAULT_WEIGHTS
    ) -> None:
        self.name = name
        self.engine = engine
        self.strategy = strategy
        self.weights = weights

    def options(self, case: Case, budget: float) -> OptimizeOptions:
        return OptimizeOptions(
            budget=Budget(
                context_limit_tokens=case.prompt_tokens,
                target_tokens=max(1, budget_tokens(case, budget)),
            ),
            query=case.query,
            roots=case.roots,
            weights=self.weights,
            strategy=self.strategy,
            force=True,
        )

    def select(self, case: Case, budget: float) -> Kept:
        try:
            plan = self.engine.optimize_context(case.chunks, self.options(case, budget))
        except CtxoptError as err:
            return replace(client_fallback(case, budget), refused=str(err))
        return kept_of(plan)


def client_fallback(case: Case, budget: float) -> Kept:
    """What a client sends when the service refuses: the newest turns that fit."""
    return fill(case, [c.id for c in reversed(case.chunks)], budget)


def kept_of(plan: Plan) -> Kept:
    shrunk = [d for d in plan.decisions if d.action in (Action.TRIM, Action.MASK)]
    repaired = {r.chunk_id for r in plan.repairs}
    causes = {}
    for d in plan.decisions:
        if d.action == Action.TRIM:
            causes[d.chunk_id] = CAUSE_TRIM
        elif d.action == Action.MASK:
            causes[d.chunk_id] = CAUSE_MASK
        elif d.chunk_id in repaired:
            causes[d.chunk_id] = CAUSE_REPAIR
        elif any(r.startswith("group_with:") for r in d.reasons):
            causes[d.chunk_id] = CAUSE_GROUP
        else:
            causes[d.chunk_id] = CAUSE_VALUE
    return Kept(
        tuple(plan.kept_ids),
        plan.tokens_after,
        {d.chunk_id: d.replacement_text for d in shrunk},
        frozenset(d.chunk_id for d in shrunk if d.action == Action.MASK),
        causes=causes,
    )


# ---- baselines ---------------------------------------------------------------


class Recent(Method):
    name = "recent"
    query_dependent = False

    def select(self, case: Case, budget: float) -> Kept:
        return client_fallback(case, budget)


class RandomChoice(Method):
    name = "random"
    query_dependent = False

    def select(self, case: Case, budget: float) -> Kept:
        order = [c.id for c in case.chunks]
        random.Random(f"{RANDOM_SEED}:{case.key}:{budget}").shuffle(order)
        return fill(case, order, budget)


class ObsMask(Method):
    """Observation masking (arXiv 2508.21433): every turn stays; tool outputs
    but the newest are a placeholder; then the oldest turns go if needed."""

    name = "obs-mask"
    query_dependent = False

    def __init__(self, count: Callable[[str], int]) -> None:
        self.placeholder_tokens = count(OBS_MASK_PLACEHOLDER)

    def select(self, case: Case, budget: float) -> Kept:
        room = budget_tokens(case, budget)
        outputs = [
            c
            for c in optional_chunks(case)
            if c.kind == ChunkKind.TOOL_RESULT and c.role != Role.SYSTEM
        ]
        masked = {c.id for c in outputs}
        size = {c.id: self.placeholder_tokens if c.id in masked else c.tokens for c in case.chunks}
        total = sum(size.values())
        for chunk in reversed(outputs):  # the newest outputs verbatim while they fit
            grown = total + chunk.tokens - self.placeholder_tokens
            if grown > room:
                break
            masked.discard(chunk.id)
            size[chunk.id] = chunk.tokens
            total = grown
        kept = [c.id for c in case.chunks]
        for chunk in optional_chunks(case):  # still over: the oldest turns go
            if total <= room:
                break
            kept.remove(chunk.id)
            masked.discard(chunk.id)
            total -= size[chunk.id]
        replacements = {i: OBS_MASK_PLACEHOLDER for i in masked}
        return Kept(tuple(kept), total, replacements, frozenset(masked))


class Bm25(Method):
    """Plain BM25 by score: no roots, no recency, no structure."""

    name = "bm25"

    def __init__(self, analyze: Callable[[str], list[str]]) -> None:
        self.analyze = analyze
        self.indexed: tuple[str, BM25Okapi] | None = None  # the latest history's index

    def index(self, case: Case) -> BM25Okapi:
        if self.indexed is None or self.indexed[0] != case.key:
            self.indexed = (case.key, BM25Okapi([self.analyze(c.text) for c in case.chunks]))
        return self.indexed[1]

    def select(self, case: Case, budget: float) -> Kept:
        scores = self.index(case).get_scores(self.analyze(case.query))
        ranked = sorted(range(len(case.chunks)), key=lambda i: (-scores[i], -i))  # ties: newest
        return fill(case, [case.chunks[i].id for i in ranked], budget)


# ---- peers -------------------------------------------------------------------


def gemini_content(role: Role, text: str) -> dict[str, Any]:
    return {"role": "model" if role == Role.MODEL else "user", "parts": [{"text": text}]}


def ensure_gemini_core() -> None:
    """Install the pinned peer once (`npm ci`); later runs find it in place."""
    if GEMINI_CORE.exists():
        return
    if shutil.which("npm") is None or shutil.which("node") is None:
        raise PeerUnavailable("node and npm are not on PATH")
    result = subprocess.run(
        ["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=PEERS_DIR,
        capture_output=True,
        text=True,
        timeout=NPM_TIMEOUT_S,
        check=False,
    )
    if result.returncode != 0 or not GEMINI_CORE.exists():
        raise PeerUnavailable(f"npm ci in {PEERS_DIR} failed: {result.stderr.strip()[-300:]}")


class GeminiCli(Method):
    """Everything after Gemini CLI's split point, verbatim. All cases go to one
    Node process (benchmarks/peers/split_points.mjs); the split depends only on
    the history, so it is computed once per history and budget."""

    name = "gemini-cli"
    query_dependent = False
    fast = False
    peer = True

    def __init__(self) -> None:
        self.splits: dict[tuple[str, float], tuple[int, float]] = {}

    def prepare(self, cases: Sequence[Case], budgets: Sequence[float]) -> None:
        ensure_gemini_core()
        histories = list({c.key: c for c in cases}.values())
        items = [
            {
                "contents": [gemini_content(c.role, c.text) for c in optional_chunks(case)],
                "preserve": [min(max(room_share(case, b), 0.0), 1.0) for b in budgets],
            }
            for case in histories
        ]
        try:
            result = subprocess.run(
                ["node", "split_points.mjs"],
                cwd=PEERS_DIR,
                input=json.dumps({"items": items}),
                capture_output=True,
                text=True,
                timeout=NODE_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise PeerUnavailable(f"node split_points.mjs did not run: {err}") from None
        if result.returncode != 0:
            raise PeerUnavailable(f"node split_points.mjs failed: {result.stderr.strip()[-300:]}")
        answers = json.loads(result.stdout)["items"]
        for case, answer in zip(histories, answers, strict=True):
            for budget, split, ms in zip(budgets, answer["splits"], answer["ms"], strict=True):
                self.splits[(case.key, budget)] = (int(split), float(ms))

    def select(self, case: Case, budget: float) -> Kept:
        split, ms = self.splits[(case.key, budget)]
        verbatim = [c.id for c in optional_chunks(case)[split:]]
        tokens = {c.id: c.tokens for c in case.chunks}
        kept = case.mandatory | set(verbatim)
        ids = tuple(c.id for c in case.chunks if c.id in kept)
        return Kept(ids, sum(tokens[i] for i in ids), ms=ms)


class LangChainTrim(Method):
    """langchain-core `trim_messages(strategy="last", include_system=True,
    start_on="human")` with cl100k counts; the system prompt goes in as the
    system message, the other mandatory chunks are kept beside its choice."""

    name = "langchain"
    query_dependent = False
    peer = True

    def __init__(self) -> None:
        try:
            from langchain_core.messages import (  # optional dependency: imported on use
                AIMessage,
                HumanMessage,
                SystemMessage,
                trim_messages,
            )
        except ImportError as err:
            raise PeerUnavailable(
                f"langchain-core is not installed ({err}); pip install -e '.[quality]'"
            ) from None
        self.trim = trim_messages
        self.kinds = {Role.SYSTEM: SystemMessage, Role.MODEL: AIMessage, Role.USER: HumanMessage}

    def select(self, case: Case, budget: float) -> Kept:
        tokens = {c.id: c.tokens for c in case.chunks}
        system = [c for c in case.chunks if c.role == Role.SYSTEM and c.id in case.mandatory]
        candidates = system + optional_chunks(case)
        messages = [
            self.kinds.get(c.role, self.kinds[Role.USER])(c.text, id=c.id) for c in candidates
        ]
        others = sum(tokens[i] for i in case.mandatory) - sum(c.tokens for c in system)
        trimmed = self.trim(
            messages,
            max_tokens=max(0, budget_tokens(case, budget) - others),
            token_counter=lambda ms: sum(tokens[str(m.id)] for m in ms),
            strategy="last",
            include_system=True,
            start_on="human",
        )
        kept = case.mandatory | {str(m.id) for m in trimmed}
        ids = tuple(c.id for c in case.chunks if c.id in kept)
        return Kept(ids, sum(tokens[i] for i in ids))
