"""The engine's collector: mark one session, and when a collection is due,
score and plan it, all over one snapshot, with the engine's knobs (`Config`
and `Tuning`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ctxopt.config import Config
from ctxopt.engine.kept_plans import KeptPlans
from ctxopt.engine.noted_counts import NotedCounts
from ctxopt.engine.session_checks import check_query_embedding
from ctxopt.model import OptimizeOptions, Plan, Strategy, Weights
from ctxopt.planner.knobs import Tuning
from ctxopt.planner.plan import idle_plan, is_triggered, plan_session
from ctxopt.planner.reuse import LastResult, Stamp
from ctxopt.planner.texts import Trimmer
from ctxopt.planner.values import TextTools
from ctxopt.roots import Marks, mark
from ctxopt.scoring.hybrid import Scores, score_session
from ctxopt.session import Session, SessionView
from ctxopt.text.analyzer import Analyzer
from ctxopt.tokens import TokenCounter


class Collector:
    """The scorer and planner (`planner.plan_session`) as the engine runs them
    (callers hold the session lock)."""

    def __init__(
        self, config: Config, tuning: Tuning, analyzer: Analyzer, counter: TokenCounter
    ) -> None:
        self.config = config
        self.tuning = tuning
        self.analyzer = analyzer
        self.counter = counter
        self.noted = NotedCounts(counter)  # what plans count with
        self.trimmer = Trimmer(analyzer)
        self._last_plans: LastResult[Plan] = LastResult()
        self.kept = KeptPlans(config, tuning, counter)  # the last plans, kept at close

    def scores(
        self,
        session: SessionView,
        terms: list[str],
        embedding: Sequence[float],
        marks: Marks,
        weights: Weights,
    ) -> Scores:
        return score_session(
            session,
            query_terms=terms,
            query_embedding=tuple(embedding),
            marks=marks,
            weights=weights,
            half_life_turns=self.config.recency_half_life_turns,
            old_generation_after=self.config.old_generation_after,
            neighbour_share=self.config.neighbour_share,
            feedback_weight=self.tuning.feedback_weight,
            feedback_docs=self.tuning.feedback_docs,
            feedback_terms=self.tuning.feedback_terms,
        )

    def plan(self, session: Session, options: OptimizeOptions) -> Plan:
        """Mark; below the threshold that is all, else score and plan. Marking,
        scoring and planning read one snapshot of the session. A plan is a
        function of the session's chunks, its collection count and the options
        alone, so the same call on an unchanged session gets the last plan back
        (a copy: the caller sets its own `server_ms`), as does a restart's first
        call from the plan the last process kept (engine/kept_plans.py)."""
        if options.strategy == Strategy.UNSPECIFIED:
            options = replace(options, strategy=Strategy.HYBRID)
        check_query_embedding(session.embedding_dim, options.query_embedding)
        made_from = Stamp((session.revision, session.collections, options), ())
        plan = self._last_plans.get(session, made_from)
        if plan is None:
            plan = self.kept.read_back(session, options) or self._plan(session, options)
            self._last_plans.put(session, made_from, plan)
            self.kept.note(session, options, plan)
        return replace(plan)

    def _plan(self, session: Session, options: OptimizeOptions) -> Plan:
        view = session.view()
        marks = mark(view, options.roots)
        if not is_triggered(view, options):
            return idle_plan(view, options, marks, self.tuning)
        terms = self.analyzer.terms(options.query)
        scores = self.scores(view, terms, options.query_embedding, marks, options.weights)
        query_terms = frozenset(terms)

        def trim(chunk_id: str, text: str, stash: str, goal: int, tokens: int) -> str:
            return self.trimmer.trim(chunk_id, text, stash, query_terms, goal, tokens)

        book = session.line_book() if options.strategy != Strategy.TRUNCATE else None
        return plan_session(
            view,
            options,
            scores,
            TextTools(
                trim=trim,
                count_tokens=self.noted.count,
                book=book,
                reuse_key=(self.trimmer, query_terms),
            ),
            tuning=self.tuning,
            incremental_batch=options.incremental_batch or self.config.incremental_batch,
            old_generation_after=self.config.old_generation_after,
        )
