"""Dead-letter triage and replay in real headless Chromium: a group resubmitted from the page,
and a failed job replayed with edited arguments until it completes."""

from __future__ import annotations

import json
import re
import time

from demo.demo_tasks import charge_card, convert_price
from engine import EngineSettings, JobState

from .test_dashboard import DOCS, confirm, engine, launch, login, site  # noqa: F401 (the fixture)

SHOTS = DOCS / "screenshots"


def wait_until(check, what: str, page, timeout_s: float = 15) -> None:  # type: ignore[no-untyped-def]
    """Poll `check()` while Playwright handles the page's dialogs; fail naming `what`."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        page.wait_for_timeout(200)


def test_dead_letters_resubmitted_and_a_replay_completing(
    site: tuple[str, str, EngineSettings],  # noqa: F811
) -> None:
    from playwright.sync_api import sync_playwright

    base, password, settings = site
    declined = engine(
        settings, lambda c: c.enqueue_many([charge_card.call(n) for n in (1999, 25_000, 7)])
    )
    wrong = engine(settings, lambda c: c.enqueue(convert_price, 1250, "XYZ"))
    dead = [*declined, wrong]

    def failed() -> bool:
        return {engine(settings, lambda c, j=j: c.jobs.get(j.id)).state for j in dead} == {
            JobState.FAILED
        }

    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        login(page, base, password)
        wait_until(failed, "the jobs did not fail", page)
        page.goto(f"{base}/dashboard/dead-letters/")
        card = "#groups tr:has-text('demo.charge_card')"
        page.wait_for_selector(card, timeout=15_000)
        page.wait_for_selector("#groups tr:has-text('demo.convert_price')", timeout=15_000)
        assert "card declined for <n> cents" in (page.text_content(card) or "")
        # Redis' count (the Overview's) and the history's, side by side, agreeing here.
        tally = "#tally li[data-queue=default]"
        page.wait_for_selector(tally, timeout=15_000)
        said = re.search(r"(\d+) in Redis, (\d+) in the history", page.text_content(tally) or "")
        assert said and int(said[1]) >= 4, page.text_content(tally)
        assert said[1] == said[2] and page.get_attribute(tally, "data-without-row") == "0"
        SHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SHOTS / "dead-letters.png"), full_page=True)

        # drill down: the group's jobs in the job list, the group kept in the URL
        page.click(f"{card} a:has-text('its jobs')")
        page.wait_for_url("**fingerprint=**", timeout=10_000)

        def listed() -> set[str]:
            rows = page.query_selector_all("#search tbody tr[data-id]")
            return {r.get_attribute("data-id") or "" for r in rows}

        wait_until(lambda: {j.id for j in declined} <= listed(), "group jobs not listed", page)
        tasks = set(page.locator("#search tbody tr[data-id] td:nth-child(3)").all_text_contents())
        assert tasks == {"demo.charge_card"}, tasks
        assert wrong.id not in listed()
        page.go_back()
        page.wait_for_selector(card, timeout=15_000)

        page.click(f"{card} button[data-act=resubmit]")
        messages = [confirm(page)]

        def resubmitted() -> bool:
            jobs = [engine(settings, lambda c, j=j: c.jobs.get(j.id)) for j in declined]
            return all(len(j.errors) == 2 for j in jobs)  # ran again (and failed again)

        wait_until(resubmitted, f"the group was not resubmitted: {messages}", page)
        assert any(m.startswith("Resubmit ") and "dead letters" in m for m in messages)
        page.wait_for_selector("#message:has-text('Resubmit:')", timeout=10_000)

        page.goto(f"{base}/dashboard/jobs/{wrong.id}/")
        area = "#replay-arguments"
        wait_until(lambda: '"XYZ"' in page.input_value(area), "form not prefilled", page)
        assert json.loads(page.input_value(area)) == {"args": [1250, "XYZ"], "kwargs": {}}
        page.fill(area, json.dumps({"args": [1250, "USD"], "kwargs": {}}))
        page.click("#replay button[type=submit]")
        page.wait_for_url(lambda url: wrong.id not in url, timeout=10_000)
        page.wait_for_selector("#headline .state-completed", timeout=15_000)
        page.wait_for_selector(f"#replay .links a[href*='{wrong.id}']", timeout=10_000)
        replay_id = page.url.rstrip("/").rsplit("/", 1)[-1]
        done = engine(settings, lambda c: c.jobs.get(replay_id))
        assert done.state is JobState.COMPLETED and done.result == 1350
        assert done.replay_of == wrong.id
        page.goto(f"{base}/dashboard/jobs/{wrong.id}/")
        page.wait_for_selector(f"#replay .links a[href*='{replay_id}']", timeout=15_000)
        page.screenshot(path=str(SHOTS / "replay.png"), full_page=True)
        browser.close()


def test_a_group_muted_folds_at_the_bottom_until_unmuted(
    site: tuple[str, str, EngineSettings],  # noqa: F811
) -> None:
    from playwright.sync_api import sync_playwright

    base, password, settings = site
    declined = engine(settings, lambda c: c.enqueue_many([charge_card.call(n) for n in (1999, 7)]))
    wrong = engine(settings, lambda c: c.enqueue(convert_price, 1250, "XYZ"))

    def failed() -> bool:
        jobs = [engine(settings, lambda c, j=j: c.jobs.get(j.id)) for j in [*declined, wrong]]
        return {j.state for j in jobs} == {JobState.FAILED}

    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        errors: list[str] = []
        page.on("console", lambda m: m.type == "error" and errors.append(f"{m.text} {m.location}"))
        page.on("pageerror", lambda e: errors.append(str(e)))
        login(page, base, password)
        wait_until(failed, "the jobs did not fail", page)
        page.goto(f"{base}/dashboard/dead-letters/")
        card = "#groups tbody:first-of-type tr:has-text('demo.charge_card')"
        page.wait_for_selector(card, timeout=15_000)
        page.wait_for_selector("#groups tr:has-text('demo.convert_price')", timeout=15_000)
        assert not page.query_selector("#show-muted")

        page.click(f"{card} button[data-act=mute]")
        dialog = "dialog.mute-dialog[open]"
        page.wait_for_selector(dialog, timeout=10_000)
        assert "Mute this group in default?" in (page.text_content(f"{dialog} .question") or "")
        page.select_option(f"{dialog} select[name=for_s]", "86400")
        page.fill(f"{dialog} input[name=reason]", "partner API down until Monday")
        page.click(f"{dialog} button[value=yes]")
        page.wait_for_selector(".toast-ok:has-text('Muted in default')", timeout=10_000)
        # Folded at the bottom: out of the list, counted all the same, unfolded on demand.
        page.wait_for_selector("#show-muted:has-text('show muted')", timeout=10_000)
        assert not page.query_selector(card)
        assert "in 1 muted group" in (page.text_content("#group-count") or "")
        page.click("#show-muted")
        muted = "#muted-groups tr:has-text('demo.charge_card')"
        page.wait_for_selector(muted, timeout=10_000)
        label = page.text_content(f"{muted} .muted-label") or ""
        assert re.match(r"muted in default until \S*\d", label) and "by admin" in label, label
        assert "partner API down until Monday" in label
        page.screenshot(path=str(SHOTS / "dead-letters-muted.png"), full_page=True)

        page.click(f"{muted} button[data-act=unmute]")
        page.wait_for_selector(".toast-ok:has-text('Unmuted in default')", timeout=10_000)
        page.wait_for_selector(card, timeout=10_000)
        assert not page.query_selector("#show-muted")
        assert not errors, errors
        browser.close()


def test_a_group_past_the_cap_is_purged_in_the_background(
    site: tuple[str, str, EngineSettings],  # noqa: F811
) -> None:
    """Six dead letters of one group or more, past the site's cap of 5: the purge is a
    background run the page follows to its end, as the Jobs page does."""
    from playwright.sync_api import sync_playwright

    base, password, settings = site
    amounts = range(101, 107)
    declined = engine(settings, lambda c: c.enqueue_many([charge_card.call(n) for n in amounts]))
    pairs = [(j.id, "default") for j in declined]

    def failed() -> bool:
        jobs = [engine(settings, lambda c, j=j: c.jobs.get(j.id)) for j in declined]
        return {j.state for j in jobs} == {JobState.FAILED}

    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        login(page, base, password)
        wait_until(failed, "the jobs did not fail", page)
        page.goto(f"{base}/dashboard/dead-letters/")
        card = "#groups tr:has-text('demo.charge_card')"
        page.wait_for_selector(card, timeout=15_000)

        def counted() -> int:  # the demo's feed adds a declined charge of its own now and then
            said = re.match(r"\d+", page.text_content(f"{card} td.count") or "")
            return int(said[0]) if said else 0

        wait_until(lambda: counted() >= 6, "the group's six jobs are not counted yet", page)
        page.click(f"{card} button[data-act=purge]")
        assert re.fullmatch(r"Purge \d+ dead letters of this group\?", confirm(page))
        page.wait_for_selector(".toast-ok:has-text('purge: ')", timeout=20_000)
        said = page.text_content(".toast-ok:has-text('purge: ')") or ""
        assert re.match(r"purge: (\d+) of \1 jobs changed", said), said
        page.wait_for_selector("#message:has-text('(done)')", timeout=10_000)
        assert page.is_hidden("#dead-letters .bulk-run")
        missing = engine(settings, lambda c: c.jobs.missing(pairs))
        assert missing == {j.id for j in declined}  # Redis' own word: purged
        assert not errors, errors
        browser.close()
