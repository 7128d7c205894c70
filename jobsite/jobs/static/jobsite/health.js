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

  async function load() {
    try {
      const h = await api("/health");
      const queues = h.queues.map((q) => item("queue", q.queue, q.verdict, q.reasons));
      const schedules = h.schedules.filter((s) => !["ok", "paused"].includes(s.state))
        .map((s) => item("schedule", `${s.queue}/${s.name}`, s.state, s.reasons));
      $("ul", panel).innerHTML = [...queues, ...schedules].join("") || '<li class="empty">no queue yet</li>';
    } catch (error) {
      $("ul", panel).innerHTML = `<li class="error">could not load: ${esc(error.message)}</li>`;
    }
    setTimeout(load, REFRESH_MS);
  }
  load();
})();
