// Jobsite charts: throughput, queue wait, run time and queue depth from GET /charts, drawn with
// uPlot (vendored, see docs/third-party.md). The uPlot instances are window.jobsiteCharts
// (name -> instance), and each <figure> carries data-points and data-total, for tests. Axes, grid
// and titles take the page's colours (CSS variables), light or dark.
(() => {
  "use strict";
  const {$, api, esc} = window.jobsite;
  const REFRESH_MS = {hour: 30_000, day: 120_000, week: 300_000};
  const COLORS = {completed: "#1e8449", failed: "#c0392b", retried: "#d68910", p50: "#3b7cff", p95: "#8e44ad",
    waiting: "#3b7cff", scheduled: "#7f8c8d", running: "#1e8449"};
  const charts = {};
  window.jobsiteCharts = charts;
  let timer = null;
  let asked = 0;  // refreshes started: only the newest one draws

  // Durations arrive in ms: ticks and legends say ms below a second, s up to 2 min, then min.
  function duration(ms) {
    if (ms == null) return "–";
    if (ms < 1000) return `${+ms.toFixed(ms < 10 ? 1 : 0)} ms`;
    if (ms < 120_000) return `${+(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
    return `${+(ms / 60_000).toFixed(1)} min`;
  }
  const rate = (v) => (v == null ? "–" : `${+v.toFixed(v < 10 ? 2 : 0)} jobs/min`);
  const jobs = (v) => (v == null ? "–" : `${v} jobs`);

  // What each chart shows: its series (data key, label, colour), its unit, how to read the answer.
  const SPECS = {
    throughput: {unit: "jobs/min", fmt: rate, series: ["completed", "failed", "retried"],
      data: (d) => ["completed", "failed", "retried"].map((k) => d.throughput[k].map((n) => n / (d.step_s / 60))),
      summary: (d) => ["completed", "failed", "retried"].map((k) => `${k} ${d.throughput[k].reduce((a, b) => a + b, 0)}`).join(" · ")},
    wait: {unit: "duration", fmt: duration, series: ["p50", "p95"], data: (d) => [d.wait.p50, d.wait.p95],
      summary: (d) => `${d.wait.count} claims · p50 ${duration(d.wait.overall.p50)} · p95 ${duration(d.wait.overall.p95)} over the range`},
    run: {unit: "duration", fmt: duration, series: ["p50", "p95"], data: (d) => [d.run.p50, d.run.p95],
      summary: (d) => `${d.run.count} attempts · p50 ${duration(d.run.overall.p50)} · p95 ${duration(d.run.overall.p95)} over the range`},
    depth: {unit: "jobs", fmt: jobs, series: ["waiting", "scheduled", "running"],
      data: (d) => [d.depth.waiting, d.depth.scheduled, d.depth.running],
      summary: (d) => `deepest sample per point, the last one the snapshot the tables beside it show${d.depth.waiting.slice(0, -1).every((v) => v == null) ? "; no samples yet (runworker takes one a minute)" : ""}`},
  };

  // Colours from the page's CSS variables, read when the charts are made: the axes' values and
  // titles in --muted, the grid and ticks in --line, so both the light and the dark theme read
  // (a change of theme makes the charts again).
  function palette() {
    const css = getComputedStyle(document.documentElement);
    const read = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
    return {text: read("--muted", "#667"), grid: read("--line", "#e6e9f2")};
  }

  // The x axis: at least X_SPACE px between labels, each in a format that fits the step between
  // ticks (the time of day within a day, the date beyond), the first tick of each day dated.
  const X_SPACE = 90;
  const DAY_S = 86_400;
  function timeTicks(u, splits, axisIndex, space, step) {
    const timeZone = window.jobsite.timeZoneName();
    const date = new Intl.DateTimeFormat(undefined, {month: "short", day: "numeric", timeZone});
    const clock = new Intl.DateTimeFormat(undefined, {hour: "2-digit", minute: "2-digit", timeZone});
    let last = null;
    return splits.map((t) => {
      const at = new Date(t * 1000);
      const day = date.format(at);
      if (step >= DAY_S) return day;
      const label = day === last ? clock.format(at) : `${clock.format(at)}\n${day}`;
      last = day;
      return label;
    });
  }

  function picks() {
    return Object.fromEntries(new FormData($("#chart-picks")).entries());
  }

  function options(name, spec, width, step_s) {
    const {text, grid} = palette();
    return {
      width, height: 200,
      cursor: {drag: {x: false, y: false}},
      // Ticks and the legend's "at" in the zone of every time on the page (common.js).
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), window.jobsite.timeZoneName()),
      // Half a step of room after the newest point, so that it is not drawn on the edge.
      scales: {x: {time: true, range: (u, min, max) => [min, max + step_s / 2]}, y: {range: (u, min, max) => [0, Math.max(max || 0, 1) * 1.1]}},
      axes: [
        {stroke: text, grid: {stroke: grid, width: 1}, ticks: {stroke: grid, width: 1}, space: X_SPACE, values: timeTicks},
        {stroke: text, grid: {stroke: grid, width: 1}, ticks: {stroke: grid, width: 1}, size: 70, label: spec.unit, labelSize: 18,
          values: (u, ticks) => ticks.map((v) => (spec.unit === "duration" ? duration(v) : +v.toFixed(2)))},
      ],
      series: [
        {label: "at"},
        // Dots (not only lines) where a slot stands alone between empty ones; nulls draw nothing.
        ...spec.series.map((key) => ({label: key, stroke: COLORS[key], width: 2, spanGaps: name !== "depth",
          points: {show: name !== "throughput", size: 5, fill: COLORS[key]}, value: (u, v) => spec.fmt(v)})),
      ],
    };
  }

  function draw(answer) {
    for (const [name, spec] of Object.entries(SPECS)) {
      const figure = $(`figure[data-chart="${name}"]`);
      const plot = $(".plot", figure);
      const series = spec.data(answer);
      const data = [answer.t, ...series];
      const total = series.flat().filter((v) => v != null).reduce((a, b) => a + b, 0);
      figure.dataset.points = String(answer.t.length);
      figure.dataset.total = String(total);
      figure.dataset.range = answer.range;
      $(".summary", figure).textContent = spec.summary(answer);
      const chart = charts[name];
      if (chart && chart.jobsiteRange === answer.range) { chart.setData(data); continue; }
      if (chart) chart.destroy();
      charts[name] = new uPlot(options(name, spec, Math.max(200, plot.clientWidth || 420), answer.step_s), data, plot);
      charts[name].jobsiteRange = answer.range;
    }
    if (snapshotQueues) liveDepth(null);
  }

  // The depth chart's last point (the slot running now) from the snapshot the Queues table
  // beside it is drawn from: dashboard.js hands each one over, so the chart ends on the table's
  // numbers whatever the minute samples said. The figure's data-live holds them, for tests.
  let snapshotQueues = null;  // the last snapshot's counts: a redrawn chart ends on them too
  function liveDepth(queues) {
    snapshotQueues = queues || snapshotQueues;
    const chart = charts.depth;
    if (!chart || !chart.data[0].length) return;
    const chosen = picks().queue || "";
    const rows = Object.entries(snapshotQueues || {}).filter(([name]) => !chosen || name === chosen);
    const sum = (key) => rows.reduce((total, [, counts]) => total + (counts[key] || 0), 0);
    const now = [sum("submitted"), sum("scheduled"), sum("started")];
    const data = chart.data.map((series) => series.slice());
    const last = data[0].length - 1;
    now.forEach((n, i) => { data[i + 1][last] = n; });
    chart.setData(data);
    $('figure[data-chart="depth"]').dataset.live = now.join(",");
  }
  window.jobsite.liveDepth = liveDepth;

  function fillPicker(select, values) {
    const chosen = select.value;
    const first = select.options[0].outerHTML;
    select.innerHTML = first + values.map((v) => `<option ${v === chosen ? "selected" : ""}>${esc(v)}</option>`).join("");
    if (chosen && !values.includes(chosen)) select.insertAdjacentHTML("beforeend", `<option selected>${esc(chosen)}</option>`);
  }

  async function refresh() {
    clearTimeout(timer);
    const mine = ++asked;
    const chosen = picks();
    const query = new URLSearchParams(Object.entries(chosen).filter(([, v]) => v !== ""));
    const status = $(".chart-status");
    try {
      const answer = await api(`/charts?${query}`);
      if (mine !== asked) return;  // the picks changed meanwhile: a newer answer is on its way
      fillPicker($("#chart-picks [name=queue]"), answer.queues);
      fillPicker($("#chart-picks [name=task]"), answer.tasks);
      draw(answer);
      status.textContent = `updated ${window.jobsite.clock(new Date())}`;
      $("#charts").dataset.ready = "1";
      $("#charts").dataset.shown = String(query);
    } catch (error) {
      status.textContent = `charts: ${error.message}`;
    }
    timer = setTimeout(() => { if (!document.hidden) refresh(); else timer = setTimeout(refresh, 5000); },
      REFRESH_MS[chosen.range] || 30_000);
  }

  $("#chart-picks").addEventListener("change", refresh);
  // Another zone, or another theme: the charts are made again, their axes in its times or colours.
  function remake() { for (const chart of Object.values(charts)) chart.jobsiteRange = null; refresh(); }
  document.addEventListener("jobsite:zone", remake);
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", remake);
  $("#chart-picks").addEventListener("submit", (event) => { event.preventDefault(); refresh(); });
  window.addEventListener("resize", () => {
    for (const [name, chart] of Object.entries(charts)) {
      const plot = $(`figure[data-chart="${name}"] .plot`);
      chart.setSize({width: Math.max(200, plot.clientWidth), height: 200});
    }
  });
  refresh();
})();
