"""The history site in a real headless browser: Debian's Chromium (installed by
scripts/chromium.sh), driven by Playwright. Opens the site of issue 26's 30-run
history, checks that every plot rendered with no console error, the trace and point
counts, the change-point marker at commit 17, clicks a point through to that run's
report, uses the compare view, and takes a screenshot (docs/history-site.png under
UPDATE_GOLDEN=1)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ref.test_history import cli
from tests.ref.test_history_acceptance import HISTORY_30, N_RUNS, STEP_AT, commit, history_30

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "history-site.png"

__all__ = ["history_30"]  # the module's 30-run fixture, shared
pytestmark = HISTORY_30  # on the worker that makes it


@pytest.fixture(scope="module")
def chromium() -> str:
    res = subprocess.run(["bash", str(ROOT / "scripts" / "chromium.sh")], capture_output=True,
                         text=True, timeout=900)
    if res.returncode != 0:
        pytest.fail(f"Chromium could not be installed (scripts/chromium.sh, exit "
                    f"{res.returncode}): {res.stderr[-2000:]}")
    return res.stdout.strip().split("=", 1)[1]


@pytest.fixture(scope="module")
def page(chromium: str, history_30: Path, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[tuple[object, list[str], Path]]:
    from playwright.sync_api import sync_playwright

    site = tmp_path_factory.mktemp("site") / "site"
    code, _, err = cli("history", "--results", history_30, "--html", site)
    assert code == 0, err
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium,
                                    args=["--no-sandbox", "--disable-gpu"])
        try:
            pg = browser.new_page(viewport={"width": 1280, "height": 900})
            pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.goto((site / "index.html").as_uri())
            pg.wait_for_function("document.querySelectorAll('.plot .main-svg').length > 0")
            yield pg, errors, site
        finally:
            browser.close()


def test_plots_render_with_their_points(page: tuple) -> None:
    pg, errors, _site = page
    plots = pg.eval_on_selector_all(".plot", "els => els.map(e => e.id)")
    assert len(plots) >= 2  # fork and prod, per metric shown
    fork = next(p for p in plots if p.startswith("fork-decode-tok-s"))
    traces = pg.evaluate(f"document.getElementById('{fork}').data.map(t => [t.name, "
                         "t.x.length, t.x])")
    assert [(name, n) for name, n, _ in traces] == [("runs", N_RUNS), ("change points", 1)]
    assert traces[1][2] == [STEP_AT]  # the marker sits at commit 17
    ticks = pg.evaluate(f"document.getElementById('{fork}').layout.xaxis.ticktext")
    assert ticks[STEP_AT] == commit(STEP_AT)[:10]
    drawn = pg.eval_on_selector_all(f"#{fork} .scatterlayer .point", "els => els.length")
    assert drawn == N_RUNS + 1
    assert not errors, errors


def test_a_click_opens_the_run_report(page: tuple, tmp_path: Path) -> None:
    pg, errors, site = page
    # the screenshot README shows: rewritten in docs/ only when asked (a test run leaves
    # the checkout as it found it)
    shot = SCREENSHOT if os.environ.get("UPDATE_GOLDEN") else tmp_path / SCREENSHOT.name
    pg.screenshot(path=str(shot), full_page=False)
    assert shot.read_bytes().startswith(b"\x89PNG")
    fork = next(p for p in pg.eval_on_selector_all(".plot", "els => els.map(e => e.id)")
                if p.startswith("fork-decode-tok-s"))
    pg.locator(f"#{fork}").scroll_into_view_if_needed()
    point = pg.locator(f"#{fork} .scatterlayer .trace:first-child .point").nth(STEP_AT)
    box = point.bounding_box()
    assert box is not None
    pg.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    hover = pg.locator(f"#{fork} .hoverlayer").text_content() or ""
    assert commit(STEP_AT) in hover and "run " in hover  # hover: run, commit, value
    with pg.expect_navigation():
        pg.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    assert pg.url.startswith((site / "runs").as_uri()) and SCREENSHOT.stat().st_size > 10_000
    assert pg.locator("h1").inner_text().startswith("Run ")
    assert "fork" in pg.locator("table").first.inner_text()
    pg.go_back()
    assert not errors, errors


def test_the_compare_view_warns_it_is_unpaired(page: tuple) -> None:
    pg, errors, site = page
    pg.goto((site / "compare.html").as_uri())
    text = pg.locator("#out").inner_text()
    assert "B against A" in text and "not interleaved" in text
    assert not errors, errors

