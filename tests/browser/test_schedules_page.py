"""The schedules page in real headless Chromium: create, edit, pause, run now, see it fire."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from demo.demo_tasks import crunch_numbers, resize_image
from engine import EngineSettings

from .test_dashboard import DOCS, engine, launch, login, site  # noqa: F401  (site: a fixture)

pytestmark = pytest.mark.browser
ROW = "#schedules tr[data-key='default/thumbs']"


def wait_until(page, check: Callable[[], bool], what: str, timeout_s: float = 20) -> None:  # type: ignore[no-untyped-def]
    """Poll `check` (the page's CSP forbids wait_for_function's evaluated strings)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        page.wait_for_timeout(200)  # lets Playwright handle the page's dialogs meanwhile


def create(page, settings: EngineSettings) -> None:  # type: ignore[no-untyped-def]
    """Create a schedule from the form: a bad cron first (refused), then a good one."""
    page.fill("#schedule-form input[name=name]", "thumbs")
    page.select_option("#schedule-form select[name=task]", "demo.import_rows")
    # one input per argument of the task's schema, typed, the required ones marked
    fields = "#task-args label[data-arg-field]"
    page.wait_for_selector(f"{fields}[data-arg-field=pause_s]")
    assert page.get_attribute("#task-args input[data-arg=batches]", "type") == "number"
    assert page.get_attribute("#task-args input[data-arg=batches]", "required") is not None
    assert page.get_attribute("#task-args input[data-arg=pause_s]", "required") is None
    assert "*" in (page.text_content(f"{fields}[data-arg-field=batches]") or "")
    assert "*" not in (page.text_content(f"{fields}[data-arg-field=pause_s]") or "")
    page.select_option("#schedule-form select[name=task]", "demo.resize_image")
    page.wait_for_selector(f"{fields}[data-arg-field=width]")
    assert not page.is_visible("#schedule-form input[name=args]")  # the raw JSON: advanced
    page.fill("#task-args input[data-arg=image_id]", "7")
    page.fill("#task-args input[data-arg=width]", "64")
    page.click("#raw-args summary")  # what is sent, as JSON
    assert page.input_value("#schedule-form input[name=kwargs]") == '{"image_id":7,"width":64}'
    page.select_option("#schedule-form select[name=kind]", "cron")
    page.fill("#schedule-form input[name=cron]", "61 * * * *")
    page.click("#schedule-form button[type=submit]")
    # the reason alone (no HTTP status), at the cron field, which it marks
    at_field = "#schedule-form label[data-kind=cron] .field-error"
    page.wait_for_selector(f"{at_field}:text('invalid cron expression')", timeout=10_000)
    assert page.text_content(at_field) == "invalid cron expression: '61 * * * *'"
    assert page.get_attribute("#schedule-form input[name=cron]", "aria-invalid") == "true"
    assert page.text_content("#form-error") == ""
    page.fill("#schedule-form input[name=cron]", "0 3 * * *")
    page.fill("#schedule-form input[name=tz]", "Europe/Paris")
    page.click("#schedule-form button[type=submit]")
    page.wait_for_selector(f"{ROW} td.next li:nth-child(5)", timeout=10_000)
    assert page.locator("#schedule-form .field-error").count() == 0  # cleared by the save
    rep = engine(settings, lambda c: c.repeats.get("default", "thumbs"))
    assert (rep.cron, rep.tz, rep.origin) == ("0 3 * * *", "Europe/Paris", "runtime")
    sent = rep.job_for(0)
    assert (sent.args, sent.kwargs) == ([], {"image_id": 7, "width": 64})
    assert "never" in (page.text_content(f"{ROW} td.last") or "")


def edit_and_fire(page, settings: EngineSettings) -> None:  # type: ignore[no-untyped-def]
    """Edit it to every 2 s; the demo's worker runs its ticks."""
    page.click(f"{ROW} button[data-action=edit]")
    assert page.input_value("#task-args input[data-arg=width]") == "64"  # filled from the schedule
    page.select_option("#schedule-form select[name=kind]", "every")
    page.fill("#schedule-form input[name=every_s]", "2")
    page.click("#schedule-form button[type=submit]")
    wait_until(
        page,
        lambda: "every 2 s" in (page.text_content(f"{ROW}") or ""),
        "the edit is not shown",
    )
    assert engine(settings, lambda c: c.repeats.get("default", "thumbs")).every_s == 2
    wait_until(
        page,
        lambda: "completed" in (page.text_content(f"{ROW} td.last") or ""),
        "no tick fired and completed",
    )
    assert "run now" not in (page.text_content(f"{ROW} td.last") or "")


