// One job's page: fetched from the API, refreshed every second while the job is live.
(() => {
  "use strict";
  const {$, esc, seg, config, api, may} = window.jobsite;
  const vocabulary = config.vocabulary;
  const FOLD_CHARS = 2000;  // JSON longer than this is folded behind a <details>
  const time = (at) => (at ? new Date(at).toLocaleString() : "–");
  const span = (from, to) => (from && to ? `${((Date.parse(to) - Date.parse(from)) / 1000).toFixed(3)} s` : "–");
  let timer;

  // Pretty JSON; a large value is folded, with its size in the summary.
  function json(value) {
    const text = JSON.stringify(value, null, 2) ?? "null";
    if (text.length <= FOLD_CHARS) return `<pre>${esc(text)}</pre>`;
    return `<details><summary>${(text.length / 1024).toFixed(1)} KiB of JSON</summary><pre>${esc(text)}</pre></details>`;
  }

  function renderSummary(job) {
    $("#headline").innerHTML = `<b>${esc(job.task)}</b> on <b>${esc(job.queue)}</b> is
      <span class="state state-${esc(job.state)}">${esc(job.state)}</span>, attempt ${job.attempt}`;
    $("#progress").style.width = `${Math.max(0, Math.min(100, job.progress || 0))}%`;
    $("#progress-message").textContent = job.progress_message || "";
    const aside = $("#waiting-version");
    aside.hidden = !job.waiting_for_version;
    aside.textContent = job.waiting_for_version
      ? `Waiting for a worker with task version ${job.waiting_for_version} (none that claimed it had it since ${time(job.waiting_for_version_since)}).`
      : "";
    const facts = {priority: job.priority, worker: job.worker || "–", submitted: time(job.submitted_at),
      "run at": time(job.run_at), started: time(job.started_at), ended: time(job.completed_at),
      waited: span(job.run_at && job.run_at > job.submitted_at ? job.run_at : job.submitted_at, job.started_at),
      ran: span(job.started_at, job.completed_at)};
    $("#facts").innerHTML = Object.entries(facts).map(([k, v]) => `<dt>${esc(k)}</dt><dd>${esc(v)}</dd>`).join("");
    $("#actions [data-action=cancel]").hidden = !(may("cancel") && vocabulary.cancellable.includes(job.state));
    $("#actions [data-action=retry]").hidden = !(may("retry") && vocabulary.retryable.includes(job.state));
  }

  function renderHistory(job) {
    $("#timeline tbody").innerHTML = job.history.map((e) => `<tr><td>${esc(time(e.at))}</td>
      <td class="state-${esc(e.from_state)}">${esc(e.from_state || "–")}</td><td class="state-${esc(e.to_state)}">${esc(e.to_state)}</td>
      <td>${e.attempt}</td><td>${esc(e.worker)}</td><td>${esc(e.error)}</td></tr>`).join("") || `<tr><td colspan="6">not in the history yet</td></tr>`;
    $("#attempts ol").innerHTML = (job.errors || []).map((e) => `<li><b>attempt ${esc(e.attempt ?? "?")}</b>
      ${esc(e.exception || e.type || "")}: ${esc(e.message || "")} <small>${esc(e.at_ms ? new Date(e.at_ms).toLocaleString() : "")}</small><pre>${esc(e.traceback || "")}</pre></li>`).join("") || '<li class="empty">no errors</li>';
    $("#logs ol").innerHTML = (job.logs || []).map((l) => `<li><time>${esc(new Date(l.at_ms).toLocaleTimeString())}</time>
      <small>#${l.attempt}</small> ${esc(l.message)}</li>`).join("") || '<li class="empty">no log lines</li>';
    const dropped = $("#logs .dropped");
    dropped.hidden = !job.logs_dropped;
    dropped.textContent = `${job.logs_dropped} older lines dropped`;
    $("#arguments .json").innerHTML = json({args: job.args, kwargs: job.kwargs});
    $("#result .json").innerHTML = json(job.result);
  }

  async function load() {
    clearTimeout(timer);
    let job;
    try {
      job = await api(`/jobs/${seg(config.job_id)}`);
    } catch (error) {
      $("#headline").textContent = `could not load the job: ${error.message}`;
      timer = setTimeout(load, 5000);
      return;
    }
    renderSummary(job);
    renderHistory(job);
    document.dispatchEvent(new CustomEvent("jobsite:job", {detail: job}));
    $("#status").textContent = vocabulary.live.includes(job.state) ? "live" : "ended";
    if (vocabulary.live.includes(job.state) || !job.history.length) timer = setTimeout(load, 1000);
  }

  async function act(action) {
    const [path, method] = action === "cancel" ? [`/jobs/${seg(config.job_id)}`, "DELETE"] : [`/jobs/${seg(config.job_id)}/retry`, "POST"];
    if (!confirm(`${action} job ${config.job_id}?`)) return;
    try { await api(path, {method}); } catch (error) { alert(`failed: ${error.message}`); }
    load();
  }

  $("#actions").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-action]");
    if (button) act(button.dataset.action);
  });
  load();
})();
