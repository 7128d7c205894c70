"""What an operator relies on, in headless Chromium: Redis away said and survived, the job list.

Runs the README's main command (`python -m jobsite.serve`) on a private Redis this test owns
(so it can pause and kill it) and a temporary SQLite file.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine import EngineSettings
from engine.devserver import RedisServer, free_port
from jobsite.demo_tasks import charge_card, send_email
from tests import serving

from .test_dashboard import CHROMIUM, confirm, engine, launch, login

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
        password = serving.wait_up(proc, log, timeout_s=60)
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
        page.wait_for_selector("#status:text('ended')")
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
