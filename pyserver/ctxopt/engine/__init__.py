"""The engine: the one in-process API the fronts call (`Engine`), and what it
is made of, top down:

- `engine`: `Engine`, every call the fronts make.
- `collector`: mark, score and plan one snapshot with the engine's knobs.
- `sessions`: live sessions over the store (loading, the one write path,
  compaction).
- `session_checks`: checks of a request against a session's state (capacity,
  embedding dimension, known ids, the one removal rule).
- `warm`: warm conversations of `optimize_context`, kept in memory only.
- `plan_report`: the last collection of a session, for `ctxopt show`.

Locks, the whole process's, always taken in this order (a thread holding one
never waits for an earlier one):

1. A front's lock, held for a whole request: the gateway's
   `ConversationState.lock` (one conversation; api/gateway/state.py) or the
   MCP front's tool lock (api/mcp/tools.py). Neither is taken under the other.
2. `LiveSessions.load_lock`: bringing a stored session into memory, importing.
3. A session's `lock` (`Session.lock`): every read and write of that session.
   A warm conversation's `WarmConversation.lock` (warm.py) stands in its place
   for `optimize_context`.
4. Leaf locks, each guarding one structure and calling nothing that locks
   while held: the store's connection lock (`Store._lock`), the session
   registry's (`Registry._lock`), the warm conversations' cache
   (`WarmSessions._lock`), the last plans (`LastPlans._lock`, plan_report.py),
   the trimmer's caches (`Trimmer._lock`) and the anchored excerpts
   (`_anchored_lock`) in planner/texts.py, the line excerpts and per-session
   memos in planner/line_levels.py (`_line_excerpts_lock`, `_memos_lock`), the
   text lines cache (`_texts_lock`, text/lines.py), the analyzer's stemmer
   (`_TokenAnalyzer._stem_lock`, text/analyzer.py), the token counter's
   cache (`TokenCounter._lock`), and in the gateway the conversation map
   (`ConversationStates._lock`) and a conversation's usage reports
   (`Calibration._lock`).
"""

from ctxopt.engine.engine import Engine

__all__ = ["Engine"]
