// One job's page: fetched from the API, refreshed every second while the job is live and every
// few seconds once it ended (a retry from here, another tab or the API brings it back to life).
// Attempts are numbered as the engine numbers them: 1, 2... within a series; a manual retry
// (resubmit) starts a new series at 1, and the page says which series each attempt belongs to.
(() => {
  "use strict";
  const {$, esc, seg, config, api, may, ask, toast} = window.jobsite;
  const vocabulary = config.vocabulary;
  const FOLD_CHARS = 2000;  // JSON longer than this is folded behind a <details>
  const {time, clock} = window.jobsite;
  // A duration; "–" when either end is missing or the end is before the start (not known yet).
  const span = (from, to) => {
    if (!from || !to) return "–";
    const ms = Date.parse(to) - Date.parse(from);
    return ms >= 0 ? `${(ms / 1000).toFixed(3)} s` : "–";
  };
  const latest = (...times) => times.filter(Boolean).sort((a, b) => Date.parse(b) - Date.parse(a))[0];
  const ENDED_POLL_MS = 4000;
  let timer;

  // The series of each state change: a resubmission (a terminal state back to submitted or
  // blocked at attempt 0) starts the next one.
  function series(history) {
    let n = 1;
    return history.map((e) => {
      if (e.attempt === 0 && vocabulary.terminal.includes(e.from_state) && ["submitted", "blocked"].includes(e.to_state)) n += 1;
      return n;
    });
  }
  // The series of each error: an attempt number not above the previous one starts a new series.
  function errorSeries(errors) {
    let n = 1;
    let last = 0;
    return errors.map((e) => {
      const attempt = Number(e.attempt ?? 0);
      if (attempt <= last) n += 1;
      last = attempt;
      return n;
    });
  }
  const attemptLabel = (attempt, s, many) => (many ? `attempt ${attempt} of run ${s}` : `attempt ${attempt}`);

  // Frames of the engine, of Jobsite's wrappers and of libraries: where the error was not made.
  const OTHERS = /(\/engine\/|\/jobsite\/jobs\/|site-packages|dist-packages|\/lib\/python3[^/]*\/(asyncio|concurrent|threading))/;
  const FRAME = /^\s*File "([^"]+)", line (\d+), in (.+)$/;

  // The innermost frame of the application's own code in a traceback, or null.
  function ownFrame(traceback) {
    const frames = (traceback || "").split("\n").map((line) => line.match(FRAME)).filter(Boolean);
    const own = frames.filter((m) => !OTHERS.test(m[1]));
    const m = own.at(-1);
    return m ? `${m[1]}, line ${m[2]}, in ${m[3]}` : null;
  }

  // A traceback with the frames of the engine and of libraries dimmed, the application's bright.
  function tracebackHtml(traceback) {
    let other = false;
    return (traceback || "").split("\n").map((line) => {
      const m = line.match(FRAME);
      if (m) other = OTHERS.test(m[1]);
      return other && (m || /^\s{4}/.test(line)) ? `<span class="other-frame">${esc(line)}</span>` : esc(line);
    }).join("\n");
  }

  // Errors with consecutive repeats folded: [{error, first, last, count, series}].
  function folded(errors) {
    const es = errorSeries(errors);
    const out = [];
    errors.forEach((e, i) => {
      const prev = out.at(-1);
      const same = prev && prev.error.exception === e.exception && prev.error.type === e.type
        && prev.error.message === e.message && (prev.error.traceback || "") === (e.traceback || "")
        && prev.series === es[i];
      if (same) { prev.count += 1; prev.last = e; } else out.push({error: e, first: e, last: e, count: 1, series: es[i]});
    });
    return out;
  }

  function renderLastError(job) {
    const errors = job.errors || [];
    const last = errors.at(-1);
    const box = $("#last-error");
    box.hidden = !last || !vocabulary.terminal.includes(job.state) && job.state !== "scheduled";
    if (box.hidden) return;
    const times = errors.filter((e) => e.message === last.message && (e.exception || e.type) === (last.exception || last.type)).length;
    const kind = (last.exception || last.type || "error").replace(/^builtins\./, "");
    box.querySelector(".what").innerHTML = `<b>${esc(kind)}</b>: ${esc(last.message || "")}${times > 1 ? ` <small>(the same error ${times} times)</small>` : ""}`;
    const where = ownFrame(last.traceback);
    box.querySelector(".where").innerHTML = where ? `in your code at <code>${esc(where)}</code>` : "";
    box.querySelector(".not-retried").textContent = last.not_retried ? `Not retried: ${last.not_retried}.` : "";
    const pre = box.querySelector(".traceback");
    pre.hidden = !last.traceback;
    pre.innerHTML = tracebackHtml(last.traceback);
  }

  // Pretty JSON; a large value is folded, with its size in the summary.
  function json(value) {
    const text = JSON.stringify(value, null, 2) ?? "null";
    if (text.length <= FOLD_CHARS) return `<pre>${esc(text)}</pre>`;
    return `<details><summary>${(text.length / 1024).toFixed(1)} KiB of JSON</summary><pre>${esc(text)}</pre></details>`;
  }

  function renderSummary(job) {
    const runs = Math.max(series(job.history).at(-1) ?? 1, errorSeries(job.errors || []).at(-1) ?? 1);
    const shown = window.jobsite.stateWord(job.state);
    const attempt = job.attempt ? `, ${attemptLabel(job.attempt, runs, runs > 1)}` : (runs > 1 ? `, run ${runs} (manual retry)` : "");
    const phase = job.phase === "claimed" ? ' <span class="tag phase" data-phase="claimed">claimed, not started yet</span>' : "";
    $("#headline").innerHTML = `<b>${esc(job.task)}</b> on <b>${esc(job.queue)}</b> is
      <span class="state state-${esc(job.state)}">${esc(shown)}</span>${esc(attempt)}${phase}`;
    $("#progress").style.width = `${Math.max(0, Math.min(100, job.progress || 0))}%`;
    $("#progress-message").textContent = job.progress_message || "";
    const aside = $("#waiting-version");
    aside.hidden = !job.waiting_for_version;
    aside.textContent = job.waiting_for_version
      ? `Waiting for a worker with task version ${job.waiting_for_version} (none that claimed it had it since ${time(job.waiting_for_version_since)}).`
      : "";
    // The latest attempt: queued (ready) at submitted_at, started at the latest start.
    const start = latest(job.started_at, job.retried_at);
    const ready = latest(job.submitted_at, job.run_at);
    const current = start && (!ready || Date.parse(start) >= Date.parse(ready)) ? start : null;
    const facts = {priority: job.priority, worker: job.worker || "–", "queued (latest)": time(job.submitted_at),
      "run at": time(job.run_at), claimed: time(job.claimed_at), "first started": time(job.started_at),
      "latest attempt started": time(current),
      completed: time(job.completed_at && current && Date.parse(job.completed_at) >= Date.parse(current) ? job.completed_at : null),
      waited: current ? span(ready, current) : (vocabulary.live.includes(job.state) ? "waiting…" : "–"),
      ran: current ? span(current, job.completed_at) : "–"};
    $("#facts").innerHTML = Object.entries(facts).map(([k, v]) => `<dt>${esc(k)}</dt><dd>${esc(v)}</dd>`).join("");
    $("#actions [data-action=cancel]").hidden = !(may("cancel") && vocabulary.cancellable.includes(job.state));
    // A job the API would refuse to retry (its task is unknown to every worker) gets no Retry,
    // and the page says why.
    const blocked = $("#cannot-run");
    blocked.hidden = !job.cannot_run;
    blocked.textContent = job.cannot_run ? `Cannot be retried or replayed: ${job.cannot_run}.` : "";
    $("#actions [data-action=retry]").hidden = !(may("retry") && vocabulary.retryable.includes(job.state) && !job.cannot_run);
  }

  // The phases inside `started` of the latest claim (claimed, then running): claimed at
  // claimed_at, then began at the latest start once the worker ran it (job.phase says which).
  function phaseRows(job) {
    if (!job.claimed_at) return [];
    const began = latest(job.started_at, job.retried_at);
    const rows = [{at: job.claimed_at, phase: "claimed",
      text: job.phase === "claimed" ? "claimed by a worker, not started yet" : "claimed by a worker"}];
    if (job.phase !== "claimed" && began && Date.parse(began) >= Date.parse(job.claimed_at)) {
      rows.push({at: began, phase: "running", text: "began running"});
    }
    return rows;
  }

  function renderHistory(job) {
    const ss = series(job.history);
    const many = (ss.at(-1) ?? 1) > 1;
    const word = window.jobsite.stateWord;
    const rows = job.history.map((e, i) => ({at: e.at, html: `<tr><td data-label="at">${esc(time(e.at))}</td>
      <td class="state-${esc(e.from_state)}" data-label="from">${esc(e.from_state ? word(e.from_state) : "–")}</td><td class="state-${esc(e.to_state)}" data-label="to">${esc(word(e.to_state))}</td>
      <td data-label="attempt">${e.attempt ? esc(attemptLabel(e.attempt, ss[i], many)) : (ss[i] > 1 && i && ss[i] !== ss[i - 1] ? "manual retry" : "–")}</td><td data-label="worker">${esc(e.worker)}</td><td data-label="error">${esc(e.error)}</td></tr>`}));
    // Each phase goes after the events up to its time (a stable merge by time).
    for (const p of phaseRows(job)) {
      const html = `<tr class="phase" data-phase="${esc(p.phase)}"><td data-label="at">${esc(time(p.at))}</td><td colspan="3" data-label="phase"><i>${esc(p.text)}</i></td><td data-label="worker">${esc(job.worker || "")}</td><td></td></tr>`;
      const at = rows.findIndex((r) => Date.parse(r.at) > Date.parse(p.at));
      rows.splice(at === -1 ? rows.length : at, 0, {at: p.at, html});
    }
    $("#timeline tbody").innerHTML = rows.map((r) => r.html).join("") || `<tr><td colspan="6">not in the history yet</td></tr>`;
    const es = errorSeries(job.errors || []);
    const manyErrors = (es.at(-1) ?? 1) > 1;
    const label = (f) => {
      const first = attemptLabel(f.first.attempt ?? "?", f.series, manyErrors);
      return f.count > 1 ? `${first} to ${f.last.attempt ?? "?"}: the same error × ${f.count}` : first;
    };
    $("#attempts ol").innerHTML = folded(job.errors || []).map((f) => `<li><b>${esc(label(f))}</b>
      ${esc(f.last.exception || f.last.type || "")}: ${esc(f.last.message || "")} <small>${esc(f.last.at_ms ? time(f.last.at_ms) : "")}</small>${f.last.not_retried ? `<p class="not-retried">Not retried: ${esc(f.last.not_retried)}</p>` : ""}${f.last.traceback ? `<details><summary>traceback</summary><pre>${tracebackHtml(f.last.traceback)}</pre></details>` : ""}</li>`).join("") || '<li class="empty">no errors</li>';
    $("#logs ol").innerHTML = (job.logs || []).map((l) => `<li><time>${esc(clock(l.at_ms))}</time>
      <small>#${l.attempt}</small> ${esc(l.message)}</li>`).join("") || '<li class="empty">no log lines</li>';
    const dropped = $("#logs .dropped");
    dropped.hidden = !job.logs_dropped;
    dropped.textContent = `${job.logs_dropped} older lines dropped`;
    // The checkpoint card: only while the job holds one (a completed job's is cleared).
    const saved = $("#checkpoint");
    saved.hidden = job.checkpoint == null;
    saved.querySelector(".json").innerHTML = job.checkpoint == null ? "" : json(job.checkpoint);
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
    renderLastError(job);
    renderHistory(job);
    document.dispatchEvent(new CustomEvent("jobsite:job", {detail: job}));
    // Live: every second. Ended: keep following at a slower pace (a retry brings it back).
    timer = setTimeout(load, vocabulary.live.includes(job.state) || !job.history.length ? 1000 : ENDED_POLL_MS);
  }

  async function act(action) {
    const [path, method] = action === "cancel" ? [`/jobs/${seg(config.job_id)}`, "DELETE"] : [`/jobs/${seg(config.job_id)}/retry`, "POST"];
    if (!await ask(`${action === "cancel" ? "Cancel" : "Retry"} job ${config.job_id}?`, {confirm: action === "cancel" ? "Cancel job" : "Retry", danger: action === "cancel", back: "Keep it"})) return;
    try {
      const answer = await api(path, {method});
      toast(action === "cancel" ? `Cancel sent: the job is ${answer?.outcome ?? answer?.state ?? "cancelling"}.` : `Retried: the job is ${answer?.state ?? "queued"} again.`, "ok");
    } catch (error) { toast(`${action} failed: ${error.message}`, "error"); }
    load();
  }

  $("#actions").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-action]");
    if (button) act(button.dataset.action);
  });
  document.addEventListener("jobsite:zone", load);
  load();
})();
