"""The operator pages in headless Chromium: scheduled and retrying jobs run now, Redis
memory and uptime in the health panel, clearing a queue's finished jobs by state."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from demo.demo_tasks import resize_image, send_email
from engine import EngineSettings, JobState

from .test_dashboard import confirm, engine, launch, login, site  # noqa: F401  (site: a fixture)

pytestmark = pytest.mark.browser
LATER = "#later"


def wait_until(page: Any, check: Callable[[], bool], what: str, timeout_s: float = 20) -> None:
    """Poll `check` (the page's CSP forbids wait_for_function's evaluated strings)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        page.wait_for_timeout(200)


def state_of(settings: EngineSettings, job_id: str) -> JobState:
    return engine(settings, lambda c: c.jobs.get(job_id)).state


def test_run_now_redis_figures_and_clear_by_state(
    site: tuple[str, str, EngineSettings],  # noqa: F811
) -> None:
    from playwright.sync_api import sync_playwright

    base, password, settings = site
    delayed = [resize_image.using(delay_s=900 + i).call(880 + i, 1) for i in range(2)]
    later = engine(settings, lambda c: c.enqueue_many(delayed))
    slow_retry = send_email.using(retry_delay_s=900, backoff="constant")
    flaky = engine(settings, lambda c: c.enqueue(slow_retry, "x@example.com"))
    wait_until_state = time.monotonic() + 30
    while state_of(settings, flaky.id) is not JobState.SCHEDULED:  # its first attempt failed
        assert time.monotonic() < wait_until_state, "the demo worker did not fail it once"
        time.sleep(0.1)

    # A job of a task no worker has: set aside by the claim, then dropped (the cleaner's step).
    ghost = resize_image.call(1, 1)
    ghost.task = "demo.gone"
    engine(settings, lambda c: c.enqueue_many([ghost]))
    deadline = time.monotonic() + 30
    while "unserved_at_ms" not in engine(settings, lambda c: c.jobs.get(ghost.id)).extra:
        assert time.monotonic() < deadline, "the demo worker did not set the job aside"
        time.sleep(0.1)

    async def drop(c: Any) -> int:
        keys = c.keys("default")
        return await c.scripts.unserved(
            keys, events_maxlen=10_000, ttl_ms=600_000, drop_after_ms=0, max_jobs=10
        )

    assert engine(settings, drop) >= 1  # the demo feeds one of its own too

    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        errors: list[str] = []
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        login(page, base, password)

        # The health panel: Redis memory with its unit, the limit said, the uptime.
        line = page.wait_for_selector("#health li[data-redis]", timeout=15_000)
        text = line.text_content() or ""
        assert re.search(r"memory [\d.]+[KMG]?B", text), text
        assert "no memory limit set" in text and re.search(r"uptime \d+ (s|min|h|d)", text), text

        # No retry for a job that cannot run: disabled, the reason in its tooltip.
        retry = f"#failures li[data-id='{ghost.id}'] button[data-action=retry]"
        page.wait_for_selector(retry, timeout=15_000)
        assert page.is_disabled(retry)
        assert "unknown task" in (page.get_attribute(retry, "title") or "")

        # Scheduled: the delayed jobs, next due first; "run now" submits one at once.
        first, second = (job.id for job in later)
        page.wait_for_selector(f"{LATER} tr[data-id='{first}']", timeout=15_000)
        assert page.get_attribute(f"{LATER} [data-tab=scheduled]", "aria-selected") == "true"
        assert not page.query_selector(f"{LATER} tr[data-id='{flaky.id}']")
        page.click(f"{LATER} tr[data-id='{first}'] button[data-run-now]")
        assert first in confirm(page)
        page.wait_for_selector(f"#toasts :text('Job {first} runs now')", timeout=10_000)
        wait_until(page, lambda: state_of(settings, first) is JobState.COMPLETED, "not run")
        page.wait_for_selector(f"{LATER} tr[data-id='{first}']", state="detached")
        assert state_of(settings, second) is JobState.SCHEDULED

        # Retrying: the failed attempt waiting for its backoff, run now from the selection.
        page.click(f"{LATER} [data-tab=retrying]")
        row = f"{LATER} tr[data-id='{flaky.id}']"
        page.wait_for_selector(row, timeout=10_000)
        assert "?later=retrying" in page.url
        assert "FlakyUpstream" in (page.text_content(row) or "")
        page.check(f"{row} input[type=checkbox]")
        page.click(f"{LATER} button[data-run-now=selected]")
        assert "Run 1 job now?" in confirm(page)
        page.wait_for_selector("#toasts :text('run now: 1 of 1 job submitted')", timeout=10_000)
        wait_until(
            page,
            lambda: (
                state_of(settings, flaky.id) is not JobState.SCHEDULED
                or engine(settings, lambda c: c.jobs.get(flaky.id)).attempt >= 2
            ),
            "the retry did not run now",
        )

        # Clear the completed jobs of queue default from Redis; the history keeps them.
        wait_until(
            page,
            lambda: (
                engine(settings, lambda c: c.queues.clear_state("default", "completed", True)) > 0
            ),
            "no completed job yet",
        )
        page.click("nav a:text('Queues')")
        form = "section.queue[data-queue=default] form.clear"
        page.wait_for_selector(form, timeout=10_000)
        page.select_option(f"{form} select", "completed")
        page.click(f"{form} button")
        question = confirm(page)
        counted = int(re.search(r"Clear (\d+) completed job", question)[1])  # type: ignore[index]
        assert counted >= 1, question
        page.wait_for_selector("#toasts :text('the history keeps their rows')", timeout=10_000)
        with pytest.raises(Exception, match="no job"):
            engine(settings, lambda c: c.jobs.get(first))
        kept = page.request.get(f"{base}/api/v1/job-counts?queue=default").json()
        assert kept["states"].get("completed", 0) >= counted  # the history's rows stay
        assert not errors, errors
        browser.close()
