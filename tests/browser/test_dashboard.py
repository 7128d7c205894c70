"""The dashboard in real headless Chromium (Debian's package) driven by Playwright.

Runs the README's main command (`python -m demo.serve`) against a private Redis and a
temporary SQLite file, logs in as the admin it creates, and saves screenshots under docs/.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from demo.demo_tasks import charge_card, import_rows, resize_image
from engine import Client, ConfigError, EngineSettings, JobState
from engine.dev.devserver import RedisServer, free_port
from tests import serving

pytestmark = pytest.mark.browser
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[str, str, EngineSettings]]:
    if not os.path.exists(CHROMIUM):
        pytest.fail("Debian's chromium is missing: bin/test installs it (apt-get install chromium)")
    port = free_port()
    with RedisServer() as redis_server:
        env = {
            **os.environ,
            "REDIS_URL": redis_server.url,
            "COLUMNS": "200",
            "SQLITE_PATH": str(tmp_path / "db.sqlite3"),
            # "Cancel all matching" of six jobs runs in the background, its progress shown.
            "JOBSITE_BULK_MAX": "5",
        }
        env.pop("DJANGO_SETTINGS_MODULE", None)
        log = tmp_path / "serve.log"
        proc = serving.start(env, port, log)
        password = serving.wait_up(proc, log, timeout_s=120)
        try:
            yield (
                f"http://127.0.0.1:{port}",
                password,
                EngineSettings.from_url(redis_server.url),
            )
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def engine(settings: EngineSettings, coro_fn):  # type: ignore[no-untyped-def]
    async def go():  # type: ignore[no-untyped-def]
        async with Client(settings) as client:
            return await coro_fn(client)

    # Playwright's sync API owns this thread's event loop: run the engine call in another thread.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, go()).result()


def launch(pw):  # type: ignore[no-untyped-def]
    """Start Debian's Chromium, headless, quiet."""
    return pw.chromium.launch(
        executable_path=CHROMIUM,
        args=[
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ],
    )


