"""An output's excerpt sizes are remembered from one plan to the next: a
session that grows plan after plan must get exactly the plan a fresh engine
makes of the same chunks, whatever the model names, cites or quotes between
plans and whatever the query."""

from __future__ import annotations

from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import Chunk, ChunkKind, Plan, Role
from ctxopt.planner.knobs import Tuning
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factory import chunk, filler, options

S = "s"
FUNCTIONS = [f"compute_{name}" for name in ("rate", "total", "margin", "refund", "tax", "fee")]


def listing(step: int) -> str:
    """A numbered source listing, each function a header and a few lines; no
    line repeats another step's (a repeat would move the echo lines, and the
    outputs would be made again anyway)."""
    lines = []
    for k, name in enumerate(FUNCTIONS):
        lines.append(f"{10 * k + 1:6d}\tdef {name}(order, pass_{step}):")
        body = (f"    value_{step}_{k}_{j} = order.part({j})" for j in range(6))
        lines += [f"{10 * k + j + 2:6d}\t{line}" for j, line in enumerate(body)]
        lines.append(f"{10 * k + 8:6d}\t    return {name}_helper(order, pass_{step})")
        lines.append(f"{10 * k + 9:6d}\t    # amounts round after the tax in pass {step} part {k}")
    return "\n".join(lines)


# What the model may write between plans: a name an output holds, a cited line, a
# quoted line of an output, or nothing of the kind.
SAYINGS = st.one_of(
    st.sampled_from(FUNCTIONS).map(lambda name: f"THOUGHT: the bug is in {name}"),
    st.integers(1, 60).map(lambda line: f"THOUGHT: see line {line}"),
    # a quoted line that names nothing: only the output's echo lines change
    st.integers(0, 2).map(
        lambda step: (
            f"THOUGHT: wrong:\n{19:6d}\t    # amounts round after the tax in pass {step} part 1"
        )
    ),
    st.just("THOUGHT: " + filler(20, "t")),
)
QUERIES = st.sampled_from(["", "refund", "margin tax", "fee order"])


def plan_of(engine: Engine, query: str) -> Plan:
    target = engine.stats("", S).tokens * 4 // 10
    return engine.optimize("", S, options(target, query, dry_run=True, lean=True))


def shown(plan: Plan) -> list[tuple[str, str, str]]:
    return [(d.chunk_id, d.action.name, d.replacement_text) for d in plan.decisions]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(SAYINGS, QUERIES), min_size=2, max_size=6))
def test_a_growing_session_plans_as_a_fresh_engine_would(
    steps: list[tuple[str, str]],
) -> None:
    tuning = Tuning(line_tight_share=0.1)
    growing = Engine(Config(data_dir=":memory:"), tuning)
    chunks: list[Chunk] = [chunk("task", "repair the pricing module", turn=0)]
    growing.append("", S, chunks)
    for step, (saying, query) in enumerate(steps):
        new = [
            chunk(f"m{step}", saying, role=Role.MODEL, turn=2 * step + 1),
            chunk(f"o{step}", listing(step), kind=ChunkKind.TOOL_RESULT, turn=2 * step + 2),
        ]
        chunks += new
        growing.append("", S, new)
        fresh = Engine(Config(data_dir=":memory:"), tuning)
        fresh.append("", S, chunks)
        assert shown(plan_of(growing, query)) == shown(plan_of(fresh, query)), step
        fresh.close()
    growing.close()
