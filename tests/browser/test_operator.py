"""What an operator relies on, in headless Chromium: Redis away said and survived, the job list.

Runs the README's main command (`python -m demo.serve`) on a private Redis this test owns
(so it can pause and kill it) and a temporary SQLite file.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit
from zoneinfo import ZoneInfo

import pytest

from demo.demo_tasks import charge_card, convert_price, resize_image, send_email
from engine import EngineSettings, JobState
from engine.dev.devserver import RedisServer, free_port
from tests import serving

from .test_dashboard import CHROMIUM, DOCS, confirm, engine, launch, login

pytestmark = pytest.mark.browser


@dataclass
class Site:
    base: str
    password: str
    settings: EngineSettings
    redis: RedisServer


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    if not os.path.exists(CHROMIUM):
        pytest.fail("Debian's chromium is missing: bin/test installs it (apt-get install chromium)")
    port = free_port()
    with RedisServer() as redis_server:
        env = {
            **os.environ,
            "REDIS_URL": redis_server.url,
            "COLUMNS": "200",
            "SQLITE_PATH": str(tmp_path / "db.sqlite3"),
        }
        env.pop("DJANGO_SETTINGS_MODULE", None)
        log = tmp_path / "serve.log"
        proc = serving.start(env, port, log)
        password = serving.wait_up(proc, log, timeout_s=120)
        try:
            yield Site(
                f"http://127.0.0.1:{port}",
                password,
                EngineSettings.from_url(redis_server.url),
                redis_server,
            )
        finally:
            if redis_server.process is not None:
                redis_server.process.send_signal(signal.SIGCONT)
            proc.terminate()
            proc.wait(timeout=30)


def wait_until(page: Any, check: Callable[[], bool], what: str, timeout_s: float = 20) -> None:
    """Poll `check()` (the page's CSP forbids wait_for_function's string evaluation)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        page.wait_for_timeout(200)


def banner_shown(page: Any) -> bool:
    return bool(page.eval_on_selector("#redis-down", "el => !el.hidden"))


def test_redis_down_banner_paused_killed_and_back(site: Site) -> None:
    """Redis paused, then killed: a banner says so and actions are disabled; back: both go."""
    from playwright.sync_api import sync_playwright

    assert site.redis.process is not None
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        login(page, site.base, site.password)
        pause = "#queues button[data-action=pause]"
        page.wait_for_selector(pause, timeout=15_000)
        assert not banner_shown(page)

        site.redis.process.send_signal(signal.SIGSTOP)
        wait_until(page, lambda: banner_shown(page), "no banner with Redis paused")
        assert "Redis is unreachable" in (page.text_content("#redis-down") or "")
        assert page.is_disabled(pause)
        site.redis.process.send_signal(signal.SIGCONT)
        wait_until(page, lambda: not banner_shown(page), "the banner stayed after SIGCONT")
        page.wait_for_selector("#status:text('live')", timeout=10_000)
        assert page.is_enabled(pause)

        site.redis.stop(signal.SIGKILL)
        wait_until(page, lambda: banner_shown(page), "no banner with Redis killed")
        page.wait_for_selector("body[data-down]", timeout=5_000)
        assert page.is_disabled(pause)
        # a page opened while Redis is away says so too
        other = browser.new_page(viewport={"width": 1440, "height": 900})
        other.context.add_cookies(page.context.cookies())
        other.goto(f"{site.base}/dashboard/queues/")
        wait_until(other, lambda: banner_shown(other), "no banner on the queues page")
        site.redis.start()
        wait_until(page, lambda: not banner_shown(page), "the banner stayed after a restart")
        page.wait_for_selector("#status:text('live')", timeout=15_000)
        page.wait_for_selector(pause, timeout=15_000)
        assert page.is_enabled(pause)
        wait_until(other, lambda: not banner_shown(other), "queues page banner stayed")
        browser.close()


def numbers_of(text: str) -> list[float]:
    """Return every number written before " s" (the durations of the facts list)."""
    return [float(m) for m in re.findall(r"(-?\d+(?:\.\d+)?) s\b", text)]


