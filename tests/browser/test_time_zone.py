"""Times in one zone on every dashboard page, in headless Chromium: the browser's own by default,
UTC at the header's toggle, the choice kept across pages, reloads and tabs; the job list's
"since" typed in the chosen zone and sent as an absolute time."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit
from zoneinfo import ZoneInfo

import pytest

from demo.demo_tasks import resize_image
from engine import EngineSettings

from .test_dashboard import engine, launch, login, site  # noqa: F401 (site: a fixture)
from .test_operator import row_ids, wait_until

pytestmark = pytest.mark.browser
ZONE = "America/New_York"


def shown(at: datetime) -> str:
    """Return `at` as the pages show a time in Chromium's en-US: "12/5/2026, 9:04:05 AM"."""
    clock = f"{at.hour % 12 or 12}:{at.minute:02}:{at.second:02} {'AM' if at.hour < 12 else 'PM'}"
    return f"{at.month}/{at.day}/{at.year}, {clock}"


def text(page: Any, selector: str) -> str:
    """Return an element's text with ICU's narrow and no-break spaces as plain ones."""
    return (page.text_content(selector) or "").replace("\u202f", " ").replace("\xa0", " ")


def in_use(page: Any) -> str:
    """Return what the header's toggle says is in use (its pressed button)."""
    return text(page, "#time-zone button[aria-pressed=true]")


def chart_time(page: Any, zone: str) -> datetime:
    """Point at the right of the throughput chart; return the time its legend says, read in
    `zone` (uPlot's "2026-12-05 4:04pm")."""
    box = page.locator("figure[data-chart=throughput] .u-over").bounding_box()
    legend = "figure[data-chart=throughput] .u-legend .u-series:first-child .u-value"
    shape = re.compile(r"(\d{4})-(\d\d)-(\d\d) (\d+):(\d\d)(am|pm)")
    # One read that matches: a chart redrawn by the toggle shows "--" until the pointer moves.
    found: list[re.Match[str]] = []
    tries = [0]

    def shown() -> bool:
        tries[0] += 1  # a pointer that moves: the legend follows a move, not a still pointer
        page.mouse.move(box["x"] + box["width"] * 0.9, box["y"] + box["height"] / 2 + tries[0] % 2)
        m = shape.fullmatch(text(page, legend))
        found[:] = [m] if m else []
        return bool(m)

    wait_until(page, shown, "the legend shows no time")
    (m,) = found
    year, month, day, hour, minute = (int(g) for g in m.groups()[:5])
    hour = hour % 12 + (12 if m.group(6) == "pm" else 0)
    return datetime(year, month, day, hour, minute, tzinfo=ZoneInfo(zone))


