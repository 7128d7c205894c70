"""A flow submitted through the API, its graph on the job page; the queues page setting a rate
limit, showing jobs waiting for their concurrency key's turn, and resuming the queue."""

from __future__ import annotations

import json
import time

import pytest

from demo.demo_tasks import resize_image
from engine import Client, EngineSettings
from engine.seam.rows import BeginJob

from . import test_dashboard as dash
from .test_dashboard import DOCS, engine, launch, login

site = dash.site  # the fixture: the site served against a private Redis

pytestmark = pytest.mark.browser
SHOTS = DOCS / "screenshots"


def api_post(page, base: str, path: str, body: object) -> dict:  # type: ignore[no-untyped-def]
    """POST to the API as the browser's session (its cookies and CSRF token)."""
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    answer = page.request.post(
        f"{base}/api/v1{path}",
        data=json.dumps(body),
        headers={"Content-Type": "application/json", "X-CSRFToken": csrf, "Referer": base},
    )
    assert answer.status == 201, answer.text()
    return answer.json()  # type: ignore[no-any-return]


def test_a_flow_is_drawn_on_the_job_page(site: tuple[str, str, EngineSettings]) -> None:
    from playwright.sync_api import sync_playwright

    base, password, _ = site
    flow = {
        "jobs": [
            {"ref": "fetch", "task": "demo.resize_image", "args": [1, 320]},
            {
                "ref": "crunch",
                "task": "demo.crunch_numbers",
                "args": [500],
                "depends_on": ["fetch"],
            },
            {"ref": "thumb", "task": "demo.resize_image", "args": [1, 64], "depends_on": ["fetch"]},
            {
                "ref": "notify",
                "task": "demo.send_email",
                "args": ["ops@example.com"],
                "depends_on": ["crunch", "thumb"],
            },
        ]
    }
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        login(page, base, password)
        out = api_post(page, base, "/flows", flow)
        jobs = {j["ref"]: j for j in out["jobs"]}
        page.goto(f"{base}/dashboard/jobs/{jobs['crunch']['id']}/")
        page.wait_for_selector("#flow svg a.node", timeout=15_000)
        assert page.locator("#flow svg a.node").count() == 4
        assert page.locator("#flow svg path.edge").count() == 4
        assert out["flow_id"] in (page.text_content("#flow h2") or "")
        parents = page.locator("#flow .lists a[data-related=parents]")
        assert parents.count() == 1 and parents.get_attribute("href", timeout=1000).endswith(
            f"/dashboard/jobs/{jobs['fetch']['id']}/"
        )
        # the whole flow completes (send_email retries twice); the graph follows it live
        done = "#flow svg a.node[data-state=completed]"
        deadline = time.monotonic() + 30
        while page.locator(done).count() < 4:
            assert time.monotonic() < deadline, page.inner_html("#flow")
            page.wait_for_timeout(300)
        edge = page.locator(
            f"#flow path.edge[data-from='{jobs['thumb']['id']}'][data-to='{jobs['notify']['id']}']"
        )
        assert edge.count() == 1
        page.locator("#flow").scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "flow.png"), full_page=True)
        page.click(f"#flow svg a.node[data-id='{jobs['notify']['id']}']")
        page.wait_for_url(f"**/dashboard/jobs/{jobs['notify']['id']}/")
        page.wait_for_selector("#flow .lists a[data-related=parents]", timeout=10_000)
        assert page.locator("#flow .lists a[data-related=parents]").count() == 2
        assert not errors, errors
        browser.close()


def test_the_queues_page_sets_a_rate_limit_and_a_cap(site: tuple[str, str, EngineSettings]) -> None:
    from playwright.sync_api import sync_playwright

    base, password, settings = site
    engine(settings, lambda c: c.queues.pause("default"))
    keyed = resize_image.using(concurrency_key="tenant-acme", concurrency_limit=1)
    engine(settings, lambda c: c.enqueue_many([keyed.call(i, 32) for i in range(5)]))
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        login(page, base, password)
        page.click("nav >> text=Queues")
        card = "section.queue[data-queue=default]"
        page.wait_for_selector(f"{card} .keys tr[data-key=tenant-acme]", timeout=15_000)
        cells = page.locator(f"{card} .keys tr[data-key=tenant-acme] td").all_text_contents()
        assert cells == ["tenant-acme", "4", "1"]  # four wait behind the one admitted
        assert page.text_content(f"{card} .paused-state") == "paused"
        page.fill(f"{card} input[name=rate_limit]", "5/s")
        page.click(f"{card} form.rate button:not([type])")
        page.wait_for_selector(f"{card} .rate-now:text('5 per second')", timeout=10_000)
        assert engine(settings, lambda c: c.queues.rate_limit_ms("default")) == 200.0
        page.fill(f"{card} input[name=rate_limit]", "sometimes")
        page.click(f"{card} form.rate button:not([type])")
        page.wait_for_selector(f"{card} .error:text('rate_limit must look like')", timeout=10_000)
        assert engine(settings, lambda c: c.queues.rate_limit_ms("default")) == 200.0
        # The cap on running jobs, set and lifted beside it; the rate limit stays.
        page.fill(f"{card} input[name=max_running]", "2")
        page.click(f"{card} form.cap button:not([type])")
        page.wait_for_selector(f"{card} .cap-now:text('2 at once')", timeout=10_000)
        assert engine(settings, lambda c: c.queues.max_running("default")) == 2
        page.click(f"{card} button[data-action=uncap]")
        page.wait_for_selector(f"{card} .cap-now:text('none')", timeout=10_000)
        assert engine(settings, lambda c: c.queues.max_running("default")) is None
        assert engine(settings, lambda c: c.queues.rate_limit_ms("default")) == 200.0
        page.screenshot(path=str(SHOTS / "queues.png"), full_page=True)
        page.click(f"{card} button[data-action=resume]")
        assert dash.confirm(page) == "Resume queue default?"
        deadline = time.monotonic() + 10
        while engine(settings, lambda c: c.queues.is_paused("default")):
            assert time.monotonic() < deadline, "not resumed"
            page.wait_for_timeout(200)
        page.wait_for_selector(f"{card} .paused-state:text('running')", timeout=10_000)
        browser.close()