def test_job_page_follows_a_manual_retry(site: Site) -> None:
    """A failed job retried from its page: the page follows it, numbers attempts per run."""
    from playwright.sync_api import sync_playwright

    failing = engine(site.settings, lambda c: c.enqueue(charge_card, 4200))
    retried = engine(site.settings, lambda c: c.enqueue(send_email, "ops@example.com"))
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        login(page, site.base, site.password)
        # automatic retries: every wait and run time is a duration, never negative
        page.goto(f"{site.base}/dashboard/jobs/{retried.id}/")
        page.wait_for_selector("#headline .state-completed", timeout=20_000)
        facts = page.text_content("#facts") or ""
        assert numbers_of(facts) and all(n >= 0 for n in numbers_of(facts)), facts

        page.goto(f"{site.base}/dashboard/jobs/{failing.id}/")
        page.wait_for_selector("#headline .state-failed", timeout=20_000)
        page.wait_for_selector("#status:text-is('live')")  # the connection, not the job's state
        page.click("#actions button[data-action=retry]")
        assert confirm(page) == f"Retry job {failing.id}?"
        page.wait_for_selector(".toast-ok:has-text('Retried')", timeout=10_000)
        # it ran again and failed again: the page followed without a reload
        page.wait_for_selector("#attempts li:nth-child(2)", timeout=20_000)
        page.wait_for_selector("#headline .state-failed", timeout=20_000)
        headline = page.text_content("#headline") or ""
        assert "attempt 1 of run 2" in headline, headline
        labels = page.locator("#attempts li > b").all_text_contents()
        assert labels == ["attempt 1 of run 1", "attempt 1 of run 2"], labels
        page.wait_for_selector("#timeline td:text('manual retry')", timeout=20_000)
        facts = page.text_content("#facts") or ""
        assert all(n >= 0 for n in numbers_of(facts)), facts
        assert "waited" in facts
        browser.close()


def test_the_job_page_leads_with_the_error(site: Site) -> None:
    """A failed job's page opens on its error: the message, the line of the application's own
    code (engine frames dimmed), why it was not retried; the cancel dialog says what each
    button does."""
    from playwright.sync_api import sync_playwright

    failing = engine(site.settings, lambda c: c.enqueue(charge_card, 4200))
    waiting = engine(site.settings, lambda c: c.enqueue(resize_image.using(delay_s=600), 1, 1))
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        login(page, site.base, site.password)
        page.goto(f"{site.base}/dashboard/jobs/{failing.id}/")
        page.wait_for_selector("#headline .state-failed", timeout=20_000)
        page.wait_for_selector("#last-error:not([hidden])")
        what = page.text_content("#last-error .what") or ""
        assert what.startswith("ValueError: card declined for 4200 cents"), what
        where = page.text_content("#last-error .where") or ""
        assert "demo_tasks.py" in where and "in charge_card" in where, where
        said = page.text_content("#last-error .not-retried") or ""
        assert "ValueError is not in expected_exceptions" in said, said
        dimmed = page.locator("#last-error .other-frame").all_text_contents()
        assert dimmed and all("demo_tasks.py" not in line for line in dimmed), dimmed
        # The error sits above the timeline, full width, before anything else of the job.
        boxes = [page.locator(sel).bounding_box() for sel in ("#last-error", "#timeline")]
        assert boxes[0] and boxes[1] and boxes[0]["y"] < boxes[1]["y"]
        # A waiting job shows no error box, and its cancel dialog says what "no" means.
        page.goto(f"{site.base}/dashboard/jobs/{waiting.id}/")
        page.wait_for_selector("#actions button[data-action=cancel]:not([hidden])")
        assert page.eval_on_selector("#last-error", "el => el.hidden")
        page.click("#actions button[data-action=cancel]")
        page.wait_for_selector("dialog.ask[open]")
        buttons = page.locator("dialog.ask[open] button").all_text_contents()
        assert buttons == ["Keep it", "Cancel job"], buttons
        confirm(page, answer=False)
        browser.close()


