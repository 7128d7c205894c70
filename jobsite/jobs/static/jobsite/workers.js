// The workers page (as Sidekiq's Busy): one row per live worker from GET /workers, polled every
// 2.5 s while the tab is visible; quiet, resume and stop through POST /workers/control, each
// confirmed in the page with what it means for the process.
(() => {
  "use strict";
  const {$, esc, api, jobPage, may, ask, toast, plural, time, timeZoneName} = window.jobsite;
  const POLL_MS = 2500;
  // What an order does, said in its confirmation.
  const ORDERS = {
    quiet: {confirm: "Quiet", detail: "It stops claiming new jobs; the jobs it runs finish. Resume undoes it."},
    resume: {confirm: "Resume", detail: "It claims new jobs again."},
    stop: {confirm: "Stop", danger: true, back: "Keep it running",
      detail: "The worker stops claiming, finishes or hands back its jobs, and exits 0: a process manager that restarts on exit (systemd Restart=always, Kubernetes) starts a fresh one; one that does not leaves it stopped. Resume cannot undo a stop."},
  };
  let timer;

  // "42 s", "5 min", "3 h 10 min", "2 d 4 h": how long ago `ms` was.
  function age(ms) {
    const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
    return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
  }

  // The task@versions it runs, folded: how many tasks, and the versions other than 1.
  function versions(tags) {
    if (!tags.length) return "–";
    const later = tags.filter((t) => !t.endsWith("@1"));
    const summary = `${plural(tags.length, "task")}${later.length ? `: ${later.map(esc).join(", ")}` : ", all version 1"}`;
    return `<details><summary>${summary}</summary><small>${tags.map((t) => `<code>${esc(t)}</code>`).join(" ")}</small></details>`;
  }

  function buttons(w) {
    const orders = w.state === "quiet" ? ["resume", "stop"] : w.state === "claiming" ? ["quiet", "stop"] : [];
    return orders.map((o) => `<button data-order="${o}" data-worker="${esc(w.id)}"${o === "stop" ? ' class="danger"' : ""}>${ORDERS[o].confirm}</button>`).join(" ");
  }

  function row(w) {
    const state = w.state || "claiming";
    const jobs = w.current_jobs.map((j) => `<li><a href="${esc(jobPage(j.id))}">${esc(j.task)}</a> <small>${esc(j.id)}</small></li>`).join("");
    return `<tr data-worker="${esc(w.id)}"><td data-label="worker"><code>${esc(w.id)}</code></td><td class="host" data-label="host">${esc(w.host)}</td><td class="pid" data-label="pid">${w.pid}</td>
      <td class="started" data-label="started" title="${esc(`${time(w.started_at_ms)} ${timeZoneName()}`)}">${esc(time(w.started_at_ms))}<br><small>${age(w.started_at_ms)} ago</small></td>
      <td class="memory" data-label="memory">${w.rss_mib ? `${w.rss_mib.toFixed(1)} MiB` : "–"}</td>
      <td class="completed" data-label="done">${w.completed}</td><td class="failed${w.failed ? " state-failed" : ""}" data-label="failed">${w.failed}</td>
      <td class="jobs" data-label="current jobs"><small>${w.current_jobs.length}/${w.concurrency} busy</small>${jobs ? `<ul>${jobs}</ul>` : ""}</td>
      <td class="role" data-label="role · queues">${w.role ? `role <b>${esc(w.role)}</b>: ` : ""}${w.queues.split(",").filter(Boolean).map((q) => `<code>${esc(q)}</code>`).join(" ") || "no queue"}</td>
      <td class="versions" data-label="task versions">${versions(w.versions || [])}</td>
      <td data-label="state"><span class="worker-state state-${esc(state)}">${esc(state)}</span><br><small>seen ${age(w.heartbeat_at_ms)} ago</small></td>
      ${may("control_worker") ? `<td class="orders">${buttons({...w, state})}</td>` : ""}</tr>`;
  }

  async function load() {
    clearTimeout(timer);
    try {
      const workers = await api("/workers");
      $("#workers-table tbody").innerHTML = workers.map(row).join("");
      $("#worker-list .empty").hidden = workers.length > 0;
      const busy = workers.reduce((n, w) => n + w.current_jobs.length, 0);
      $("#worker-count").textContent = `${plural(workers.length, "worker")}, ${busy} busy`;
      window.jobsite.loaded(null);
    } catch (error) {
      window.jobsite.loaded(error);
    }
    // Polled only while the tab is visible; a tab shown again loads at once (below).
    timer = setTimeout(() => { if (!document.hidden) load(); }, POLL_MS);
  }

  async function order(action, worker) {
    const {confirm, detail, danger = false, back = "Go back"} = ORDERS[action];
    if (!await ask(`${confirm} worker ${worker}?`, {confirm, detail, danger, back})) return;
    try {
      const told = await api("/workers/control", {method: "POST", body: {action, worker}});
      toast(`${action}: told ${plural(told.workers.length, "worker")}; it obeys within a second.`, "ok");
    } catch (error) {
      toast(`${confirm} failed: ${error.message}`, "error");
    }
    load();
    setTimeout(load, 1000);  // the worker reads its order with its next renewal
  }

  $("#workers-table").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-order]");
    if (button) order(button.dataset.order, button.dataset.worker);
  });
  document.addEventListener("visibilitychange", () => { if (!document.hidden) load(); });
  document.addEventListener("jobsite:zone", load);
  window.jobsite.hideForbidden();
  load();
})();
