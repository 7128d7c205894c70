// Jobsite overview: a websocket for live data (coalesced by the server), the API for actions.
// The job list (History) is joblist.js; this file draws queues, workers, running and failures.
(() => {
  "use strict";
  const {$, esc, seg, config, may, jobPage, api, redis, toast, ask} = window.jobsite;
  const FAILURES_SHOWN = 8;
  let socket;

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${scheme}://${location.host}${config.socket}`);
    socket.onopen = () => { $("#status").textContent = "live"; };
    socket.onclose = () => { $("#status").textContent = "reconnecting…"; probe(); setTimeout(connect, 1000); };
    socket.onmessage = (event) => {
      const data = JSON.parse(event.data);
      if (data.type === "error") {
        if (data.redis === "down") { redis(false); $("#status").textContent = "Redis unreachable"; }
        else toast(data.detail, "error");
        return;
      }
      redis(true);
      $("#status").textContent = "live";
      render(data);
    };
  }

  // The socket closed: ask the API whether Redis (503) or the server itself is away.
  async function probe() {
    try { await api("/queues"); } catch (error) {
      if (error instanceof TypeError) redis(false, "", "The server is not answering");
    }
  }

  // The line that says what went wrong: "ValueError: card declined", never the engine's frames.
  function errorLine(error) {
    const kind = (error.exception || error.type || "").split(".").pop();
    const message = (error.message || "").split("\n")[0];
    return kind && message ? `${kind}: ${message}` : kind || message || "no error recorded";
  }

  function render(data) {
    const queues = Object.entries(data.queues || {});
    $("#queues tbody").innerHTML = queues.map(([name, c]) => `<tr><td>${esc(name)}${data.paused[name] ? " <small>(paused)</small>" : ""}</td>
      <td>${c.submitted}</td><td>${c.scheduled}</td><td>${c.started}</td><td>${c.dlq}</td><td>${c.completed_total}</td><td>${c.failed_total}</td>
      <td>${data.oldest_waiting_s && data.oldest_waiting_s[name] != null ? Math.round(data.oldest_waiting_s[name]) + " s" : "–"}</td>
      <td>${may("change_queue") ? `<button data-queue="${esc(name)}" data-action="${data.paused[name] ? "resume" : "pause"}">${data.paused[name] ? "resume" : "pause"}</button>` : ""}</td></tr>`).join("")
      || `<tr><td colspan="9" class="empty">no queue configured</td></tr>`;
    $("#workers ul").innerHTML = (data.workers || []).map((w) => `<li data-worker="${esc(w.id)}"><b>${esc(w.id)}</b> ${w.role ? `<span class="worker-role">role ${esc(w.role)}</span>: ` : ""}${esc(w.queues)} · ${w.current_jobs.length}/${w.concurrency} busy · seen ${Math.max(0, Math.round((Date.now() - w.heartbeat_at_ms) / 1000))} s ago
      · <span class="worker-state state-${esc(w.state || "claiming")}">${esc(w.state || "claiming")}</span>
      ${may("control_worker") ? workerButtons(w) : ""}</li>`).join("") || "<li>none</li>";
    $("#running ul").innerHTML = (data.running || []).map((j) => `<li data-id="${esc(j.id)}"><a href="${esc(jobPage(j.id))}">${esc(j.task)}</a> <small>${esc(j.id)}</small>
      ${may("cancel") ? `<button data-job="${esc(j.id)}" data-action="cancel">cancel</button>` : ""}
      <div class="bar"><span style="width:${Math.max(0, Math.min(100, j.progress || 0))}%"></span></div><small>${esc(j.progress_message)}</small></li>`).join("") || "<li>nothing running</li>";
    const failures = data.failures || [];
    $("#failures ul").innerHTML = failures.slice(0, FAILURES_SHOWN).map((f) => `<li data-id="${esc(f.id)}"><b>${esc(f.task)}</b> <span class="state-${esc(f.state)}">${esc(f.state)}</span> <a href="${esc(jobPage(f.id))}"><small>${esc(f.id)}</small></a>
      ${may("retry") ? retryButton(f) : ""}<pre class="error-line">${esc(errorLine(f.error || {}))}</pre>
      ${f.error?.traceback ? `<details><summary>traceback</summary><pre>${esc(f.error.traceback)}</pre></details>` : ""}</li>`).join("") || "<li>none</li>";
    $("#failures .more").hidden = failures.length <= FAILURES_SHOWN;
  }

  // Retry, or why not: a job dropped as an unknown task would only be dropped again.
  function retryButton(f) {
    if (f.cannot_run) return `<button data-job="${esc(f.id)}" data-action="retry" data-cannot-run disabled title="${esc(f.cannot_run)}">retry</button> <small class="cannot-run">cannot run</small>`;
    return `<button data-job="${esc(f.id)}" data-action="retry">retry</button>`;
  }

  // Quiet, resume and stop for one worker, and for every worker of its host (engine/ops/control.py).
  function workerButtons(w) {
    const state = w.state || "claiming";
    const orders = state === "quiet" ? ["resume", "stop"] : state === "claiming" ? ["quiet", "stop"] : [];
    const one = orders.map((o) => `<button data-order="${o}" data-worker="${esc(w.id)}">${o}</button>`).join(" ");
    const host = ["quiet", "resume"].map((o) => `<button data-order="${o}" data-host="${esc(w.host)}">${o} host</button>`).join(" ");
    return `${one} ${host}`;
  }

  async function order(action, selector) {
    const [[kind, name]] = Object.entries(selector);
    if (!await ask(`${action[0].toUpperCase()}${action.slice(1)} ${kind} ${name}?`, {confirm: "Yes", danger: action === "stop"})) return;
    try {
      const told = await api("/workers/control", {method: "POST", body: {action, ...selector}});
      toast(`${action}: told ${told.workers.length} worker${told.workers.length === 1 ? "" : "s"}.`, "ok");
    } catch (error) { toast(`Failed: ${error.message}`, "error"); }
  }

  async function act(path, method, question, done) {
    if (!await ask(question, {confirm: "Yes", danger: method === "DELETE"})) return;
    try {
      toast(done(await api(path, {method})), "ok");
      document.dispatchEvent(new CustomEvent("jobsite:acted"));
    } catch (error) { toast(`Failed: ${error.message}`, "error"); }
  }

  document.addEventListener("click", (event) => {
    const b3 = event.target.closest("button[data-order]");
    if (b3) { order(b3.dataset.order, b3.dataset.worker ? {worker: b3.dataset.worker} : {host: b3.dataset.host}); return; }
    const b = event.target.closest("button[data-action]");
    if (!b || !b.closest("main")) return;
    const {action, job, queue} = b.dataset;
    if (action === "cancel") act(`/jobs/${seg(job)}`, "DELETE", `Cancel job ${job}?`, (j) => `Cancelled job ${job} (${j?.outcome ?? "cancelled"}).`);
    if (action === "retry") act(`/jobs/${seg(job)}/retry`, "POST", `Retry job ${job}?`, (j) => `Job ${job} queued again (now ${j?.state ?? "submitted"}).`);
    if (action === "pause" || action === "resume") act(`/queues/${seg(queue)}/${action}`, "POST", `${action[0].toUpperCase()}${action.slice(1)} queue ${queue}?`, () => `Queue ${queue} ${action === "pause" ? "paused" : "resumed"}.`);
  });
  document.addEventListener("visibilitychange", () => socket && socket.readyState === 1 && socket.send(JSON.stringify({visible: !document.hidden})));
  window.jobsite.hideForbidden();
  connect();
})();
