"""Redis paused under an open dashboard, in headless Chromium: the banner, its "since", the
header and the toasts follow what the server says (no false recovery while Redis is stopped,
a "since" that holds still, never "live" under the banner, one toast on the way back).

Runs the README's main command (`python -m demo.serve`) on a private Redis this test owns.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from .test_dashboard import launch, login
from .test_operator import Site, banner_shown, site, wait_until  # noqa: F401  (site: a fixture)

pytestmark = pytest.mark.browser
# How long Redis stays paused.
PAUSE_S = 12
# Each change of the header or the banner, and each toast, noted in the page as it happens
# (a poll from here could miss a state that lasts a moment).
RECORDER = """() => {
  const seen = window.__seen = [];
  const toasts = window.__toasts = [];
  const banner = document.getElementById("redis-down");
  const status = document.getElementById("status");
  const note = () => seen.push({at: Date.now(), status: status.textContent, banner: !banner.hidden,
    since: banner.querySelector(".since").textContent});
  const all = {subtree: true, childList: true, characterData: true, attributes: true};
  new MutationObserver(note).observe(status, all);
  new MutationObserver(note).observe(banner, all);
  new MutationObserver((records) => {
    for (const r of records) for (const n of r.addedNodes) toasts.push(n.textContent);
  }).observe(document.getElementById("toasts"), {childList: true});
  note();
}"""


def recorded(page: Any) -> tuple[list[dict[str, Any]], list[str]]:
    got = page.evaluate("() => [window.__seen, window.__toasts]")
    return got[0], [t for t in got[1] if "answers again" in t]


def test_a_redis_pause_is_said_once_and_its_since_holds(
    site: Site,  # noqa: F811
    tmp_path: Path,
) -> None:
    from playwright.sync_api import sync_playwright

    assert site.redis.process is not None
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        login(page, site.base, site.password)
        page.wait_for_selector("#queues button[data-action=pause]", timeout=15_000)
        page.evaluate(RECORDER)

        site.redis.process.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            wait_until(page, lambda: banner_shown(page), "no banner with Redis paused", PAUSE_S)
            page.wait_for_timeout(max(0.0, PAUSE_S - (time.monotonic() - stopped)) * 1000)
            during, recoveries = recorded(page)
            still_shown = banner_shown(page)
        finally:
            site.redis.process.send_signal(signal.SIGCONT)
        wait_until(page, lambda: not banner_shown(page), "the banner stayed after SIGCONT")
        page.wait_for_selector("#status:text('live')", timeout=10_000)
        page.wait_for_timeout(3000)  # time for a second toast, were there one
        seen, recoveries_after = recorded(page)
        browser.close()

    assert still_shown, during
    assert recoveries == [], during  # no "answers again" while Redis was stopped
    shown = [s for s in during if s["banner"]]
    assert len({s["since"] for s in shown}) == 1, shown  # "since" held still
    assert shown[0]["since"].startswith("since ")
    under_banner = [s for s in seen if s["banner"] and "live" in s["status"].lower()]
    assert under_banner == [], under_banner  # never "live" under the banner
    assert len(recoveries_after) == 1, seen
    log = (tmp_path / "serve.log").read_text()
    for never in ("Exception inside application", "Traceback"):
        at = log.find(never)
        assert at < 0, log[at - 500 : at + 4000]  # the socket's consumer never died
