"""The roles page in headless Chromium: create a role, see a worker follow it, change its queues
(the running worker follows, no restart), refuse bad input, delete it through the page's dialog."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import EngineSettings, list_roles
from tests.engine.harness import WorkerProc

from .test_dashboard import confirm, engine, launch, login, site  # noqa: F401  (site: a fixture)
from .test_schedules_page import wait_until

pytestmark = pytest.mark.browser
ROW = "#role-list tr[data-role='etl']"


@pytest.fixture(autouse=True)
def two_queues(monkeypatch: pytest.MonkeyPatch) -> None:
    """Serve `reports` too (a role may name only served queues); before the site starts."""
    monkeypatch.setenv("JOBSITE_QUEUES", "default,reports")


def roles(settings: EngineSettings) -> list[dict[str, object]]:
    found = engine(settings, lambda c: list_roles(c.redis, c.settings.prefix))
    return [r.to_dict() for r in found]


def worker_queues(settings: EngineSettings, pid: int) -> str:
    return next(
        (w["queues"] for w in engine(settings, lambda c: c.workers.list()) if w["pid"] == pid), ""
    )


def test_roles_page_end_to_end(
    site: tuple[str, str, EngineSettings],  # noqa: F811
    tmp_path: Path,
) -> None:
    from playwright.sync_api import sync_playwright

    base, password, settings = site
    worker = WorkerProc(settings.redis_url, tmp_path / "ledger.jsonl", queues=None)
    worker.cmd += ["--role", "etl"]
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        errors: list[str] = []
        page.on(
            "console",
            lambda m: (
                m.type == "error"
                and "/api/v1/roles/" not in m.location.get("url", "")  # the refused input (422)
                and errors.append(f"{m.text} {m.location}")
            ),
        )
        login(page, base, password)
        page.click("nav a:text('Roles')")
        page.wait_for_selector("#status:text-is('live')", timeout=10_000)
        assert page.is_visible("#roles .empty")

        # Create it from the form.
        page.fill("#role-form input[name=name]", "etl")
        page.fill("#role-form input[name=queues]", "default, reports")
        page.click("#role-form button")
        page.wait_for_selector(".toast:has-text('Role etl saved')", timeout=10_000)
        page.wait_for_selector(f"{ROW} td.queues:has-text('reports')", timeout=10_000)
        assert [r["queues"] for r in roles(settings)] == [["default", "reports"]]
        assert not page.is_visible(".toast:has-text('no worker serves')")  # the demo's serves both

        # A role naming a queue no worker serves is saved, and the page says so: the API's answer
        # then (tests/jobsite/test_roles_api.py), as the demo's worker serves every queue.
        unserved = {
            **{"name": "later", "queues": ["reports"], "changed_at": "2026-01-01T00:00:00Z"},
            **{"workers": [], "moved": [], "unserved": ["reports"]},
            "warning": "no worker serves: reports",
        }
        page.route("**/api/v1/roles/later", lambda route: route.fulfill(status=201, json=unserved))
        page.fill("#role-form input[name=name]", "later")
        page.fill("#role-form input[name=queues]", "reports")
        page.click("#role-form button")
        page.wait_for_selector(
            ".toast:has-text('Role later: no worker serves: reports.')", timeout=10_000
        )
        page.unroute("**/api/v1/roles/later")

        # A worker started with the role is listed as following it.
        try:
            worker.start()
            wait_until(
                page,
                lambda: "none" not in (page.text_content(f"{ROW} td.workers") or "none"),
                "no worker follows the role",
            )
            assert worker_queues(settings, worker.pid) == "default,reports"

            # Bad input: a clear error, nothing changed.
            page.fill("#role-form input[name=name]", "etl")
            page.fill("#role-form input[name=queues]", "a, a")
            page.click("#role-form button")
            page.wait_for_selector("#role-form .error:has-text('each queue once')", timeout=10_000)
            assert "422" not in (page.text_content("#role-form .error") or "")  # the reason alone
            assert [r["queues"] for r in roles(settings)] == [["default", "reports"]]

            # Edit: the running worker follows within seconds, no restart.
            page.click(f"{ROW} button[data-action=edit]")
            wait_until(
                page,
                lambda: page.input_value("#role-form input[name=queues]") == "default, reports",
                "the form is not filled with the role",
            )
            page.fill("#role-form input[name=queues]", "reports")
            page.click("#role-form button")
            page.wait_for_selector(".toast:has-text('1 worker follows it')", timeout=10_000)
            wait_until(
                page,
                lambda: worker_queues(settings, worker.pid) == "reports",
                "the worker did not follow the role",
                timeout_s=10,
            )
            assert worker.alive()
            page.screenshot(path=str(tmp_path / "roles.png"), full_page=True)

            # The overview's workers list names the role.
            page.click("nav a:text('Overview')")
            page.wait_for_selector("#workers .worker-role:text('role etl')", timeout=10_000)

            # Delete, through the page's own dialog.
            page.click("nav a:text('Roles')")
            page.click(f"{ROW} button[data-action=delete]")
            assert confirm(page) == "Delete role etl?"
            page.wait_for_selector(".toast:has-text('Role etl deleted')", timeout=10_000)
            page.wait_for_selector(ROW, state="detached", timeout=10_000)
            assert roles(settings) == []
            assert worker_queues(settings, worker.pid) == "reports"  # it keeps its last queues
        finally:
            worker.stop()
        assert not errors, errors
        browser.close()
