// Jobsite dashboard: a websocket for live data (coalesced by the server), the API for actions.
(() => {
  "use strict";
  const {$, esc, seg, config, may, jobPage, api, redis, toast, ask, plural} = window.jobsite;
  const csrf = config.csrf;
  let socket;
  let filter = {};

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${scheme}://${location.host}${config.socket}`);
    socket.onopen = () => { $("#status").textContent = "live"; socket.send(JSON.stringify({filter})); };
    socket.onclose = () => { $("#status").textContent = "reconnecting…"; probe(); setTimeout(connect, 1000); };
    socket.onmessage = (event) => {
      const data = JSON.parse(event.data);
      if (data.type === "error") {
        if (data.redis === "down") { redis(false); $("#status").textContent = "Redis unreachable"; }
        else toast(data.detail, "error");
        return;
      }
      redis(true);
      render(data);
    };
  }

  // The socket closed: ask the API whether Redis (503) or the server itself is away.
  async function probe() {
    try { await api("/queues"); } catch (error) {
      if (error instanceof TypeError) redis(false, "", "The server is not answering");
    }
  }

  function render(data) {
    const queues = Object.entries(data.queues || {});
    $("#queues tbody").innerHTML = queues.map(([name, c]) => `<tr><td>${esc(name)}${data.paused[name] ? " (paused)" : ""}</td>
      <td>${c.submitted}</td><td>${c.scheduled}</td><td>${c.started}</td><td>${c.dlq}</td><td>${c.completed_total}</td><td>${c.failed_total}</td>
      <td>${data.oldest_waiting_s && data.oldest_waiting_s[name] != null ? Math.round(data.oldest_waiting_s[name]) + " s" : "–"}</td>
      <td>${may("change_queue") ? `<button data-queue="${esc(name)}" data-action="${data.paused[name] ? "resume" : "pause"}">${data.paused[name] ? "resume" : "pause"}</button>` : ""}</td></tr>`).join("");
    $("#workers ul").innerHTML = (data.workers || []).map((w) => `<li><b>${esc(w.id)}</b> ${esc(w.queues)} · ${w.current_jobs.length}/${w.concurrency} busy · seen ${Math.round((Date.now() - w.heartbeat_at_ms) / 1000)}s ago</li>`).join("") || "<li>none</li>";
    $("#running ul").innerHTML = (data.running || []).map((j) => `<li>${esc(j.task)} <small>${esc(j.id)}</small>
      <div class="bar"><span style="width:${Math.max(0, Math.min(100, j.progress || 0))}%"></span></div><small>${esc(j.progress_message)}</small></li>`).join("") || "<li>nothing running</li>";
    $("#failures ul").innerHTML = (data.failures || []).map((f) => `<li data-id="${esc(f.id)}"><b>${esc(f.task)}</b> <span class="state-${esc(f.state)}">${esc(f.state)}</span> <a href="${esc(jobPage(f.id))}"><small>${esc(f.id)}</small></a>
      ${may("retry") ? `<button data-job="${esc(f.id)}" data-action="retry">retry</button>` : ""}<pre>${esc(f.error.traceback || f.error.message || "")}</pre></li>`).join("") || "<li>none</li>";
    const ticked = new Set([...document.querySelectorAll("#search tbody input:checked")].map((i) => i.value));
    $("#search tbody").innerHTML = (data.jobs || []).map((j) => `<tr data-id="${esc(j.id)}"><td><input type="checkbox" value="${esc(j.id)}" ${ticked.has(j.id) ? "checked" : ""}></td><td><a href="${esc(jobPage(j.id))}"><small>${esc(j.id)}</small></a></td><td>${esc(j.task)}</td><td>${esc(j.queue)}</td>
      <td class="state-${esc(j.state)}">${esc(j.state)}</td><td>${j.attempt}</td>
      <td>${may("cancel") && (data.vocabulary || config.vocabulary).cancellable.includes(j.state) ? `<button data-job="${esc(j.id)}" data-action="cancel">cancel</button>` : ""}</td></tr>`).join("");
  }

  async function act(path, method, question, done) {
    if (!await ask(question, {confirm: "Yes", danger: method === "DELETE"})) return;
    try {
      const answer = await api(path, {method});
      toast(done(answer), "ok");
    } catch (error) { toast(`Failed: ${error.message}`, "error"); }
  }

  // "changed 3 of 46; skipped 43: 40 completed, 3 running" from a bulk answer.
  function tally(action, answer) {
    const skipped = answer.matched - answer.changed;
    let text = `${action}: ${answer.changed} of ${plural(answer.matched, "job")} changed`;
    if (skipped > 0) {
      const why = Object.entries(answer.skipped || {}).map(([reason, n]) => `${n} ${reason}`).join(", ");
      text += `; ${skipped} skipped${why ? ` (${why})` : ""}`;
    }
    return text;
  }

  async function bulk(action, scope) {
    const ids = [...document.querySelectorAll("#search tbody input:checked")].map((i) => i.value);
    if (scope === "selected" && !ids.length) { toast("Tick some jobs first.", "error"); return; }
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
    try { ({matched} = await call(true)); } catch (error) { toast(`Failed: ${error.message}`, "error"); return; }
    if (!matched) { toast(`No job to ${action}.`, "info"); return; }
    if (!await ask(`${action[0].toUpperCase()}${action.slice(1)} ${plural(matched, "job")}?`, {confirm: action, danger: action === "cancel"})) return;
    try {
      toast(tally(action, await call(false)), "ok", 15000);
    } catch (error) { toast(`Failed: ${error.message}`, "error"); }
  }

  document.addEventListener("click", (event) => {
    const b2 = event.target.closest("button[data-bulk]");
    if (b2) { bulk(b2.dataset.bulk, b2.dataset.scope); return; }
    const b = event.target.closest("button[data-action]");
    if (!b) return;
    const {action, job, queue} = b.dataset;
    if (action === "cancel") act(`/jobs/${seg(job)}`, "DELETE", `Cancel job ${job}?`, (j) => `Cancelled job ${job} (now ${j?.state ?? "cancelled"}).`);
    if (action === "retry") act(`/jobs/${seg(job)}/retry`, "POST", `Retry job ${job}?`, (j) => `Job ${job} queued again (now ${j?.state ?? "submitted"}).`);
    if (action === "pause" || action === "resume") act(`/queues/${seg(queue)}/${action}`, "POST", `${action[0].toUpperCase()}${action.slice(1)} queue ${queue}?`, () => `Queue ${queue} ${action === "pause" ? "paused" : "resumed"}.`);
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
