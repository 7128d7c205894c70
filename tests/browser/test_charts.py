"""The overview's charts in real headless Chromium: each uPlot chart holds the series of real runs.

Demo jobs (ours and serve's demo load) run on the site's own runworker (completed, failed,
retried once); the test reads the uPlot instances the page exposes (`window.jobsiteCharts`),
not just that a canvas exists, and saves docs/screenshots/charts.png.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from demo.demo_tasks import charge_card, poll_upstream, resize_image
from engine import EngineSettings

from .test_dashboard import DOCS, engine, launch, login, site
from .test_operator import wait_until

pytestmark = pytest.mark.browser
__all__ = ["site"]  # the fixture, used by name

READ = """() => Object.fromEntries(Object.entries(window.jobsiteCharts).map(([name, u]) => [name, {
  labels: u.series.slice(1).map((s) => s.label),
  data: u.data.map((column) => Array.from(column)),
  axes: u.axes.map((a) => a.label || ""),
  ticks: u.axes[1]._values || [],
  legend: u.root.querySelector(".u-legend") ? u.root.querySelector(".u-legend").textContent : "",
}]))"""


# The x axis and the colours of each chart: its labels (rendered), the room between them and
# the widest label's line (px, the page at a pixel ratio of 1); the axes', titles' and grid's
# colours beside the page's CSS variables.
LOOK = """() => {
  const css = getComputedStyle(document.documentElement);
  const colour = (u, v) => (typeof v === "function" ? v(u, 0) : v);
  return Object.fromEntries(Object.entries(window.jobsiteCharts).map(([name, u]) => {
    const x = u.axes[0];
    u.ctx.font = x.font[0];
    const lines = (x._values || []).flatMap((label) => String(label).split("\\n"));
    return [name, {
      labels: x._values || [], space: x._found[1],
      widest: Math.max(0, ...lines.map((l) => u.ctx.measureText(l).width)),
      axis: u.axes.map((a) => colour(u, a.stroke)),
      grid: u.axes.map((a) => colour(u, a.grid.stroke)),
      muted: css.getPropertyValue("--muted").trim(), line: css.getPropertyValue("--line").trim(),
    }];
  }));
}"""


def looks_right(charts: dict[str, Any]) -> None:
    """Each chart's x labels stand apart (room between them, wider than the widest), and its
    axes, titles and grid take the page's own colours."""
    for name, c in charts.items():
        assert c["labels"] and c["space"] >= 90, (name, c)
        assert c["widest"] < c["space"], (name, c)  # no label runs into the next
        assert c["axis"] == [c["muted"]] * 2 and c["grid"] == [c["line"]] * 2, (name, c)


def total(series: list[Any]) -> float:
    return sum(v for v in series if v is not None)


def read_until(page: Any, ready: Any, timeout_s: float = 40) -> dict[str, Any]:
    """Refresh the charts (the range picker's change) until `ready(charts)` holds."""
    deadline = time.monotonic() + timeout_s
    while True:
        charts = page.evaluate(READ)
        if charts and ready(charts):
            return charts  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, f"charts never filled: {charts}"
        page.wait_for_timeout(1000)
        page.dispatch_event("#chart-picks select[name=range]", "change")


