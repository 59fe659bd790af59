"""The README's flag table lists every server setting with its real default."""

from __future__ import annotations

from dataclasses import Field, fields
from pathlib import Path

import pytest
from ctxopt.config import Config

README = Path(__file__).resolve().parents[1] / "README.md"


def _shown(default: object) -> str:
    if isinstance(default, bool):
        return str(default).lower()
    return str(default) if default != "" else '""'


@pytest.mark.parametrize("setting", fields(Config), ids=lambda f: f.name)
def test_every_setting_has_a_row_with_its_default(setting: Field[object]) -> None:
    name = f"`CTXOPT_{setting.name.upper()}`"
    rows = [line for line in README.read_text().splitlines() if line.startswith(f"| {name} |")]
    assert len(rows) >= 1, f"{name} missing from the README flag table"
    default = _shown(setting.default)
    assert f"`{default}" in rows[0].split("|")[2], (name, default, rows[0])
