// Jobsite overview: live data over HTTP and a websocket, the API for actions. The first
// snapshot comes from GET /live; then the socket pushes updates (coalesced by the server). Where
// the socket cannot connect while the server answers HTTP (a WSGI server, such as `runserver`
// without Daphne, answers its handshake 404) the page polls GET /live while it is visible and
// tries the socket again less and less often, up to once a minute, so the log is not flooded.
// The job list (History) is joblist.js; this file draws queues, workers, running and failures.
// Two facts, never confused: whether the socket is connected (the header says "live",
// "polling" or "reconnecting…") and whether Redis answers, which only the server says (each
// snapshot's `redis`, common.js's banner); while it does not, the header never says "live".
(() => {
  "use strict";
  const {$, esc, seg, config, may, jobPage, api, redis, toast, ask} = window.jobsite;
  const FAILURES_SHOWN = 8;
  const POLL_MS = 3000;
  const RETRY_FIRST_MS = 2000;
  const RETRY_MAX_MS = 60_000;
  let socket = null;
  let socketOpen = false;
  // "socket" (pushed), "polling" (the socket cannot connect), "down" (the server is away),
  // "refused" (signed out or no longer allowed)
  let mode = "socket";
  let retryMs = RETRY_FIRST_MS;
  let pollTimer = null;
  // Messages the socket delivered: an HTTP snapshot asked for before one of them is older.
  let pushed = 0;

  // The header: the connection as the socket finds it (common.js words it, with Redis when the
  // server says it does not answer, as on every page).
  window.jobsite.ownConnection();
  function showStatus() {
    if (mode === "refused" || mode === "polling") window.jobsite.connection(mode);
    else window.jobsite.connection(mode === "down" || !socketOpen ? "down" : "live");
  }
  function setMode(next) {
    mode = next;
    $("#polling-note").hidden = mode !== "polling";
    showStatus();
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const ws = socket = new WebSocket(`${scheme}://${location.host}${config.socket}`);
    let opened = false;
    ws.onopen = () => {
      opened = socketOpen = true;
      retryMs = RETRY_FIRST_MS;
      clearTimeout(pollTimer);
      setMode("socket");
      if (document.hidden) ws.send(JSON.stringify({visible: false}));
    };
    ws.onclose = () => {
      if (socket === ws) socket = null;
      socketOpen = false;
      if (opened) { setMode("socket"); fetchSnapshot(); setTimeout(connect, 1000); }
      else handshakeFailed();
    };
    ws.onmessage = (event) => {
      pushed += 1;
      const data = JSON.parse(event.data);
      if (data.type === "error") { toast(data.detail, "error"); return; }
      if (data.queues) render(data);  // a stale one repeats the last numbers (none before the first)
      redis(data.redis);
    };
  }

  // Load the snapshot over HTTP and draw it; say what answered: "ok", "down" (no answer: the
  // server is away), "refused" (401, 403) or "error" (another answer: 503 when Redis is away,
  // whose Jobsite-Redis header api() hands to the banner).
  async function fetchSnapshot() {
    const before = pushed;
    try {
      const data = await api("/live");
      if (pushed === before) { render(data); redis(data.redis); }
      return "ok";
    } catch (error) {
      if (error instanceof TypeError) return "down";
      if (/^40[13] /.test(error.message)) return "refused";
      return "error";
    }
  }

  // The handshake failed. If HTTP answers, the server serves no websocket (or a proxy drops
  // it): poll, and try the socket again later and later. If not, the server is away: retry soon.
  async function handshakeFailed() {
    const answer = await fetchSnapshot();
    if (socketOpen) return;
    if (answer === "down") { setMode("down"); setTimeout(connect, RETRY_FIRST_MS); return; }
    setMode(answer === "refused" ? "refused" : "polling");
    setTimeout(connect, retryMs);
    retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
    if (mode === "polling") schedulePoll();
  }

  // While the socket is not connected and the server answers: a snapshot every POLL_MS while
  // the tab is visible (a hidden tab asks nothing; it catches up when shown).
  function schedulePoll(delayMs = POLL_MS) {
    clearTimeout(pollTimer);
    pollTimer = setTimeout(async () => {
      if (socketOpen || mode !== "polling") return;
      if (!document.hidden) await fetchSnapshot();
      if (!socketOpen && mode === "polling") schedulePoll();
    }, delayMs);
  }

  // The line that says what went wrong: "ValueError: card declined", never the engine's frames.
  function errorLine(error) {
    const kind = (error.exception || error.type || "").split(".").pop();
    const message = (error.message || "").split("\n")[0];
    return kind && message ? `${kind}: ${message}` : kind || message || "no error recorded";
  }

  function render(data) {
    if (window.jobsite.liveDepth) window.jobsite.liveDepth(data.queues);  // the chart's last point
    const queues = Object.entries(data.queues || {});
    $("#queues tbody").innerHTML = queues.map(([name, c]) => `<tr><td data-label="queue">${esc(name)}${data.paused[name] ? " <small>(paused)</small>" : ""}</td>
      <td data-label="waiting">${c.submitted}</td><td data-label="scheduled">${c.scheduled}</td><td data-label="running">${c.started}</td><td data-label="dead letters">${c.dlq}</td><td data-label="completed (total)">${c.completed_total}</td><td data-label="failed (total)">${c.failed_total}</td>
      <td data-label="oldest waiting">${data.oldest_waiting_s && data.oldest_waiting_s[name] != null ? Math.round(data.oldest_waiting_s[name]) + " s" : "–"}</td>
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
    if (action === "retry") act(`/jobs/${seg(job)}/retry`, "POST", `Retry job ${job}?`, (j) => `Job ${job} queued again (now ${window.jobsite.stateWord(j?.state ?? "submitted")}).`);
    if (action === "pause" || action === "resume") act(`/queues/${seg(queue)}/${action}`, "POST", `${action[0].toUpperCase()}${action.slice(1)} queue ${queue}?`, () => `Queue ${queue} ${action === "pause" ? "paused" : "resumed"}.`);
  });
  document.addEventListener("visibilitychange", () => {
    if (socketOpen) socket.send(JSON.stringify({visible: !document.hidden}));
    else if (mode === "polling" && !document.hidden) schedulePoll(0);
  });
  // An action's result shows at once, not at the next poll.
  document.addEventListener("jobsite:acted", () => { if (mode === "polling") schedulePoll(0); });
  $("#polling-note").textContent = `Live updates by polling every ${POLL_MS / 1000} s: run an ASGI server (Daphne) for instant updates (see docs/install.md, "The websocket").`;
  window.jobsite.hideForbidden();
  fetchSnapshot();
  connect();
})();
