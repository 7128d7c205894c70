"""Every dashboard page on a phone (390 by 844 px, Chromium's mobile emulation): table rows are
cards, nothing is wider than the screen, no word stands one letter per line, every action is on
screen, and the page logs no error, loses no request and asks nothing of another site.

Saves each page's top (two screens) as docs/screenshots/phone-<page>.png.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from demo.demo_tasks import charge_card, import_rows, resize_image
from engine import EngineSettings, JobState

from .test_dashboard import DOCS, engine, launch, login, site  # noqa: F401  (site: a fixture)

pytestmark = pytest.mark.browser
SHOTS = DOCS / "screenshots"
PHONE = {"width": 390, "height": 844}
CSS = Path(__file__).resolve().parents[2] / "jobsite/jobs/static/jobsite/dashboard.css"
# A chosen id as long as an operator's own can be, with no space to break at.
LONG_ID = "invoice:2025-12:customer-000000000000000000000042:charge-attempt-0001"

# What the page shows, measured in it (page.evaluate: the page's CSP forbids the evaluated
# strings of wait_for_function, not this). An element is named by its tag, id, classes and text.
MEASURE = """() => {
  const width = window.innerWidth;
  const shown = (el) => {
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && getComputedStyle(el).visibility !== "hidden";
  };
  const name = (el) => {
    const cls = typeof el.className === "string" && el.className.trim()
      ? "." + el.className.trim().split(/\\s+/).join(".") : "";
    return `${el.tagName.toLowerCase()}${el.id ? "#" + el.id : ""}${cls}`
      + ` ${JSON.stringify(el.textContent.trim().replace(/\\s+/g, " ").slice(0, 50))}`;
  };
  const out = {scrollWidth: document.documentElement.scrollWidth, innerWidth: width, cards: 0,
    narrow: [], offscreen: [], scrolling: [], unlabelled: [], table_cells: [], break_all: []};
  for (const el of document.querySelectorAll("td, th, button, a")) {
    if (el.closest("svg") || !shown(el)) continue;
    const r = el.getBoundingClientRect();
    const text = el.textContent.trim();
    // One letter per line: a box narrower than about two characters of its own font.
    if (text.length >= 4 && r.width <= 1.2 * parseFloat(getComputedStyle(el).fontSize)) {
      out.narrow.push(`${name(el)} ${r.width.toFixed(1)} px wide`);
    }
    if (r.left < -1 || r.right > width + 1) {
      out.offscreen.push(`${name(el)} from ${r.left.toFixed(0)} to ${r.right.toFixed(0)} px`);
    }
  }
  // A box that scrolls sideways hides its overflow from the page's own width: none may, but the
  // drawing of a flow's graph.
  for (const el of document.querySelectorAll("body *")) {
    if (el.closest("svg") || el.closest("#flow .graph") || !shown(el)) continue;
    const style = getComputedStyle(el);
    if (style.wordBreak === "break-all") out.break_all.push(name(el));
    if (["auto", "scroll"].includes(style.overflowX) && el.scrollWidth > el.clientWidth + 1) {
      out.scrolling.push(`${name(el)} ${el.scrollWidth} px in ${el.clientWidth}`);
    }
  }
  // Each row a card: its cells blocks, each labelled but those of the row's buttons and those
  // that span the row (a message such as "no job matches", a flow's jobs); a chart's legend
  // (uPlot's table) is not a table of the page's.
  for (const td of document.querySelectorAll("table:not(.u-legend) > tbody > tr > td")) {
    if (!shown(td)) continue;
    out.cards += 1;
    if (getComputedStyle(td).display === "table-cell") out.table_cells.push(name(td));
    const free = td.colSpan > 1 || td.querySelector("button");
    if (!td.dataset.label && !free) out.unlabelled.push(name(td));
  }
  return out;
}"""


def api(page, base: str, method: str, path: str, body: object) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Call the API as the browser's session (its cookies and CSRF token); 200 or 201."""
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    answer = page.request.fetch(
        f"{base}/api/v1{path}",
        method=method,
        data=json.dumps(body),
        headers={"Content-Type": "application/json", "X-CSRFToken": csrf, "Referer": base},
    )
    assert answer.status in (200, 201), answer.text()
    return answer.json()  # type: ignore[no-any-return]


def wait_until(page, check: Callable[[], bool], what: str, timeout_s: float = 20) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        page.wait_for_timeout(200)


def test_no_dashboard_css_breaks_words_anywhere() -> None:
    """`word-break: break-all` cuts prose mid-word at any width; ids use overflow-wrap instead."""
    assert "break-all" not in CSS.read_text()


def phone(browser):  # type: ignore[no-untyped-def]
    """A phone's context: 390 by 844 CSS px, touch, and the mobile viewport's rules (a page wider
    than its meta viewport is zoomed out, which window.innerWidth then says)."""
    return browser.new_context(viewport=PHONE, screen=PHONE, is_mobile=True, has_touch=True)


