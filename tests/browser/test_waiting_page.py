"""The job page of a waiting job says why it waits, each reason linking to where it changes; the
health panel of the overview and queues pages judges a queue no worker serves."""

from __future__ import annotations

import pytest

from demo.demo_tasks import resize_image
from engine import EngineSettings

from . import test_dashboard as dash
from .test_dashboard import engine, launch, login

site = dash.site  # the fixture: the site served against a private Redis

pytestmark = pytest.mark.browser


def test_the_job_page_explains_a_waiting_job_and_the_health_panel_judges_its_queue(
    site: tuple[str, str, EngineSettings],
) -> None:
    from playwright.sync_api import sync_playwright

    base, password, settings = site
    engine(settings, lambda c: c.queues.pause("quiet"))
    later = resize_image.using(queue="quiet", delay_s=600)
    job = engine(settings, lambda c: c.enqueue(later, 1, 1))
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        login(page, base, password)
        page.goto(f"{base}/dashboard/jobs/{job.id}/")
        page.wait_for_selector("#waiting:not([hidden]) li[data-code=no_worker]", timeout=10_000)
        codes = page.eval_on_selector_all("#waiting li", "els => els.map(e => e.dataset.code)")
        assert codes == ["paused", "scheduled", "no_worker"]
        assert "queue 'quiet' is paused" in page.inner_text("#waiting li[data-code=paused]")
        page.click("#waiting li[data-code=paused] a")
        page.wait_for_url(f"{base}/dashboard/queues/#queue-quiet")
        page.wait_for_selector("#queue-quiet .counts th", timeout=10_000)
        # The Queues page counts in the Overview's words, never the engine's state names.
        heads = page.eval_on_selector_all(
            "#queue-quiet .counts th", "els => els.map(e => e.textContent)"
        )
        assert {"waiting", "scheduled", "running", "dead letters"} <= set(heads), heads
        assert not {"submitted", "started", "dlq"} & set(heads), heads
        page.goto(f"{base}/dashboard/jobs/{job.id}/")
        page.wait_for_selector("#waiting li[data-code=scheduled]")
        engine(settings, lambda c: c.jobs.cancel([job.id]))
        page.wait_for_selector("#waiting", state="hidden", timeout=10_000)
        engine(settings, lambda c: c.enqueue(resize_image.using(queue="unserved"), 1, 1))
        failing = "#health li[data-queue=unserved][data-health=failing]"
        for path in ("/dashboard/", "/dashboard/queues/"):
            page.goto(f"{base}{path}")
            page.wait_for_selector(failing, timeout=15_000)
            assert "no live worker serves it and 1 jobs wait" in page.inner_text(failing)
        browser.close()
