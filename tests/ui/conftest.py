"""A real browser for the console's tests: Debian's chromium, driven by Playwright.

Playwright's own browser download is not reachable here, so the system's
``/usr/bin/chromium`` is launched (``.ci/run`` installs it when missing), in a
fresh profile per test. Without it the tests skip locally and fail under
``CI=true``, as a missing server does.

Screenshots go to the test's directory, or to ``docs/console/`` (the pictures
docs/console.md shows) with ``AGENTFLOW_UI_SCREENSHOTS=1``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, Playwright, sync_playwright

from tests.backends import server_missing

CHROMIUM = Path("/usr/bin/chromium")
_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
_DOCS = Path(__file__).resolve().parents[2] / "docs" / "console"


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    if not CHROMIUM.exists():
        server_missing("chromium", f"no {CHROMIUM} (apt-get install -y chromium)")
    with sync_playwright() as driver:
        yield driver


@pytest.fixture
def page(playwright: Playwright, tmp_path: Path) -> Iterator[Page]:
    """A page of a fresh chromium profile (no cookie of any earlier test)."""
    profile = tmp_path / "chromium-profile"
    context = playwright.chromium.launch_persistent_context(
        str(profile),
        executable_path=str(CHROMIUM),
        headless=True,
        args=_ARGS,
        viewport={"width": 1200, "height": 900},
    )
    try:
        yield context.pages[0] if context.pages else context.new_page()
    finally:
        context.close()


@pytest.fixture
def shot(tmp_path: Path) -> Callable[[Page, str], Path]:
    """``shot(page, name)``: a full-page PNG of ``page``, kept for the docs when asked."""
    directory = _DOCS if os.environ.get("AGENTFLOW_UI_SCREENSHOTS") == "1" else tmp_path
    directory.mkdir(parents=True, exist_ok=True)

    def take(page: Page, name: str) -> Path:
        path = directory / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 1000  # a picture, not an empty file
        return path

    return take
