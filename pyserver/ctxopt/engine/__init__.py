"""The engine: the one in-process API the fronts call (`Engine`), and what it
is made of, top down:

- `engine`: `Engine`, every call the fronts make.
- `planning`: mark, score and plan one snapshot with the engine's knobs.
- `sessions`: live sessions over the store (loading, the one write path,
  compaction).
- `session_checks`: checks of a request against a session's state (capacity,
  embedding dimension, known ids, the one removal rule).
- `warm`: warm conversations of `optimize_context`, kept in memory only.
- `plan_report`: the last collection of a session, for `ctxopt show`.

Locks, always taken in this order (a thread holding one never waits for an
earlier one): the MCP front's tool lock, `LiveSessions.load_lock` (bringing a
stored session into memory, importing), a session's `lock` (every read and
write of that session), then the leaf locks that guard one structure each and
call nothing that locks: the store's connection lock, the trimmer's excerpt
cache, the stateless-session cache, the token counter's cache. A stateless
conversation's `WarmConversation.lock` stands where a session's `lock` does.
"""

from ctxopt.engine.engine import Engine

__all__ = ["Engine"]
