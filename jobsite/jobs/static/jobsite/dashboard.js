// Jobsite dashboard: a websocket for live data (coalesced by the server), the API for actions.
(() => {
  "use strict";
  const {$, esc, seg, config, may, jobPage} = window.jobsite;
  const csrf = config.csrf;
  let socket;
  let filter = {};

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${scheme}://${location.host}${config.socket}`);
    socket.onopen = () => { $("#status").textContent = "live"; socket.send(JSON.stringify({filter})); };
    socket.onclose = () => { $("#status").textContent = "reconnecting…"; setTimeout(connect, 1000); };
    socket.onmessage = (event) => {
      const data = JSON.parse(event.data);
      if (data.type === "error") { $("#status").textContent = `error: ${data.detail}`; return; }
      render(data);
    };
  }

  function render(data) {
    const queues = Object.entries(data.queues || {});
    $("#queues tbody").innerHTML = queues.map(([name, c]) => `<tr><td>${esc(name)}${data.paused[name] ? " (paused)" : ""}</td>
      <td>${c.submitted}</td><td>${c.scheduled}</td><td>${c.started}</td><td>${c.dlq}</td><td>${c.completed_total}</td><td>${c.failed_total}</td>
      <td>${data.oldest_waiting_s && data.oldest_waiting_s[name] != null ? Math.round(data.oldest_waiting_s[name]) + " s" : "–"}</td>
      <td>${may("change_queue") ? `<button data-queue="${esc(name)}" data-action="${data.paused[name] ? "resume" : "pause"}">${data.paused[name] ? "resume" : "pause"}</button>` : ""}</td></tr>`).join("");
    $("#workers ul").innerHTML = (data.workers || []).map((w) => `<li data-worker="${esc(w.id)}"><b>${esc(w.id)}</b> ${esc(w.queues)} · ${w.current_jobs.length}/${w.concurrency} busy · seen ${Math.round((Date.now() - w.heartbeat_at_ms) / 1000)}s ago
      · <span class="worker-state state-${esc(w.state || "claiming")}">${esc(w.state || "claiming")}</span>
      ${may("control_worker") ? workerButtons(w) : ""}</li>`).join("") || "<li>none</li>";
    $("#running ul").innerHTML = (data.running || []).map((j) => `<li>${esc(j.task)} <small>${esc(j.id)}</small>
      <div class="bar"><span style="width:${Math.max(0, Math.min(100, j.progress || 0))}%"></span></div><small>${esc(j.progress_message)}</small></li>`).join("") || "<li>nothing running</li>";
    $("#failures ul").innerHTML = (data.failures || []).map((f) => `<li data-id="${esc(f.id)}"><b>${esc(f.task)}</b> <span class="state-${esc(f.state)}">${esc(f.state)}</span> <a href="${esc(jobPage(f.id))}"><small>${esc(f.id)}</small></a>
      ${may("retry") ? `<button data-job="${esc(f.id)}" data-action="retry">retry</button>` : ""}<pre>${esc(f.error.traceback || f.error.message || "")}</pre></li>`).join("") || "<li>none</li>";
    const ticked = new Set([...document.querySelectorAll("#search tbody input:checked")].map((i) => i.value));
    $("#search tbody").innerHTML = (data.jobs || []).map((j) => `<tr data-id="${esc(j.id)}"><td><input type="checkbox" value="${esc(j.id)}" ${ticked.has(j.id) ? "checked" : ""}></td><td><a href="${esc(jobPage(j.id))}"><small>${esc(j.id)}</small></a></td><td>${esc(j.task)}</td><td>${esc(j.queue)}</td>
      <td class="state-${esc(j.state)}">${esc(j.state)}</td><td>${j.attempt}</td>
      <td>${may("cancel") && (data.vocabulary || config.vocabulary).cancellable.includes(j.state) ? `<button data-job="${esc(j.id)}" data-action="cancel">cancel</button>` : ""}</td></tr>`).join("");
  }

  // Quiet, resume and stop for one worker, and for every worker of its host (engine/control.py).
  function workerButtons(w) {
    const state = w.state || "claiming";
    const orders = state === "quiet" ? ["resume", "stop"] : state === "claiming" ? ["quiet", "stop"] : [];
    const one = orders.map((o) => `<button data-order="${o}" data-worker="${esc(w.id)}">${o}</button>`).join(" ");
    const host = ["quiet", "resume"].map((o) => `<button data-order="${o}" data-host="${esc(w.host)}">${o} host</button>`).join(" ");
    return `${one} ${host}`;
  }

  async function order(action, selector) {
    const [[kind, name]] = Object.entries(selector);
    if (!confirm(`${action} ${kind} ${name}?`)) return;
    const response = await fetch(`${config.api}/workers/control`, {method: "POST", credentials: "same-origin",
      headers: {"X-CSRFToken": csrf, "Content-Type": "application/json"}, body: JSON.stringify({action, ...selector})});
    if (!response.ok) alert(`failed: ${response.status} ${JSON.stringify((await response.json()).detail)}`);
  }

  async function act(path, method, question) {
    if (!confirm(question)) return;
    const response = await fetch(`${config.api}${path}`, {method, headers: {"X-CSRFToken": csrf}, credentials: "same-origin"});
    if (!response.ok) alert(`failed: ${response.status} ${(await response.json()).detail}`);
  }

  async function bulk(action, scope) {
    const ids = [...document.querySelectorAll("#search tbody input:checked")].map((i) => i.value);
    if (scope === "selected" && !ids.length) { alert("Tick some jobs first."); return; }
    const chosen = Object.fromEntries(Object.entries(filter).filter(([, v]) => v !== ""));
    // "All matching" with no filter at all is said explicitly: the API never guesses "everything".
    const body = scope === "selected" ? {ids} : (Object.keys(chosen).length ? chosen : {all: true});
    const call = async (dry) => {
      const response = await fetch(`${config.api}/bulk/${seg(action)}`, {method: "POST", credentials: "same-origin",
        headers: {"X-CSRFToken": csrf, "Content-Type": "application/json"},
        body: JSON.stringify({...body, dry_run: dry})});
      const answer = await response.json();
      if (!response.ok) throw new Error(`${response.status} ${JSON.stringify(answer.detail)}`);
      return answer;
    };
    let matched;
    try { ({matched} = await call(true)); } catch (error) { alert(`failed: ${error.message}`); return; }
    if (!matched) { alert(`No job to ${action}.`); return; }
    if (!confirm(`${action} ${matched} job${matched === 1 ? "" : "s"}?`)) return;
    try {
      const {changed} = await call(false);
      $("#status").textContent = `${action}: ${changed} of ${matched}`;
    } catch (error) { alert(`failed: ${error.message}`); }
  }

  document.addEventListener("click", (event) => {
    const b2 = event.target.closest("button[data-bulk]");
    if (b2) { bulk(b2.dataset.bulk, b2.dataset.scope); return; }
    const b3 = event.target.closest("button[data-order]");
    if (b3) { order(b3.dataset.order, b3.dataset.worker ? {worker: b3.dataset.worker} : {host: b3.dataset.host}); return; }
    const b = event.target.closest("button[data-action]");
    if (!b) return;
    const {action, job, queue} = b.dataset;
    if (action === "cancel") act(`/jobs/${seg(job)}`, "DELETE", `Cancel 1 job (${job})?`);
    if (action === "retry") act(`/jobs/${seg(job)}/retry`, "POST", `Retry 1 job (${job})?`);
    if (action === "pause" || action === "resume") act(`/queues/${seg(queue)}/${action}`, "POST", `${action} queue ${queue}?`);
  });
  $("#filter").addEventListener("submit", (event) => {
    event.preventDefault();
    filter = Object.fromEntries(new FormData(event.target));
    socket.send(JSON.stringify({filter}));
  });
  document.addEventListener("visibilitychange", () => socket && socket.readyState === 1 && socket.send(JSON.stringify({visible: !document.hidden})));
  window.jobsite.hideForbidden();
  connect();
})();