def test_charts_hold_the_series_of_real_runs(site: tuple[str, str, EngineSettings]) -> None:
    from playwright.sync_api import sync_playwright

    base, password, settings = site

    async def submit(client: Any) -> None:
        await client.enqueue_many([resize_image.call(n, 1) for n in range(30)])
        await client.enqueue_many([charge_card.call(n) for n in range(3)])
        await client.enqueue_many([poll_upstream.call() for _ in range(3)])

    engine(settings, submit)
    with sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1366, "height": 1000})
        login(page, base, password)
        page.wait_for_selector("#charts[data-ready='1']", timeout=15_000)

        def done(c: dict[str, Any]) -> bool:
            tp = c["throughput"]["data"]
            return total(tp[1]) >= 33 and total(tp[2]) >= 3 and total(tp[3]) >= 3

        charts = read_until(page, done)
        assert set(charts) == {"throughput", "wait", "run", "depth"}
        tp = charts["throughput"]
        assert tp["labels"] == ["completed", "failed", "retried"]
        assert len(tp["data"][0]) == 60  # the hour at 1-minute points, x in Unix seconds
        assert tp["data"][0][-1] <= time.time() < tp["data"][0][-1] + 120
        # serve's own demo load runs too: at least ours
        assert total(tp["data"][1]) >= 33 and total(tp["data"][2]) >= 3
        assert total(tp["data"][3]) >= 3
        assert tp["axes"] == ["", "jobs/min"] and "completed" in tp["legend"]
        for name in ("wait", "run"):
            assert charts[name]["labels"] == ["p50", "p95"]
            p50, p95 = charts[name]["data"][1], charts[name]["data"][2]
            assert any(v is not None and v > 0 for v in p95), (name, p95)
            assert all(a <= b for a, b in zip(p50, p95, strict=True) if a is not None)
            assert charts[name]["axes"] == ["", "duration"]
            assert any(tick.endswith((" ms", " s")) for tick in charts[name]["ticks"])
        depth = charts["depth"]
        assert depth["labels"] == ["waiting", "scheduled", "running"]
        assert any(v is not None for v in depth["data"][1])  # runworker's minute samples
        figure = page.locator("figure[data-chart=throughput]")
        assert figure.get_attribute("data-points") == "60"
        assert float(figure.get_attribute("data-total") or 0) >= 39

        # The depth chart's last point and the Queues table come from one snapshot.
        later = resize_image.using(delay_s=600)
        engine(settings, lambda c: c.enqueue_many([later.call(n, 2) for n in range(5)]))
        columns = "rows => rows.map((r) => [...r.cells].slice(1, 4).map((c) => +c.textContent))"

        def agree() -> bool:
            live = page.get_attribute("figure[data-chart=depth]", "data-live") or ""
            rows = page.eval_on_selector_all("#queues tbody tr", columns)
            table = [sum(column) for column in zip(*rows, strict=True)]
            return bool(live) and [int(n) for n in live.split(",")] == table and table[1] >= 5

        wait_until(page, agree, "the depth chart's last point is not the Queues table's")

        # one task: only its jobs
        page.select_option("#chart-picks select[name=task]", "demo.charge_card")
        page.wait_for_selector("#charts[data-shown='range=hour&task=demo.charge_card']")
        one = page.evaluate(READ)["throughput"]["data"]
        assert total(one[1]) == 0 and total(one[2]) >= 3 and total(one[3]) == 0
        page.select_option("#chart-picks select[name=task]", "")

        # the week: hourly points
        page.select_option("#chart-picks select[name=range]", "week")
        page.wait_for_selector("#charts[data-shown='range=week']")
        week = page.evaluate(READ)["throughput"]
        assert len(week["data"][0]) == 168 and total(week["data"][1]) > 0.5
        page.select_option("#chart-picks select[name=range]", "hour")
        page.wait_for_selector("#charts[data-shown='range=hour']")
        page.wait_for_timeout(300)
        (DOCS / "screenshots").mkdir(exist_ok=True)
        page.locator("#charts").screenshot(path=str(DOCS / "screenshots" / "charts.png"))

        # Light, then dark: the axes, their titles and the grid follow the theme.
        light = page.evaluate(LOOK)
        looks_right(light)
        assert any("\n" in label for label in light["throughput"]["labels"])  # a tick dated
        page.emulate_media(color_scheme="dark")
        deadline = time.monotonic() + 10
        while (dark := page.evaluate(LOOK))["throughput"]["grid"] == light["throughput"]["grid"]:
            assert time.monotonic() < deadline, "the charts kept the light theme's colours"
            page.wait_for_timeout(200)
        looks_right(dark)
        assert dark["throughput"]["muted"] != light["throughput"]["muted"]
        browser.close()
