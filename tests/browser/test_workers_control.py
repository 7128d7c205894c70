"""The dashboard's workers list in headless Chromium: quiet and resume a worker by its buttons."""

from __future__ import annotations

import time

import pytest

from engine import EngineSettings

from .test_dashboard import confirm, engine, launch, login, site  # noqa: F401  (site: a fixture)

pytestmark = pytest.mark.browser


def test_quiet_and_resume_a_worker_from_the_dashboard(
    site: tuple[str, str, EngineSettings],  # noqa: F811
) -> None:
    from playwright.sync_api import sync_playwright

    base, password, settings = site
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        login(page, base, password)
        item = "#workers li[data-worker]"
        page.wait_for_selector(f"{item} button[data-order=quiet]", timeout=15_000)
        worker_id = page.get_attribute(item, "data-worker")
        page.click(f"{item} button[data-order=quiet][data-worker]")
        assert confirm(page) == f"Quiet worker {worker_id}?"  # the page's own dialog
        page.wait_for_selector(f"{item} .worker-state:text('quiet')", timeout=10_000)
        states = engine(settings, lambda c: c.workers.list())
        assert [w["state"] for w in states if w["id"] == worker_id] == ["quiet"]
        page.click(f"{item} button[data-order=resume][data-worker]")
        confirm(page)
        page.wait_for_selector(f"{item} .worker-state:text('claiming')", timeout=10_000)
        deadline = time.monotonic() + 5
        while [w["state"] for w in engine(settings, lambda c: c.workers.list())] != ["claiming"]:
            assert time.monotonic() < deadline
            page.wait_for_timeout(100)
        browser.close()