def login(page, base: str, password: str, status: str = "live") -> None:  # type: ignore[no-untyped-def]
    """Log in as the admin that serve created and open the dashboard, its header saying
    `status` ("live"; "polling" where no websocket connects)."""
    page.goto(f"{base}/admin/login/?next=/dashboard/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    # The page's own readiness is its header's word; the load event may wait on a busy host.
    page.wait_for_url(f"{base}/dashboard/", wait_until="domcontentloaded", timeout=60_000)
    page.wait_for_selector(f"#status:text('{status}')", timeout=30_000)


def confirm(page, answer: bool = True) -> str:  # type: ignore[no-untyped-def]
    """Answer the page's own confirmation dialog (no native confirm()); return its question."""
    dialog = "dialog.ask[open]"
    page.wait_for_selector(dialog, timeout=10_000)
    question = page.text_content(f"{dialog} .question") or ""
    page.click(f"{dialog} button[value={'yes' if answer else 'no'}]")
    return question


def test_dashboard_end_to_end(site: tuple[str, str, EngineSettings]) -> None:
    from playwright.sync_api import sync_playwright

    base, password, settings = site
    later = engine(settings, lambda c: c.enqueue(resize_image.using(delay_s=600), 1, 1))
    failing = engine(settings, lambda c: c.enqueue(charge_card, 100))
    parked = engine(
        settings,
        lambda c: c.enqueue_many(
            [resize_image.using(delay_s=600).call(7770001 + i, 1) for i in range(6)]
        ),
    )
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        login(page, base, password)
        # counts change while the worker runs the demo jobs
        cell = "#queues tbody tr:first-child td:nth-child(6)"
        page.wait_for_selector(cell, timeout=15_000)
        first = int(page.text_content(cell) or 0)
        # polled from here: wait_for_function evaluates a string, which the page's CSP forbids
        deadline = time.monotonic() + 20
        while int(page.text_content(cell) or 0) <= first:
            assert time.monotonic() < deadline, "the completed count did not move"
            page.wait_for_timeout(200)
        page.wait_for_selector(f"#failures li[data-id='{failing.id}']", timeout=15_000)
        page.screenshot(path=str(DOCS / "dashboard.png"), full_page=True)

        # cancel the scheduled job from the history list: confirmed in the page, then said
        page.fill("#filter input[name=q]", later.id)
        page.click("#filter button")
        page.click(f"tr[data-id='{later.id}'] button[data-action=cancel]", timeout=10_000)
        assert confirm(page) == f"Cancel job {later.id}?"
        page.wait_for_selector(f".toast:has-text('Cancelled job {later.id}')", timeout=10_000)
        deadline = time.monotonic() + 10
        while engine(settings, lambda c: c.jobs.get(later.id)).state is not JobState.CANCELLED:
            assert time.monotonic() < deadline, "not cancelled"
            page.wait_for_timeout(200)  # lets Playwright handle the page's dialogs meanwhile
        # everything matching a filter: the confirmation shows the count first; past the
        # site's cap of 5 the change runs in the background and is followed to its end
        page.fill("#filter input[name=q]", "777000")
        page.click("#filter button")
        page.wait_for_timeout(500)
        page.click("button[data-bulk=cancel][data-scope=matching]")
        messages = [confirm(page)]
        page.wait_for_selector(".toast:has-text('cancel: 6 of 6 jobs changed')", timeout=10_000)
        deadline = time.monotonic() + 10
        while {engine(settings, lambda c, j=j: c.jobs.get(j.id)).state for j in parked} != {
            JobState.CANCELLED
        }:
            assert time.monotonic() < deadline, f"matching jobs not cancelled: {messages}"
            page.wait_for_timeout(200)  # lets Playwright handle the page's dialogs meanwhile
        assert "Cancel 6 jobs?" in messages
        # resubmit the failed job from the failures list
        page.fill("#filter input[name=q]", "")
        page.click("#filter button")
        page.click(
            f"#failures li[data-id='{failing.id}'] button[data-action=retry]", timeout=10_000
        )
        confirm(page)
        deadline = time.monotonic() + 10
        while len(engine(settings, lambda c: c.jobs.get(failing.id)).errors) < 2:
            assert time.monotonic() < deadline, "not retried"
            page.wait_for_timeout(200)  # lets Playwright handle the page's dialogs meanwhile
        # open a job: its own page with the error first, the timeline and each attempt's
        # traceback (folded under the attempt)
        page.click(f"#failures li[data-id='{failing.id}'] a")
        page.wait_for_selector("#attempts li:nth-child(2):has-text('card declined')")
        page.click("#attempts li:nth-child(2) details summary")
        page.wait_for_selector("#attempts li:nth-child(2) pre:text('card declined')")
        page.wait_for_selector("#last-error .what:has-text('card declined')")
        assert "failed" in (page.text_content("#timeline tbody") or "")
        phone = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True)
        phone.context.add_cookies(page.context.cookies())
        phone.goto(f"{base}/dashboard/")
        phone.wait_for_selector("#status:text('live')", timeout=10_000)
        phone.wait_for_timeout(800)
        phone.screenshot(path=str(DOCS / "dashboard-phone.png"), full_page=False)
        browser.close()