def test_the_flow_list_shows_each_flow_and_opens_to_its_jobs(
    site: tuple[str, str, EngineSettings],
) -> None:
    from playwright.sync_api import sync_playwright

    base, password, _ = site
    flow = {
        "name": "Thumbnails of album 7",
        "jobs": [
            {"ref": "a", "task": "demo.resize_image", "args": [2, 32]},
            {"ref": "b", "task": "demo.resize_image", "args": [3, 32], "depends_on": ["a"]},
        ],
    }
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        login(page, base, password)
        out = api_post(page, base, "/flows", flow)
        ids = [j["id"] for j in out["jobs"]]
        page.click("nav a:text('Flows')")
        page.wait_for_url(f"{base}/dashboard/flows/")
        row = f"#flow-list tr[data-flow='{out['flow_id']}']"
        page.wait_for_selector(row, timeout=20_000)  # once the mirror wrote its jobs
        assert (page.text_content(f"{row} td.count") or "").strip() == "2"
        page.click(f"{row} button[data-act=toggle]")
        jobs = f"#flow-list tr[data-jobs-of='{out['flow_id']}'] li"
        page.wait_for_selector(jobs, timeout=10_000)
        assert page.locator(jobs).count() == 2
        assert [page.locator(jobs).nth(i).get_attribute("data-job") for i in range(2)] == ids
        after = page.locator(jobs).nth(1).text_content() or ""
        assert "after demo.resize_image" in after and ids[0][:8] in after  # the parent's task
        assert (page.text_content(f"{row} td[data-label=name]") or "") == "Thumbnails of album 7"
        deadline = time.monotonic() + 30  # the list follows the jobs live
        while "completed 2" not in (page.text_content(f"{row} td.states") or ""):
            assert time.monotonic() < deadline, page.inner_html("#flow-list")
            page.wait_for_timeout(300)
        page.fill("#filters input[name=queue]", "nowhere")
        page.click("#filters button[type=submit]")
        page.wait_for_selector("#flow-list td:text('no flows')", timeout=10_000)
        page.fill("#filters input[name=queue]", "default")
        page.fill("#filters input[name=name]", "no such name")
        page.click("#filters button[type=submit]")
        page.wait_for_selector("#flow-list td:text('no flows')", timeout=10_000)
        page.fill("#filters input[name=name]", "album 7")
        page.click("#filters button[type=submit]")
        page.wait_for_selector(row, timeout=10_000)
        page.click(f"#flow-list tr[data-jobs-of='{out['flow_id']}'] a >> nth=0")
        page.wait_for_url(f"**/dashboard/jobs/{ids[0]}/")
        assert not errors, errors
        browser.close()


def test_the_job_page_shows_a_claimed_job_that_has_not_started(
    site: tuple[str, str, EngineSettings],
) -> None:
    """Claimed (a lease, no attempt begun) is its own phase of `started` on the job page."""
    from playwright.sync_api import sync_playwright

    base, password, settings = site

    async def claim(client: Client) -> tuple[str, str]:
        job = await client.enqueue(resize_image.using(queue="held"), 4, 32)  # no worker serves it
        keys = client.keys("held")
        options = {"events_maxlen": 1000, "lease_ms": 600_000, "result_ttl_ms": 60_000}
        [row] = await client.scripts.claim(keys, max_jobs=1, worker_id="w-test", **options)
        assert row.id == job.id and not row.begun
        return job.id, row.token

    async def begin(client: Client, job_id: str, token: str) -> None:
        keys = client.keys("held")
        await client.scripts.begin(keys, lease_ms=600_000, jobs=[BeginJob(job_id, token, False)])

    job_id, token = engine(settings, claim)
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        login(page, base, password)
        page.goto(f"{base}/dashboard/jobs/{job_id}/")
        page.wait_for_selector("#headline [data-phase=claimed]", timeout=15_000)
        claimed = "#timeline tr.phase[data-phase=claimed]"
        page.wait_for_selector(claimed, timeout=10_000)
        assert "not started yet" in (page.text_content(claimed) or "")
        assert page.locator("#timeline tr.phase[data-phase=running]").count() == 0
        engine(settings, lambda c: begin(c, job_id, token))
        page.wait_for_selector("#timeline tr.phase[data-phase=running]", timeout=10_000)
        assert page.locator("#headline [data-phase=claimed]").count() == 0
        assert "not started yet" not in (page.text_content(claimed) or "")
        assert not errors, errors
        browser.close()