def test_times_follow_the_header_toggle_on_every_page(
    site: tuple[str, str, EngineSettings],  # noqa: F811
) -> None:
    from playwright.sync_api import sync_playwright

    base, password, settings = site
    job = engine(settings, lambda c: c.enqueue(resize_image, 4242, 1))
    with sync_playwright() as pw:
        browser = launch(pw)
        context = browser.new_context(
            timezone_id=ZONE, locale="en-US", viewport={"width": 1440, "height": 900}
        )
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda e: errors.append(str(e)))
        login(page, base, password)

        def submitted_at(path: str) -> datetime:
            answer = page.request.get(f"{base}/api/v1/{path}")
            assert answer.ok, answer.text()
            data = answer.json()
            item = data["items"][0] if "items" in data else data
            return datetime.fromisoformat(item["submitted_at"])

        wait_until(
            page,
            lambda: bool(page.request.get(f"{base}/api/v1/jobs?q={job.id}").json()["items"]),
            "the job is not in the history",
        )
        at = submitted_at(f"jobs?q={job.id}")
        here, utc = shown(at.astimezone(ZoneInfo(ZONE))), shown(at.astimezone(UTC))
        assert here != utc

        # The Jobs page: the browser's zone, named in the header and beside "since".
        page.goto(f"{base}/dashboard/jobs/?q={job.id}")
        cell = f"#search tr[data-id='{job.id}'] td.at"
        wait_until(page, lambda: row_ids(page) == [job.id], "the job is not listed")
        assert in_use(page) == f"{ZONE} (local)"
        assert page.get_attribute("#time-zone", "data-zone") == "local"
        assert text(page, "#filter [data-time-zone-name]") == ZONE
        assert text(page, cell) == here, (text(page, cell), here, at)
        # Another tab of the same browser, to see it follow the switch.
        other = context.new_page()
        other.on("pageerror", lambda e: errors.append(str(e)))
        other.goto(f"{base}/dashboard/jobs/?q={job.id}")
        wait_until(other, lambda: text(other, cell) == here, "the other tab's time")

        # Switched to UTC: the same cell in UTC, the header says so, and so does the other tab.
        page.click("#time-zone button[data-zone=utc]")
        wait_until(page, lambda: text(page, cell) == utc, f"not shown in UTC: {text(page, cell)}")
        assert in_use(page) == "UTC"
        assert page.get_attribute("#time-zone", "data-zone") == "utc"
        assert text(page, "#filter [data-time-zone-name]") == "UTC"
        wait_until(other, lambda: text(other, cell) == utc, "the other tab did not follow")
        assert in_use(other) == "UTC"

        # "since" is typed in UTC now, and sent as that instant.
        typed = (datetime.now(UTC) - timedelta(minutes=30)).replace(second=0, microsecond=0)
        page.fill("#filter input[name=since]", typed.strftime("%Y-%m-%dT%H:%M"))
        page.click("#filter button")
        page.wait_for_url("**since=**", timeout=10_000)
        since = parse_qs(urlsplit(page.url).query)["since"][0]
        assert datetime.fromisoformat(since) == typed, (since, typed)
        wait_until(page, lambda: row_ids(page) == [job.id], "not found since 30 min ago, UTC")

        # The choice stays: after a reload, and on the job's own page.
        page.reload()
        wait_until(page, lambda: row_ids(page) == [job.id], "not listed after the reload")
        assert in_use(page) == "UTC"
        assert text(page, cell) == utc
        assert page.input_value("#filter input[name=since]") == typed.strftime("%Y-%m-%dT%H:%M")

        page.goto(f"{base}/dashboard/jobs/{job.id}/")
        queued = "#facts dt:text-is('queued (latest)') + dd"
        page.wait_for_selector(queued, timeout=10_000)
        assert submitted_at(f"jobs/{job.id}") == at
        assert in_use(page) == "UTC"
        wait_until(page, lambda: text(page, queued) == utc, f"job page: {text(page, queued)}")
        # and back to the browser's zone from there
        page.click("#time-zone button[data-zone=local]")
        wait_until(page, lambda: text(page, queued) == here, f"job page: {text(page, queued)}")
        assert in_use(page) == f"{ZONE} (local)"

        # The Overview's charts: their times (axes, legend) in the chosen zone too. The point
        # under the cursor is within the last hour, read in that zone (5 h off in the other).
        page.goto(f"{base}/dashboard/")
        page.wait_for_selector("#charts[data-ready='1'] figure[data-chart=throughput] .u-over")
        assert abs(chart_time(page, ZONE) - datetime.now(UTC)) < timedelta(minutes=70)
        page.click("#time-zone button[data-zone=utc]")
        wait_until(
            page,
            lambda: abs(chart_time(page, "UTC") - datetime.now(UTC)) < timedelta(minutes=70),
            "the charts are not in UTC",
        )
        assert in_use(page) == "UTC"

        # The admin: Django's TIME_ZONE (UTC here) in one format, the zone named, in the list,
        # on the job's page and in its timeline.
        want = f"{at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
        page.goto(f"{base}/admin/jobsite/jobrecord/?q={job.id}")
        assert text(page, "#result_list td.field-submitted") == want
        page.click("#result_list th.field-id a")
        page.wait_for_selector(".field-submitted .readonly")
        assert text(page, ".field-submitted .readonly") == want
        history = text(page, ".field-timeline .readonly")
        assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", history), history
        assert not errors, errors
        browser.close()