def test_tricky_job_id_is_one_url_segment(site: tuple[str, str, EngineSettings]) -> None:
    """A job id that would be a path of its own is refused; a legal tricky one stays one segment.

    "../queues/default/pause?x=" put unencoded into /jobs/<id>/retry would pause the queue.
    """
    from playwright.sync_api import sync_playwright

    base, password, settings = site
    with pytest.raises(ConfigError, match="job id"):
        charge_card.using(job_id="../queues/default/pause?x=")

    async def submit_raw(client: Client) -> None:
        job = charge_card.call(100)
        job.id = "../queues/default/pause?x="  # past Task.using: the Client checks on its own
        await client.enqueue_many([job])

    with pytest.raises(ConfigError, match="job id"):
        engine(settings, submit_raw)
    tricky = "a:b@c-d.e..queues:default@pause"  # '@' as in a schedule tick's id

    async def submit_tick_like(client: Client) -> Any:
        job = charge_card.call(100)
        job.id = tricky  # callers may not choose '@' (Task.using); the scheduler's ids hold it
        return (await client.enqueue_many([job]))[0]

    failing = engine(settings, submit_tick_like)
    assert failing.id == tricky
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        errors: list[str] = []
        page.on("console", lambda m: m.type == "error" and errors.append(f"{m.text} {m.location}"))
        login(page, base, password)
        item = f"#failures li[data-id='{tricky}']"
        page.wait_for_selector(item, timeout=20_000)
        assert engine(settings, lambda c: c.jobs.get(tricky)).state is JobState.FAILED
        page.click(f"{item} button[data-action=retry]", timeout=10_000)
        messages = [confirm(page)]
        page.wait_for_selector(".toast-ok:has-text('queued again')", timeout=10_000)
        deadline = time.monotonic() + 15
        while len(engine(settings, lambda c: c.jobs.get(tricky)).errors) < 2:
            assert time.monotonic() < deadline, f"not retried: {messages}"
            page.wait_for_timeout(200)  # lets Playwright handle the page's dialogs meanwhile
        assert f"Retry job {tricky}?" in messages
        assert not page.query_selector_all(".toast-error")
        assert engine(settings, lambda c: c.queues.is_paused("default")) is False
        assert "(paused)" not in (page.text_content("#queues tbody") or "")
        assert not errors, errors  # nothing the Content-Security-Policy blocked, no script error
        # its link opens its own page
        page.wait_for_selector(item, timeout=20_000)
        page.click(f"{item} a")
        page.wait_for_selector("#headline b:text('demo.charge_card')")
        assert tricky in (page.text_content("#summary h2") or "")
        assert not errors, errors
        browser.close()


def test_job_page_shows_progress_and_logs_live(site: tuple[str, str, EngineSettings]) -> None:
    """Open a running job's page: log lines and progress arrive while it runs, then its result."""
    from playwright.sync_api import sync_playwright

    base, password, settings = site
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        login(page, base, password)
        job = engine(settings, lambda c: c.enqueue(import_rows, 8, 0.8))
        page.goto(f"{base}/dashboard/jobs/{job.id}/")
        page.wait_for_selector("#logs li:text('imported batch 1 of 8')", timeout=15_000)
        # still running when the first lines show: later ones arrive without a reload
        assert engine(settings, lambda c: c.jobs.get(job.id)).state is JobState.STARTED
        page.wait_for_selector("#logs li:text('imported batch 4 of 8')", timeout=15_000)
        width = page.eval_on_selector("#progress", "el => el.style.width")
        assert width and float(width.rstrip("%")) >= 50, width
        # The state it saved after its last batch, in its own card while it runs.
        page.wait_for_selector("#checkpoint:not([hidden]) .json:has-text('batch')", timeout=15_000)
        page.screenshot(path=str(DOCS / "job-detail.png"), full_page=True)
        page.wait_for_selector("#headline .state-completed", timeout=20_000)
        # Completed: its checkpoint is cleared, and the card goes.
        page.wait_for_selector("#checkpoint[hidden]", state="attached", timeout=10_000)
        assert page.text_content("#status") == "live"  # the connection, not the job's state
        assert "800" in (page.text_content("#result") or "")
        assert len(page.query_selector_all("#logs li")) == 8
        assert "completed" in (page.text_content("#timeline tbody") or "")
        browser.close()


def test_api_docs_render_offline(site: tuple[str, str, EngineSettings]) -> None:
    """The API docs page draws its operations from files the app serves: nothing from a CDN."""
    from playwright.sync_api import sync_playwright

    base, password, _ = site
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        outside: list[str] = []
        page.on(
            "request",
            lambda r: (
                not r.url.startswith(base)
                and not r.url.startswith("data:")
                and outside.append(r.url)
            ),
        )
        login(page, base, password)
        page.goto(f"{base}/api/v1/docs")
        page.wait_for_selector(".opblock", timeout=15_000)
        paths = {
            (p.text_content() or "").replace("\u200b", "")
            for p in page.query_selector_all(".opblock-summary-path")
        }
        assert {"/api/v1/jobs", "/api/v1/jobs/{job_id}", "/api/v1/queues"} <= paths, paths
        assert not outside, outside
        browser.close()
