"""Issue 32: the dashboard at `/ui/` in a real headless browser (Debian's chromium,
driven by Playwright; `make browser` installs it), behind the ctxopt token;
its loopback and token rules over plain HTTP."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks.gateway.histories import load, request
from tests.gateway.conftest import upstream_env
from tests.gateway.upstream import FakeUpstream
from tests.serverproc import ServerProcess, serving

SECRET = "dash-s3cret"
CHROMIUM = shutil.which("chromium")
# Set to a path to keep the screenshot (scripts/dashboard_screenshot.sh writes docs/dashboard.png).
SCREENSHOT_ENV = "CTXOPT_DASHBOARD_SCREENSHOT"
TIMEOUT_MS = 20_000


@pytest.fixture(scope="module")
def server(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    env = {**upstream_env(upstream), "CTXOPT_AUTH_TOKEN": f"alice={SECRET},bob=b0b"}
    tmp = tmp_path_factory.mktemp("dashboard")
    with serving(tmp, "--gateway-addr", "127.0.0.1:0", env=env) as running:
        yield running


@pytest.fixture(scope="module")
def calls(server: ServerProcess) -> list[dict[str, int]]:
    """One agent session through the gateway, pruned from its middle on."""
    trajectory = load(limit=1)[0]
    last = min(len(trajectory.steps), 30)
    window = len(json.dumps(request("anthropic", trajectory, last))) // 8
    headers = {
        "x-ctxopt-token": SECRET,
        "x-ctxopt-session": "fix-the-build",
        "x-ctxopt-window-tokens": str(window),
        "user-agent": "claude-cli/2.1.332 (external, sdk-cli)",
    }
    made = []
    for steps in range(0, last + 1, 3):
        body = request("anthropic", trajectory, steps)
        answer = httpx.post(
            f"{server.gateway_url}/anthropic/v1/messages", json=body, headers=headers
        )
        assert answer.status_code == 200, answer.text
        made.append({k: int(answer.headers[f"x-ctxopt-tokens-{k}"]) for k in ("before", "after")})
    assert any(c["after"] < c["before"] for c in made)
    return made


def test_the_dashboard_in_a_real_browser(
    server: ServerProcess, calls: list[dict[str, int]], tmp_path: Path
) -> None:
    if CHROMIUM is None:
        pytest.skip("no chromium: `make browser` installs Debian's")
    from playwright.sync_api import expect, sync_playwright

    saved = sum(c["before"] - c["after"] for c in calls)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 1500})
            failures: list[str] = []
            page.on("requestfailed", lambda r: failures.append(r.url))
            page.goto(f"{server.gateway_url}/ui/?token={SECRET}")
            assert page.url == f"{server.gateway_url}/ui/", "the token leaves the address bar"
            expect(page.locator("body[data-loaded=true]")).to_be_attached(timeout=TIMEOUT_MS)
            expect(page.locator("#total-calls .value")).to_have_text(str(len(calls)))
            expect(page.locator("#total-saved .value")).to_contain_text(f"{saved:,}")
            assert page.locator("#daily rect.bar-forwarded").count() == 1  # one day so far

            page.locator("#sessions tbody tr").first.click()
            expect(page.locator("#prompt-chart circle.dot-sent")).to_have_count(len(calls))
            sent = page.locator("#prompt-chart circle.dot-sent title").all_text_contents()
            assert sent[-1].endswith(f"{calls[-1]['before']:,} sent")
            decided = page.locator("#decisions tbody tr")
            expect(decided.first).to_be_visible()
            assert decided.first.get_attribute("data-action") in ("TRIM", "MASK", "STASH")
            assert decided.first.locator("td.reasons").text_content()

            page.fill("#stash-query", "")
            page.click("#stash-form button")
            hit = page.locator("#hits li[data-hit]").first
            expect(hit).to_be_visible()
            chunk_id = hit.get_attribute("data-hit")
            hit.locator("button").click()
            status = page.locator("#restore-status")
            expect(status).to_contain_text("restored ")
            assert chunk_id is not None and chunk_id in (status.text_content() or "")
            assert failures == [], "every request of the page answered"
            shot = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "dashboard.png")
            page.click("#stash-form button")  # the stash as it is after the restore
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()


def test_the_dashboard_needs_the_token_and_answers_on_loopback_only(
    server: ServerProcess, calls: list[dict[str, int]]
) -> None:
    ui = f"{server.gateway_url}/ui/"
    assert httpx.get(ui).status_code == 401
    assert httpx.get(ui, params={"token": "wrong"}).status_code == 401
    opened = httpx.get(ui, params={"token": SECRET})
    assert opened.status_code == 303 and opened.headers["location"] == "/ui/"
    assert SECRET not in opened.headers["set-cookie"]
    with httpx.Client(cookies=opened.cookies) as browser:
        page = browser.get(ui)
        assert page.status_code == 200 and "app.js" in page.text
        assert "cdn" not in page.text.lower() and "https://" not in page.text
        assert browser.get(f"{ui}api/usage").json()["total"]["calls"] == len(calls)
    bob = httpx.get(f"{ui}api/usage", headers={"x-ctxopt-token": "b0b"}).json()
    assert bob["total"]["calls"] == 0, "an owner sees its own calls only"
    foreign = httpx.get(ui, headers={"host": "example.com", "x-ctxopt-token": SECRET})
    assert foreign.status_code == 403
    restore: dict[str, Any] = {"session": "x", "chunk_ids": ["c"]}
    cross = httpx.post(
        f"{ui}api/restore",
        json=restore,
        headers={"x-ctxopt-token": SECRET, "origin": "http://evil.example"},
    )
    assert cross.status_code == 403

    metrics = f"{server.gateway_url}/metrics"
    assert httpx.get(metrics).status_code == 401
    scraped = httpx.get(metrics, headers={"authorization": f"Bearer {SECRET}"})
    assert scraped.status_code == 200
    assert "ctxopt_gateway_requests_total" in scraped.text
