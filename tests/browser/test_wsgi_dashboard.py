"""The dashboard under plain WSGI (`manage.py runserver` without Daphne): no websocket connects,
yet every panel fills over HTTP and keeps up by polling, a note says so (not an outage), and the
socket is tried again rarely enough that the server's log is not flooded with 404s.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from demo.demo_tasks import import_rows, resize_image
from engine import EngineSettings
from engine.dev.devserver import RedisServer, free_port
from tests import serving

from .test_dashboard import CHROMIUM, engine, launch, login

pytestmark = pytest.mark.browser
SOCKET_404 = '"GET /ws/jobsite/dashboard/ HTTP/1.1" 404'


@pytest.fixture
def wsgi_site(tmp_path: Path) -> Iterator[tuple[str, str, EngineSettings, Path]]:
    """The demo under `runserver` (WSGI) with a worker; yield its URL, the admin's password,
    the engine's settings and the server's log."""
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
        log = tmp_path / "serve.log"
        proc = serving.start_wsgi(env, port, log)
        password = serving.wait_up(proc, log, timeout_s=120)
        try:
            yield (
                f"http://127.0.0.1:{port}",
                password,
                EngineSettings.from_url(redis_server.url),
                log,
            )
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def _number(page, selector: str) -> int:  # type: ignore[no-untyped-def]
    return int(page.text_content(selector) or 0)


def test_dashboard_fills_and_follows_by_polling_without_a_websocket(
    wsgi_site: tuple[str, str, EngineSettings, Path],
) -> None:
    from playwright.sync_api import sync_playwright

    base, password, settings, log = wsgi_site
    running = engine(settings, lambda c: c.enqueue(import_rows, 60, 0.5))  # runs for 30 s
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        errors: list[str] = []

        def console(message) -> None:  # type: ignore[no-untyped-def]
            if message.type == "error":
                errors.append(message.text)

        page.on("console", console)
        login(page, base, password, status="polling")
        opened = time.monotonic()
        note = page.wait_for_selector("#polling-note:not([hidden])", timeout=10_000)
        assert note is not None
        text = note.text_content() or ""
        assert "polling every 3 s" in text and "Daphne" in text and "docs/install.md" in text
        # every panel the socket used to bring fills over HTTP
        page.wait_for_selector("#queues tbody tr:first-child td:text-is('default')")
        page.wait_for_selector("#workers li[data-worker]", timeout=10_000)
        page.wait_for_selector(f"#running li[data-id='{running.id}']", timeout=15_000)
        assert "import_rows" in (page.text_content("#running") or "")
        # polling is not an outage: no Redis banner, actions stay enabled
        assert page.is_hidden("#redis-down")
        assert page.get_attribute("body", "data-down") is None
        assert page.text_content("#status") == "polling"

        # updates arrive without a reload: three jobs scheduled for later show in the counts
        scheduled = "#queues tbody tr:first-child td:nth-child(3)"
        before = _number(page, scheduled)
        engine(
            settings,
            lambda c: c.enqueue_many(
                [resize_image.using(delay_s=600).call(i, 1) for i in range(3)]
            ),
        )
        deadline = time.monotonic() + 8
        while _number(page, scheduled) < before + 3:
            assert time.monotonic() < deadline, "the scheduled count did not follow"
            page.wait_for_timeout(200)
        # the running job's progress moves too (the mirror's rows, polled)
        bar = f"#running li[data-id='{running.id}'] .bar span"
        first = page.eval_on_selector(bar, "el => parseFloat(el.style.width)")
        deadline = time.monotonic() + 8
        while page.eval_on_selector(bar, "el => parseFloat(el.style.width)") <= first:
            assert time.monotonic() < deadline, "the running job's progress did not follow"
            page.wait_for_timeout(200)

        # the socket is tried again ever more rarely: a handful of 404s, not one a second
        page.wait_for_timeout(max(0, 20_000 - int((time.monotonic() - opened) * 1000)))
        tries = log.read_text().count(SOCKET_404)
        assert 1 <= tries <= 6, tries
        assert page.text_content("#status") == "polling"
        unexpected = [e for e in errors if "WebSocket" not in e]
        assert not unexpected, unexpected
        browser.close()
    engine(settings, lambda c: c.jobs.cancel([running.id]))
