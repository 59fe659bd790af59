"""Query terms as a session reads them: the rare terms that link a query to
the few chunks holding them."""

from __future__ import annotations

from collections.abc import Iterable

from ctxopt.session import SessionView


def rare_terms(session: SessionView, terms: Iterable[str], max_share: float) -> frozenset[str]:
    """The query terms at most `max_share` of the session's chunks hold (and
    always those at most two hold: the chunk that asks and the one it points at)."""
    if max_share <= 0:
        return frozenset()
    limit = max(2, int(max_share * len(session)))
    index = session.index
    return frozenset(t for t in set(terms) if 0 < index.document_frequency(t) <= limit)
