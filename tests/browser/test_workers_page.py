"""The Workers page and a resubmit's outcome in headless Chromium: a running worker's row (host,
pid, started, memory, its current job), quiet and resume from the page, what the stop dialog
says; and a dead-letter group resubmitted that fails again, said on its row with a link."""

from __future__ import annotations

import asyncio
import re
import time
from urllib.parse import parse_qs, urlsplit

import pytest

from demo.demo_tasks import charge_card, import_rows
from engine import EngineSettings, JobState

from .test_dashboard import confirm, engine, launch, login, site  # noqa: F401  (site: a fixture)
from .test_triage import wait_until

pytestmark = pytest.mark.browser
ROW = "#workers-table tbody tr[data-worker]"
DIALOG = "dialog.ask[open]"
OUTCOME = re.compile(r"resubmitted (\d+): 0 completed, (\d+) failed again, 0 still running")


def test_the_workers_page_shows_a_running_worker_and_controls_it(
    site: tuple[str, str, EngineSettings],  # noqa: F811
) -> None:
    from playwright.sync_api import sync_playwright

    base, password, settings = site
    long = engine(settings, lambda c: c.enqueue(import_rows, 200, 0.5))  # about 100 s
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        login(page, base, password)
        page.click("header nav a:text-is('Workers')")
        page.wait_for_url(f"{base}/dashboard/workers/")
        page.wait_for_selector(f"{ROW} .jobs a[href*='{long.id}']", timeout=15_000)
        (worker,) = engine(settings, lambda c: c.workers.list())
        assert page.get_attribute(ROW, "data-worker") == worker["id"]
        assert page.text_content(f"{ROW} .host") == worker["host"]
        assert page.text_content(f"{ROW} .pid") == str(worker["pid"])
        started = page.text_content(f"{ROW} .started") or ""
        assert " ago" in started and started[0].isdigit(), started
        memory = page.text_content(f"{ROW} .memory") or ""
        assert memory.endswith(" MiB") and float(memory.split()[0]) > 0, memory
        assert page.text_content(f"{ROW} .jobs a") == "demo.import_rows"
        assert "demo.import_rows@1" in (page.text_content(f"{ROW} .versions") or "")

        # Stop: the dialog says what it means for the process manager; going back changes nothing.
        page.click(f"{ROW} button[data-order=stop]")
        page.wait_for_selector(DIALOG, timeout=10_000)
        assert page.text_content(f"{DIALOG} .question") == f"Stop worker {worker['id']}?"
        detail = page.text_content(f"{DIALOG} .detail") or ""
        assert "exits 0" in detail and "Restart=always" in detail and "leaves it stopped" in detail
        assert page.text_content(f"{DIALOG} button[value=no]") == "Keep it running"
        page.click(f"{DIALOG} button[value=no]")

        # Quiet, then resume: the row follows the worker's own state.
        page.click(f"{ROW} button[data-order=quiet]")
        assert page.text_content(f"{DIALOG} .detail") == (
            "It stops claiming new jobs; the jobs it runs finish. Resume undoes it."
        )
        assert confirm(page) == f"Quiet worker {worker['id']}?"
        page.wait_for_selector(f"{ROW} .worker-state:text('quiet')", timeout=10_000)
        assert [w["state"] for w in engine(settings, lambda c: c.workers.list())] == ["quiet"]
        assert page.is_visible(f"{ROW} .jobs a[href*='{long.id}']")  # its job runs on
        page.click(f"{ROW} button[data-order=resume]")
        assert confirm(page) == f"Resume worker {worker['id']}?"
        page.wait_for_selector(f"{ROW} .worker-state:text('claiming')", timeout=10_000)
        deadline = time.monotonic() + 5
        while [w["state"] for w in engine(settings, lambda c: c.workers.list())] != ["claiming"]:
            assert time.monotonic() < deadline
            page.wait_for_timeout(100)

        # The job's link opens its page.
        page.click(f"{ROW} .jobs a[href*='{long.id}']")
        page.wait_for_url(f"**/dashboard/jobs/{long.id}/")
        engine(settings, lambda c: c.jobs.cancel([long.id]))
        browser.close()


def test_a_resubmitted_group_says_its_jobs_failed_again(
    site: tuple[str, str, EngineSettings],  # noqa: F811
) -> None:
    """The demo's feed adds a declined card every 10 s: the group holds ours and maybe those."""
    from playwright.sync_api import sync_playwright

    base, password, settings = site
    dead = engine(
        settings, lambda c: c.enqueue_many([charge_card.call(n) for n in (101, 2002, 30_003)])
    )
    ours = {j.id for j in dead}
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        login(page, base, password)

        def in_history() -> bool:  # the group's count comes from the history
            counts = page.request.get(f"{base}/api/v1/job-counts?ids={','.join(ours)}").json()
            return bool(counts["states"].get("failed") == 3)

        wait_until(in_history, "the jobs did not fail", page)
        page.goto(f"{base}/dashboard/dead-letters/")
        card = "#groups tr[data-index]:has-text('demo.charge_card')"
        page.click(f"{card} button[data-act=resubmit]", timeout=15_000)
        question = confirm(page)
        assert re.fullmatch(r"Resubmit \d+ dead letters of this group\?", question), question

        outcome = f"{card} .resubmit-outcome"
        page.wait_for_selector(f"{outcome}:has-text('failed again')", timeout=30_000)
        wait_until(
            lambda: "0 still running" in (page.text_content(outcome) or ""), "still running", page
        )
        said = page.text_content(outcome) or ""
        shown = OUTCOME.match(said)
        assert shown and shown[1] == shown[2] and int(shown[1]) >= 3, said
        jobs = engine(settings, lambda c: asyncio.gather(*[c.jobs.get(i) for i in ours]))
        assert all(len(j.errors) == 2 and j.state is JobState.FAILED for j in jobs)

        # "see them": the Jobs page listing exactly those jobs, ours among them.
        link = page.get_attribute(f"{outcome} a", "href") or ""
        named = set(parse_qs(urlsplit(link).query)["ids"][0].split(","))
        assert ours <= named and len(named) == int(shown[1])
        page.click(f"{outcome} a:text('see them')")
        page.wait_for_url("**/dashboard/jobs/?**")

        def listed() -> set[str]:
            rows = page.query_selector_all("#search tbody tr[data-id]")
            return {r.get_attribute("data-id") or "" for r in rows}

        wait_until(lambda: listed() == named, f"the list is not those jobs: {listed()}", page)
        assert page.is_visible(f"#filter .ids:has-text('only {len(named)} jobs')")
        cells = page.locator("#search tbody tr[data-id] td:nth-child(5)").all_text_contents()
        assert set(cells) == {"failed"}
        browser.close()
