"""The out-of-fold choice of the gateway's schedule (benchmarks/hosts/cv.py)."""

from __future__ import annotations

from benchmarks.hosts.cv import Figures, Table, choose, cross_validate, table_of

HOSTS = ("Claude Code", "Codex CLI", "Gemini CLI")
SESSIONS = ("s0", "s1")
FOLDS = {"s0": 0, "s1": 1, "l0": 0, "l1": 1}


def _table(settings: dict[str, tuple[float, float]], host: tuple[float, float]) -> Table:
    """Every host and both lengths alike: each setting's (billed, recall) per
    session, and the host's; short sessions s0 and s1, long ones l0 and l1."""
    table: Table = {}
    for length, sessions in (("short", SESSIONS), ("long", ("l0", "l1"))):
        for name in HOSTS:
            for method, (billed, recall) in {"host": host, **settings}.items():
                table[(length, name, method)] = {
                    s: Figures(billed, recall * 10, 10) for s in sessions
                }
    return table


def _choices(table: Table) -> tuple[str, tuple[str, ...]]:
    """The setting chosen on every fold for every host, and per host (in HOSTS order)."""
    every = cross_validate(table, FOLDS)["chosen_on_all"]["every host"]
    per_host = cross_validate(table, FOLDS, per_host=True)["chosen_on_all"]
    return every, tuple(per_host[h] for h in HOSTS)


def test_among_settings_meeting_the_recall_bars_the_cheapest_is_chosen() -> None:
    table = _table(
        {"ctxopt 95/20": (50, 0.70), "ctxopt 95/40": (70, 0.90), "ctxopt 90/60": (80, 0.95)},
        host=(100, 0.80),
    )
    # 95/20 bills least but misses host + 0.05 on the long sessions
    assert choose(table, ["ctxopt 95/20", "ctxopt 95/40", "ctxopt 90/60"], {"l0", "s0"}) == (
        "ctxopt 95/40"
    )


def test_when_no_setting_meets_the_bars_the_one_missing_them_least_is_chosen() -> None:
    table = _table({"ctxopt 95/20": (50, 0.60), "ctxopt 80/60": (85, 0.78)}, host=(100, 0.80))
    assert choose(table, ["ctxopt 95/20", "ctxopt 80/60"], {"l0", "s0"}) == "ctxopt 80/60"


def test_a_miss_counts_the_bill_over_its_bar_beside_the_recall_under_it() -> None:
    # 80/60 misses recall by 0.02 less per cell but bills 0.3 over the bars
    table = _table({"ctxopt 95/30": (80, 0.80), "ctxopt 80/60": (120, 0.82)}, host=(100, 0.80))
    assert choose(table, ["ctxopt 95/30", "ctxopt 80/60"], {"l0", "s0"}) == "ctxopt 95/30"


def test_gemini_clis_own_recall_on_the_short_trajectories_is_no_bar() -> None:
    table = _table({"ctxopt 95/20": (50, 0.90), "ctxopt 80/60": (90, 0.90)}, host=(100, 0.80))
    for setting, recall in (("ctxopt 95/20", 0.1), ("ctxopt 80/60", 0.9)):
        table[("short", "Gemini CLI", setting)] = {
            s: Figures(50, recall * 10, 10) for s in SESSIONS
        }
    assert choose(table, ["ctxopt 95/20", "ctxopt 80/60"], set(FOLDS)) == "ctxopt 95/20"


def test_each_fold_is_scored_with_the_setting_chosen_on_the_other_folds() -> None:
    table = _table({"ctxopt a": (50, 0.90), "ctxopt b": (60, 0.90)}, host=(100, 0.80))
    # fold 1 alone makes `a` miss its bar: fold 0 (chosen on fold 1) takes `b`, fold 1 takes `a`
    for length, session in (("short", "s1"), ("long", "l1")):
        for name in HOSTS:
            table[(length, name, "ctxopt a")][session] = Figures(50, 5.0, 10)
    cv = cross_validate(table, FOLDS)
    assert cv["chosen_per_fold"] == {0: {"every host": "ctxopt b"}, 1: {"every host": "ctxopt a"}}
    held = cv["out_of_fold"]["long Codex CLI"]
    # fold 0 under b (60, 0.9), fold 1 under a (50, 0.5); the host bills 100 per session
    assert held["billed_vs_host"] == 0.55
    assert held["recall"] == 0.7


def test_per_host_each_host_gets_the_cheapest_setting_meeting_its_own_bars() -> None:
    table = _table({"ctxopt a": (50, 0.90), "ctxopt b": (60, 0.90)}, host=(100, 0.80))
    # `a` misses the bar on Gemini CLI's long sessions only
    table[("long", "Gemini CLI", "ctxopt a")] = {s: Figures(50, 5.0, 10) for s in ("l0", "l1")}
    assert _choices(table) == ("ctxopt b", ("ctxopt a", "ctxopt a", "ctxopt b"))


def test_a_setting_measured_on_one_host_competes_for_that_host_only() -> None:
    table = _table({"ctxopt a": (80, 0.90)}, host=(100, 0.80))
    for length, sessions in (("short", SESSIONS), ("long", ("l0", "l1"))):
        table[(length, "Gemini CLI", "ctxopt b gemini 0.9")] = {
            s: Figures(50, 9.0, 10) for s in sessions
        }
    assert _choices(table) == ("ctxopt a", ("ctxopt a", "ctxopt a", "ctxopt b gemini 0.9"))


def test_a_run_at_the_chosen_gemini_threshold_gives_the_settings_own_gemini_cells() -> None:
    row = {"host": "Gemini CLI", "by_session": {"a": [10, 1.0, 2]}}
    run = {
        "gemini_threshold": 0.9,
        "rows": [{**row, "method": "host"}],
        "frontier": [{**row, "schedule": "95/50/30+70"}],
        "long": {"trajectories_per_session": 1, "rows": [], "frontier": []},
    }
    tagged, _ = table_of(run)
    assert ("short", "Gemini CLI", "ctxopt 95/50/30+70 gemini 0.9") in tagged
    own, _ = table_of(run, gemini_threshold=0.9)
    assert ("short", "Gemini CLI", "ctxopt 95/50/30+70") in own
    other, _ = table_of(run, gemini_threshold=0.7)
    assert ("short", "Gemini CLI", "ctxopt 95/50/30+70 gemini 0.9") in other
