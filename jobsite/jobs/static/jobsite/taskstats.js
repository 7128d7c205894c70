// The overview's Tasks table: per task over the chosen range, jobs completed and failed, the
// failure rate and run time p50/p95 (GET /task-stats, from the rollup); a task links to its jobs.
(() => {
  "use strict";
  const {$, esc, api} = window.jobsite;
  const REFRESH_MS = 30_000;
  const picker = $("#tasks select[name=range]");
  let timer;

  const ms = (v) => (v == null ? "–" : v < 1000 ? `${Math.round(v)} ms` : `${(v / 1000).toFixed(2)} s`);

  async function load() {
    clearTimeout(timer);
    try {
      const rows = await api(`/task-stats?range=${encodeURIComponent(picker.value)}`);
      $("#tasks tbody").innerHTML = rows.map((s) => `<tr><td data-label="task"><a href="?task=${encodeURIComponent(s.task)}#search">${esc(s.task)}</a></td>
        <td data-label="completed">${s.completed}</td><td data-label="failed">${s.failed}</td><td class="${s.failure_rate > 0 ? "state-failed" : ""}" data-label="failure rate">${(100 * s.failure_rate).toFixed(1)} %</td>
        <td data-label="run time p50">${ms(s.run_p50_ms)}</td><td data-label="run time p95">${ms(s.run_p95_ms)}</td></tr>`).join("") || `<tr><td colspan="6" class="empty">no job ended in this range</td></tr>`;
    } catch (error) {
      $("#tasks tbody").innerHTML = `<tr><td colspan="6" class="error">${esc(error.message)}</td></tr>`;
    }
    timer = setTimeout(load, REFRESH_MS);
  }

  picker.addEventListener("change", load);
  load();
})();