def parked_jobs(site: Site) -> tuple[list[str], list[str]]:
    """Enqueue 5 then 25 jobs due in 10 minutes (they stay put); return both batches' ids."""

    async def submit(client: Any) -> tuple[list[str], list[str]]:
        later = resize_image.using(delay_s=600)
        first = await client.enqueue_many([later.call(8880000 + i, 1) for i in range(5)])
        await asyncio.sleep(0.05)
        second = await client.enqueue_many([later.call(8880100 + i, 1) for i in range(25)])
        return [j.id for j in first], [j.id for j in second]

    return engine(site.settings, submit)  # type: ignore[no-any-return]


def row_ids(page: Any) -> list[str]:
    rows = page.query_selector_all("#search tbody tr[data-id]")
    return [r.get_attribute("data-id") for r in rows]


def test_job_list_pages_sorts_and_keeps_filters_in_the_url(site: Site) -> None:
    from playwright.sync_api import sync_playwright

    first, second = parked_jobs(site)
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        errors: list[str] = []
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        login(page, site.base, site.password)
        page.fill("#filter input[name=q]", "888")
        page.fill("#filter input[name=task]", "RESIZE")  # part of the name, any case
        page.click("#filter button")
        page.wait_for_url("**q=888**", timeout=10_000)
        assert "task=RESIZE" in page.url
        wait_until(page, lambda: len(row_ids(page)) == 25, "first page not 25 rows")
        assert set(row_ids(page)) == set(second)  # newest submitted first
        page.wait_for_selector("#state-counts a:has-text('scheduled 30')", timeout=10_000)
        assert "30 jobs match" in (page.text_content("#search .page-info") or "")
        # the next page: the 5 older ones, its cursor in the URL; back returns
        page.click("#search [data-page=next]")
        wait_until(page, lambda: set(row_ids(page)) == set(first), "second page wrong")
        assert "cursor=" in page.url
        page.go_back()
        wait_until(page, lambda: set(row_ids(page)) == set(second), "back did not return")
        # oldest first: the first batch leads
        page.click("#search th[data-sort=submitted_at] a")
        wait_until(page, lambda: set(row_ids(page)[:5]) == set(first), "ascending sort wrong")
        assert "sort=submitted_at" in page.url
        assert page.get_attribute("th[data-sort=submitted_at]", "aria-sort") == "ascending"
        # a shared link (or a refresh) shows the same list with the same filter
        other = browser.new_page(viewport={"width": 1440, "height": 900})
        other.context.add_cookies(page.context.cookies())
        other.goto(page.url)
        wait_until(other, lambda: set(row_ids(other)[:5]) == set(first), "the link lost it")
        assert other.input_value("#filter input[name=q]") == "888"
        assert other.input_value("#filter input[name=task]") == "RESIZE"
        # a state from the counts bar
        other.click("#state-counts a[data-state=scheduled]")
        other.wait_for_url("**state=scheduled**", timeout=10_000)
        assert other.input_value("#filter select[name=state]") == "scheduled"
        assert not errors, errors
        browser.close()


