"""The README is a user's page: short, every server setting in its flag table
with the real default, every link and repository path in it and in docs/ real,
and every `ctxopt` subcommand it shows one the command line has."""

from __future__ import annotations

import re
from dataclasses import Field, fields
from pathlib import Path

import pytest
from ctxopt.cli.commands import subcommands
from ctxopt.config import Config

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
# Pages other branches write (the gateway's and the agent launcher's); the
# README links them, and they resolve once those branches are merged.
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# a repository path in backticks or a code block: a top-level folder, then a file name
_REPO_PATH = re.compile(
    r"(?<![\w/.~-])((?:ts-client|benchmarks|scripts|pyserver|tests|docs|proto)/[\w./-]*\.\w+)"
)


def _shown(default: object) -> str:
    if isinstance(default, bool):
        return str(default).lower()
    return str(default) if default != "" else '""'


def test_readme_stays_a_page_a_user_reads() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail to docs/"
    headings = [line for line in lines if line.startswith("## ")]
    for section in ("Install", "Two commands", "Use with your agent", "Flags", "Figures"):
        assert f"## {section}" in headings, section
    assert "## When something is wrong" in headings


@pytest.mark.parametrize("setting", fields(Config), ids=lambda f: f.name)
def test_every_setting_has_a_row_with_its_default(setting: Field[object]) -> None:
    name = f"`CTXOPT_{setting.name.upper()}`"
    rows = [line for line in README.read_text().splitlines() if line.startswith(f"| {name} |")]
    assert len(rows) >= 1, f"{name} missing from the README flag table"
    default = _shown(setting.default)
    assert f"`{default}" in rows[0].split("|")[2], (name, default, rows[0])


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_and_images_resolve(page: Path) -> None:
    for target in _LINK.findall(page.read_text()):
        if "://" in target:
            continue
        resolved = (page.parent / target).resolve()
        assert resolved.exists(), f"{page.name} links {target}, which does not exist"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_repository_paths_named_exist(page: Path) -> None:
    for path in _REPO_PATH.findall(page.read_text()):
        if "<" in path or "*" in path:
            continue
        assert (ROOT / path).exists(), f"{page.name} names {path}, which is not in the repository"


def test_plots_are_all_shown() -> None:
    text = README.read_text()
    for plot in sorted((ROOT / "benchmarks" / "results").glob("*.png")):
        assert f"](benchmarks/results/{plot.name})" in text, f"{plot.name} is not shown"


def test_every_ctxopt_command_shown_exists() -> None:
    code = "\n".join(re.findall(r"^```sh\n(.*?)^```", README.read_text(), re.MULTILINE | re.DOTALL))
    shown = set(re.findall(r"^ctxopt ([a-z]+)", code, re.MULTILINE))
    assert {"sessions", "show", "stash", "export", "import"} <= shown
    assert shown - {"run"} <= set(subcommands()), shown - set(subcommands())
