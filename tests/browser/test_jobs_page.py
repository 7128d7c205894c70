"""The Jobs page in headless Chromium: the whole history a page at a time both ways, a page size
to choose, sorted by any time or the duration, all of it in the URL (a refresh shows the same
page); the Overview's History leads to it."""

from __future__ import annotations

from typing import Any

import pytest

from demo.demo_tasks import resize_image
from engine import EngineSettings

from .test_dashboard import engine, launch, login, site  # noqa: F401 (site: a fixture)
from .test_operator import row_ids, wait_until

pytestmark = pytest.mark.browser


def shown_ms(text: str) -> float:
    """Return a duration as the list shows it ("12 ms", "1.50 s", "2.0 min") in ms."""
    number, unit = text.split()
    return float(number) * {"ms": 1, "s": 1000, "min": 60_000}[unit]


def test_jobs_page_pages_both_ways_sorts_by_duration_and_keeps_it_all_in_the_url(
    site: tuple[str, str, EngineSettings],  # noqa: F811
) -> None:
    from playwright.sync_api import sync_playwright

    base, password, settings = site
    made = engine(
        settings, lambda c: c.enqueue_many([resize_image.call(7770000 + i, 1) for i in range(30)])
    )
    ids = {j.id for j in made}
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        errors: list[str] = []
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        login(page, base, password)

        def listed(query: str) -> list[dict[str, Any]]:
            answer = page.request.get(f"{base}/api/v1/jobs?{query}")
            assert answer.ok, answer.text()
            return answer.json()["items"]  # type: ignore[no-any-return]

        wait_until(
            page,
            lambda: len(listed("q=777&state=completed&limit=100")) == 30,
            "the 30 jobs did not complete",
        )
        # the Overview's History leads to the page, with its filter
        page.goto(f"{base}/dashboard/?q=777#search")
        page.click("#search a[data-all-jobs]")
        page.wait_for_url(f"{base}/dashboard/jobs/?q=777")
        assert page.text_content("th[data-sort=completed_at]") == "completed"  # the API's word
        # 50 a page at first: all 30 on one page, no other page
        wait_until(page, lambda: set(row_ids(page)) == ids, "not all 30 on the first page")
        assert page.input_value("#search select[name=limit]") == "50"
        assert page.is_hidden("#search [data-page=next]")
        assert page.is_hidden("#search [data-page=prev]")

        # 25 a page: the next page holds the other 5, and the previous one the same 25 again
        page.select_option("#search select[name=limit]", "25")
        page.wait_for_url("**limit=25**")
        wait_until(page, lambda: len(row_ids(page)) == 25, "not 25 a page")
        first = row_ids(page)
        page.click("#search [data-page=next]")
        wait_until(page, lambda: len(row_ids(page)) == 5, "the next page is not the other 5")
        assert "cursor=" in page.url
        assert set(first) | set(row_ids(page)) == ids
        page.click("#search [data-page=prev]")
        wait_until(page, lambda: row_ids(page) == first, "the previous page is not the first")
        assert "cursor=" not in page.url and "before=" not in page.url  # the first page itself
        assert page.is_hidden("#search [data-page=prev]")

        # longest first: the API's order (the database's latest attempt, start to end)
        page.click("#search th[data-sort=duration_seconds] a")
        page.wait_for_url("**sort=-duration_seconds**")
        want = [j["id"] for j in listed("q=777&sort=-duration_seconds&limit=100")]
        assert set(want) == ids
        wait_until(page, lambda: row_ids(page) == want[:25], "not in the duration order")
        assert page.get_attribute("th[data-sort=duration_seconds]", "aria-sort") == "descending"
        durations = page.locator("#search tbody tr td:nth-child(10)").all_text_contents()
        assert [shown_ms(d) for d in durations] == sorted(map(shown_ms, durations), reverse=True)

        # its next page, then a refresh: filter, order, page size and page all kept
        page.click("#search [data-page=next]")
        wait_until(page, lambda: row_ids(page) == want[25:], "not the duration order's 2nd page")
        kept = page.url
        assert all(f in kept for f in ("q=777", "sort=-duration_seconds", "limit=25", "cursor="))
        page.reload()
        wait_until(page, lambda: row_ids(page) == want[25:], "the refresh lost the page")
        assert page.url == kept
        assert page.input_value("#filter input[name=q]") == "777"
        assert page.input_value("#search select[name=limit]") == "25"
        assert page.get_attribute("th[data-sort=duration_seconds]", "aria-sort") == "descending"
        # the pager's links are links: opened elsewhere, the page before is the first 25
        before = page.get_attribute("#search [data-page=prev]", "href") or ""
        other = browser.new_page(viewport={"width": 1440, "height": 900})
        other.context.add_cookies(page.context.cookies())  # the same session
        other.goto(f"{base}{before}")
        wait_until(other, lambda: row_ids(other) == want[:25], "the link lost the order")
        page.click("#search [data-page=prev]")
        wait_until(page, lambda: row_ids(page) == want[:25], "back is not the first 25")

        # the submit form: the task's arguments as fields from its signature, sent as the API's
        # submission (a queue outside the configured ones refused with the server's reason)
        page.click("#submit summary")
        page.select_option("#submit-form select[name=task]", "demo.resize_image")
        page.wait_for_selector("#submit-args [data-arg=width][data-type=integer][required]")
        page.fill("#submit-args [data-arg=image_id]", "4242")
        page.fill("#submit-args [data-arg=width]", "7")
        page.fill("#submit-form input[name=queue]", "nope")
        page.click("#submit-form button[type=submit]")
        page.wait_for_selector("#submit-form .error:has-text('QUEUES')")
        page.fill("#submit-form input[name=queue]", "")
        page.click("#submit-form button[type=submit]")
        page.wait_for_selector(".toast:has-text('Submitted job') a")
        submitted = (page.text_content(".toast:has-text('Submitted job')") or "").split()[2]
        wait_until(
            page,
            lambda: (
                page.request.get(f"{base}/api/v1/jobs/{submitted.rstrip(':')}").json().get("result")
                == {"image_id": 4242, "width": 7}
            ),
            "the submitted job did not run with the form's arguments",
        )
        # the one console error: the refused submission's 422, asked for above
        assert [e for e in errors if "status of 422" not in e] == [], errors
        browser.close()
