"""The queues page in headless Chromium: drain a queue with its button, progress shown."""

from __future__ import annotations

import pytest

from demo.demo_tasks import resize_image
from engine import EngineSettings, JobState

from .test_dashboard import confirm, engine, launch, login, site  # noqa: F401  (site: a fixture)

pytestmark = pytest.mark.browser


def test_drain_a_queue_from_the_queues_page(
    site: tuple[str, str, EngineSettings],  # noqa: F811
) -> None:
    from playwright.sync_api import sync_playwright

    base, password, settings = site
    later = [resize_image.using(delay_s=600).call(i, 1) for i in range(2000)]
    jobs = engine(settings, lambda c: c.enqueue_many(later))
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        login(page, base, password)
        page.goto(f"{base}/dashboard/queues/")
        card = "section.queue[data-queue=default]"
        page.click(f"{card} button[data-action=drain]", timeout=15_000)
        assert confirm(page) == "Drain queue default?"  # the page's own dialog
        page.wait_for_selector(f"{card} .drain-state:text('drain done')", timeout=30_000)
        text = page.text_content(f"{card} .drain-state") or ""
        assert "waiting jobs cancelled" in text and "by admin" in text
        browser.close()
    states = {engine(settings, lambda c, j=j: c.jobs.get(j.id)).state for j in jobs[::200]}
    assert states == {JobState.CANCELLED}
