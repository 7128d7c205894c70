// The health panel (dashboard overview, queues page): each queue's verdict with its reasons,
// and the schedules that are not ok, from GET /health every few seconds.
(() => {
  "use strict";
  const {$, esc, api} = window.jobsite;
  const REFRESH_MS = 5000;
  const panel = $("#health");
  if (!panel) return;

  function item(kind, name, state, reasons) {
    const why = reasons.length ? `: ${reasons.map(esc).join("; ")}` : "";
    return `<li data-${kind}="${esc(name)}" data-health="${esc(state)}"><b>${esc(name)}</b>
      <span class="health health-${esc(state)}">${esc(state)}</span>${why}</li>`;
  }

  // "up 3 d 4 h": the largest two units of an uptime in seconds.
  function uptime(s) {
    const parts = [[86400, "d"], [3600, "h"], [60, "min"], [1, "s"]]
      .map(([size, unit]) => [Math.floor(s / size), unit, (s %= size)]).filter(([n]) => n > 0);
    return parts.slice(0, 2).map(([n, unit]) => `${n} ${unit}`).join(" ") || "0 s";
  }

  // Redis memory (of its limit) and uptime; a full maxmemory refuses new jobs.
  function redisLine(r) {
    if (!r) return "";
    const share = r.max_memory_bytes ? ` (${Math.round((100 * r.used_memory_bytes) / r.max_memory_bytes)} % of its limit)` : "";
    const limit = r.max_memory_bytes ? `of ${esc(r.max_memory_human)}B max` : "no memory limit set (maxmemory 0)";
    const nodes = r.nodes > 1 ? `, ${r.nodes} masters` : "";
    return `<li class="redis-line" data-redis><b>Redis</b> ${esc(r.version)}${nodes}: memory <span class="memory">${esc(r.used_memory_human)}B</span> ${limit}${share};
      uptime <span class="uptime" title="${r.uptime_s} s">${esc(uptime(r.uptime_s))}</span></li>`;
  }

  async function load() {
    try {
      const h = await api("/health");
      const queues = h.queues.map((q) => item("queue", q.queue, q.verdict, q.reasons));
      const schedules = h.schedules.filter((s) => !["ok", "paused"].includes(s.state))
        .map((s) => item("schedule", `${s.queue}/${s.name}`, s.state, s.reasons));
      $("ul", panel).innerHTML = [redisLine(h.redis), ...queues, ...schedules].join("") || '<li class="empty">no queue yet</li>';
    } catch (error) {
      $("ul", panel).innerHTML = `<li class="error">could not load: ${esc(error.message)}</li>`;
    }
    setTimeout(load, REFRESH_MS);
  }
  load();
})();