def pause_and_run(page, settings: EngineSettings) -> str:  # type: ignore[no-untyped-def]
    """Pause it (no next runs), run it now (a job all the same); return that job's id."""
    page.click(f"{ROW} button[data-action=pause]")
    wait_until(page, lambda: page.text_content(f"{ROW} td.paused") == "paused", "not paused")
    assert (page.text_content(f"{ROW} td.next") or "").strip() == "\u2013"  # an en dash: none
    page.click(f"{ROW} button[data-action=run]")
    page.wait_for_selector("#message:text('submitted job thumbs@')", timeout=10_000)
    manual = (page.text_content("#message") or "").split()[-1]
    wait_until(
        page,
        lambda: (
            "run now" in (page.text_content(f"{ROW} td.last") or "")
            and "completed" in (page.text_content(f"{ROW} td.last") or "")
        ),
        "the run-now job did not complete",
    )
    assert engine(settings, lambda c: c.jobs.get(manual)).result == {"image_id": 7, "width": 64}
    # one more, active, for the screenshot: its five next fire times
    nightly = crunch_numbers.call(1000)
    engine(settings, lambda c: c.repeats.add("nightly", nightly, cron="0 3 * * *", tz="UTC"))
    page.wait_for_selector("tr[data-key='default/nightly'] td.next li:nth-child(5)")
    return manual


def health_shown(page, settings: EngineSettings) -> None:  # type: ignore[no-untyped-def]
    """The health column: the schedule the demo's worker fires is ok; one on a queue no worker
    serves is judged no_worker, then missed once a tick is overdue, with the reason in words."""
    wait_until(
        page,
        lambda: page.get_attribute(f"{ROW} td.health-cell span", "data-health") == "ok",
        "the fired schedule is not ok",
    )
    engine(
        settings,
        lambda c: c.repeats.add(
            "orphan", crunch_numbers.using(queue="nightshift").call(10), every_s=1
        ),
    )
    orphan = "#schedules tr[data-key='nightshift/orphan'] td.health-cell"
    wait_until(
        page,
        lambda: page.get_attribute(f"{orphan} span", "data-health") == "missed",
        "a schedule no worker fires is not missed",
    )
    assert "no scheduler" in (page.text_content(orphan) or "") or "no live worker" in (
        page.text_content(orphan) or ""
    )
    engine(settings, lambda c: c.repeats.remove("nightshift", "orphan"))


def test_schedules_page_end_to_end(site: tuple[str, str, EngineSettings]) -> None:  # noqa: F811
    from playwright.sync_api import sync_playwright

    base, password, settings = site
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        errors: list[str] = []
        expected = ("/api/v1/schedules",)  # the bad cron (422)
        page.on(
            "console",
            lambda m: (
                m.type == "error"
                and not m.location.get("url", "").endswith(expected)
                and errors.append(f"{m.text} {m.location}")
            ),
        )
        login(page, base, password)
        page.click("nav a:text('Schedules')")
        page.wait_for_selector("#status:text-is('live')", timeout=10_000)
        page.wait_for_selector(
            "#schedule-form select[name=task] option[value='demo.resize_image']", state="attached"
        )

        create(page, settings)
        edit_and_fire(page, settings)
        health_shown(page, settings)
        manual = pause_and_run(page, settings)
        page.screenshot(path=str(DOCS / "screenshots" / "schedules.png"), full_page=True)
        # its last run links to the job's page
        page.click(f"{ROW} td.last a")
        page.wait_for_selector("#headline:has-text('demo.resize_image')", timeout=10_000)
        assert manual in (page.text_content("#summary h2") or "")
        assert not errors, errors
        browser.close()


def test_a_limited_schedule_counts_its_runs_and_a_flow_schedule_lists_its_jobs(
    site: tuple[str, str, EngineSettings],  # noqa: F811
) -> None:
    from playwright.sync_api import sync_playwright

    base, password, settings = site
    first = resize_image.call(1, 16)
    second = crunch_numbers.using(depends_on=[first.id]).call(10)
    engine(
        settings,
        lambda c: c.repeats.add("twice", resize_image.call(2, 16), every_s=1, repeat_limit=2),
    )
    engine(settings, lambda c: c.repeats.add("etl", [first, second], cron="0 3 * * *"))
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        login(page, base, password)
        page.goto(f"{base}/dashboard/schedules/")
        twice = "#schedules tr[data-key='default/twice']"
        page.wait_for_selector(f"{twice} .fired", timeout=10_000)
        wait_until(  # the demo's scheduler fires it twice, then it ends: no next runs
            page,
            lambda: "2 of 2 runs fired, 0 left" in (page.text_content(f"{twice} .fired") or ""),
            "the limited schedule did not fire twice",
        )
        assert (page.text_content(f"{twice} td.next") or "").strip() == "\u2013"
        etl = "#schedules tr[data-key='default/etl']"
        assert page.locator(f"{etl} ol.flow-jobs li").count() == 2
        assert "after 1" in (page.text_content(f"{etl} ol.flow-jobs li >> nth=1") or "")
        assert page.locator(f"{etl} button[data-action=edit]").count() == 0
        assert not errors, errors
        browser.close()
