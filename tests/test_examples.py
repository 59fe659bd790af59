"""Every module's `>>>` examples run as tests: pytest collects them from the
package (pyproject.toml: `--doctest-modules`, `pyserver/ctxopt` in testpaths)."""

from __future__ import annotations

from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pyserver" / "ctxopt"


def test_every_modules_examples_are_collected(pytestconfig: pytest.Config) -> None:
    with_examples = [p for p in PACKAGE.rglob("*.py") if ">>> " in p.read_text()]
    assert len(with_examples) >= 10, "the package's examples were not found"
    assert pytestconfig.getoption("doctestmodules")
    assert "pyserver/ctxopt" in pytestconfig.getini("testpaths")