@pytest.mark.parametrize("zone", ["Europe/Paris", "America/New_York"])
def test_since_is_read_and_shown_in_the_browsers_zone(site: Site, zone: str) -> None:
    """ "since" typed as local time finds what was submitted since then; the URL holds UTC."""
    from playwright.sync_api import sync_playwright

    parked_jobs(site)
    with sync_playwright() as pw:
        browser = launch(pw)
        context = browser.new_context(timezone_id=zone, viewport={"width": 1440, "height": 900})
        page = context.new_page()
        login(page, site.base, site.password)
        local_now = datetime.now(ZoneInfo(zone))
        ago = (local_now - timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M")
        page.fill("#filter input[name=q]", "888")
        page.fill("#filter input[name=since]", ago)
        page.click("#filter button")
        page.wait_for_url("**since=**", timeout=10_000)
        wait_until(page, lambda: len(row_ids(page)) == 25, f"last 30 min in {zone}: not found")
        since = parse_qs(urlsplit(page.url).query)["since"][0]
        sent = datetime.fromisoformat(since.replace("Z", "+00:00"))
        assert sent.utcoffset() == timedelta(0)
        want = datetime.fromisoformat(ago).replace(tzinfo=ZoneInfo(zone))
        assert abs((sent - want).total_seconds()) < 1, (sent, want)
        # shown back in the same zone after a reload
        page.reload()
        wait_until(page, lambda: page.input_value("#filter input[name=since]") == ago, "lost")
        # times shown are local: the submitted column names this zone's hour
        wait_until(page, lambda: len(row_ids(page)) == 25, "rows after reload")
        shown = page.text_content("#search tbody tr:first-child td.at") or ""
        local = datetime.now(ZoneInfo(zone))
        hours = {f"{(local - timedelta(minutes=m)).hour % 12 or 12}:" for m in (0, 2)}
        assert any(h in shown for h in hours), (shown, hours)
        # 30 minutes ahead, local: nothing (read as UTC it would have matched in New York)
        ahead = (local_now + timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M")
        page.fill("#filter input[name=since]", ahead)
        page.click("#filter button")
        page.wait_for_selector("#search tbody td.empty", timeout=10_000)
        assert not row_ids(page)
        browser.close()


def overflow_px(page: Any) -> int:
    """Return how far the page body is wider than the window (0: no horizontal scroll)."""
    return int(
        page.evaluate("Math.max(0, document.documentElement.scrollWidth - window.innerWidth)")
    )


def test_every_page_fits_desktop_and_phone_without_console_errors(site: Site) -> None:
    from playwright.sync_api import sync_playwright

    failing = engine(site.settings, lambda c: c.enqueue(charge_card, 4200))
    # a long unbroken error message must not push the page wider
    long = engine(site.settings, lambda c: c.enqueue(convert_price, 100, "X" * 400))
    deadline = time.monotonic() + 20
    while {
        engine(site.settings, lambda c, j=j: c.jobs.get(j.id)).state for j in (failing, long)
    } != {JobState.FAILED}:
        assert time.monotonic() < deadline, "the jobs did not fail"
        time.sleep(0.2)
    pages = [
        "/dashboard/",
        "/dashboard/jobs/",
        "/dashboard/queues/",
        "/dashboard/schedules/",
        "/dashboard/dead-letters/",
        f"/dashboard/jobs/{failing.id}/",
        f"/dashboard/jobs/{long.id}/",
        "/admin/",
        f"/admin/jobsite/jobrecord/{failing.id}/change/",
    ]
    with sync_playwright() as pw:
        browser = launch(pw)
        desktop = browser.new_page(viewport={"width": 1440, "height": 900})
        login(desktop, site.base, site.password)
        cookies = desktop.context.cookies()
        phone_context = browser.new_context(
            viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
        )
        phone_context.add_cookies(cookies)
        phone = phone_context.new_page()
        errors: list[str] = []
        for page in (desktop, phone):
            page.on(
                "console",
                lambda m: m.type == "error" and errors.append(f"{m.text} {m.location}"),
            )
        wide: dict[str, int] = {}
        for path in pages:
            for name, page in (("desktop", desktop), ("phone", phone)):
                page.goto(f"{site.base}{path}")
                page.wait_for_load_state("networkidle")
                page.wait_for_timeout(600)  # the live data and the charts drawn
                if overflow_px(page):
                    wide[f"{name} {path}"] = overflow_px(page)
        # the Tasks table: per-task counts from the rollup, a task linking to its jobs
        desktop.goto(f"{site.base}/dashboard/")
        desktop.wait_for_selector("#tasks tbody a:text('demo.resize_image')", timeout=20_000)
        desktop.click("#tasks tbody a:text('demo.charge_card')")
        desktop.wait_for_url("**task=demo.charge_card**", timeout=10_000)
        desktop.wait_for_selector(f"#search tbody tr[data-id='{failing.id}']", timeout=10_000)
        phone.goto(f"{site.base}/dashboard/")
        phone.wait_for_selector("#status:text('live')", timeout=10_000)
        phone.wait_for_timeout(800)
        phone.screenshot(path=str(DOCS / "dashboard-phone.png"), full_page=False)
        assert not wide, wide
        assert not errors, errors
        browser.close()