def fill_site(page, base: str, settings: EngineSettings) -> dict[str, tuple[str, list[str]]]:  # type: ignore[no-untyped-def]
    """Make jobs of several states beside the demo's own (failed, one with a long id; scheduled;
    running), a flow, a schedule and a role; return each page's path and what shows it drawn."""
    failing = engine(settings, lambda c: c.enqueue(charge_card, 100))
    long_failing = engine(settings, lambda c: c.enqueue(charge_card.using(job_id=LONG_ID), 7))
    later = engine(settings, lambda c: c.enqueue(resize_image.using(delay_s=900), 1, 64))
    engine(settings, lambda c: c.enqueue(import_rows, 120, 1.0))
    flow = [
        {"ref": "fetch", "task": "demo.resize_image", "args": [1, 320]},
        {"ref": "sum", "task": "demo.crunch_numbers", "args": [500], "depends_on": ["fetch"]},
    ]
    api(page, base, "POST", "/flows", {"jobs": flow})
    schedule = {
        "name": "nightly-report-digest",
        "task": "demo.resize_image",
        "kwargs": {"image_id": 7, "width": 64},
        "cron": "0 3 * * *",
        "tz": "Europe/Paris",
    }
    api(page, base, "POST", "/schedules", schedule)
    api(page, base, "PUT", "/roles/etl", {"queues": ["default"]})

    def failed() -> bool:
        jobs = (failing, long_failing)
        return {engine(settings, lambda c, j=j: c.jobs.get(j.id)).state for j in jobs} == {
            JobState.FAILED
        }

    wait_until(page, failed, "the failing jobs did not fail")
    return {
        "overview": (
            "/dashboard/",
            [
                "#status:text('live')",
                "#queues tbody td[data-label]",
                "#search tbody tr[data-id] td[data-label]",
                f"#later tbody tr[data-id='{later.id}']",
                f"#failures li[data-id='{failing.id}']",
                "#tasks tbody tr",
                "#health li",
                "#workers li[data-worker]",
                "#charts[data-ready]",
            ],
        ),
        "jobs": (
            "/dashboard/jobs/",
            ["#search tbody tr[data-id] td[data-label]", "#state-counts a"],
        ),
        "job": (
            f"/dashboard/jobs/{LONG_ID}/",
            [
                "#headline b",
                "#timeline tbody td[data-label]",
                "#attempts li",
                "#last-error .what b",
            ],
        ),
        "queues": (
            "/dashboard/queues/",
            ["section.queue .counts tbody td[data-label]", "#health li"],
        ),
        "workers": ("/dashboard/workers/", ["#workers-table tbody tr[data-worker] td[data-label]"]),
        "dead-letters": ("/dashboard/dead-letters/", ["#groups tbody tr[data-index]", "#tally li"]),
        "schedules": (
            "/dashboard/schedules/",
            ["#schedules tr[data-key='default/nightly-report-digest'] td.next li"],
        ),
        "flows": ("/dashboard/flows/", ["#flow-list tbody tr[data-flow] td[data-label]"]),
        "roles": ("/dashboard/roles/", ["#role-list tbody tr[data-role=etl] td[data-label]"]),
    }


# Where a page says how many of its things it shows (the header said it once).
COUNTS = {
    "workers": "main #worker-count",
    "dead-letters": "main #group-count",
    "flows": "main #flow-count",
}


def check(context, base: str, name: str, path: str, rendered: list[str]) -> None:  # type: ignore[no-untyped-def]
    """Open one page on the phone, wait for its data, measure it, save its top two screens."""
    page = context.new_page()
    errors: list[str] = []
    lost: list[str] = []
    outside: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(f"{m.text} {m.location}"))
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("requestfailed", lambda r: lost.append(f"{r.method} {r.url}: {r.failure}"))
    page.on(
        "request",
        lambda r: not r.url.startswith((base, "data:", "blob:")) and outside.append(r.url),
    )
    page.goto(f"{base}{path}")
    for selector in rendered:
        page.wait_for_selector(selector, timeout=20_000)
    # The header says one thing on every page, the connection; a page's counts are in its body.
    page.wait_for_selector("#status:text-is('live')", timeout=10_000)
    if name in COUNTS:
        page.wait_for_selector(f"{COUNTS[name]}:has-text(' ')", timeout=10_000)
    if name == "flows":  # a flow's jobs open in a row of their own
        page.click("#flow-list button[data-act=toggle]")
        page.wait_for_selector("#flow-list tr.flow-jobs li", timeout=10_000)
    page.wait_for_timeout(300)  # the charts' and the fonts' last layout
    seen = page.evaluate(MEASURE)
    where = f"{name} ({path})"
    assert seen["innerWidth"] == PHONE["width"], (where, "zoomed out to", seen["innerWidth"])
    assert seen["scrollWidth"] <= seen["innerWidth"], (where, seen["scrollWidth"])
    assert not seen["scrolling"], (where, seen["scrolling"])
    assert not seen["offscreen"], (where, seen["offscreen"])
    assert not seen["narrow"], (where, seen["narrow"])
    assert not seen["break_all"], (where, seen["break_all"])
    assert seen["cards"] and not seen["table_cells"], (where, seen["table_cells"])
    assert not seen["unlabelled"], (where, seen["unlabelled"])
    assert not errors, (where, errors)
    assert not lost, (where, lost)
    assert not outside, (where, outside)
    height = page.evaluate("() => document.documentElement.scrollHeight")
    page.screenshot(
        path=str(SHOTS / f"phone-{name}.png"),
        full_page=True,
        clip={"x": 0, "y": 0, "width": PHONE["width"], "height": min(height, 2 * PHONE["height"])},
    )
    page.close()  # before the next: a request it leaves unanswered is not the next page's


def test_every_dashboard_page_fits_a_phone(site: tuple[str, str, EngineSettings]) -> None:  # noqa: F811
    from playwright.sync_api import sync_playwright

    base, password, settings = site
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = launch(pw)
        context = phone(browser)
        first = context.new_page()
        login(first, base, password)
        pages = fill_site(first, base, settings)
        first.close()
        for name, (path, rendered) in pages.items():
            check(context, base, name, path, rendered)
        browser.close()
