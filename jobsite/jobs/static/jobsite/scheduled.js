// The overview's "Waiting for their time": jobs scheduled for later (a run_at, a delay) and
// retries waiting for their backoff, live from Redis (GET /scheduled), next due first, each
// with "run now" (POST /jobs/{id}/run-now) and a bulk "run selected now" (POST /bulk/run-now).
(() => {
  "use strict";
  const {$, $$, esc, seg, api, may, jobPage, toast, ask, plural} = window.jobsite;
  const section = $("#later");
  if (!section) return;
  const SHOWN = 50;
  const REFRESH_MS = 5000;
  const NOTES = {scheduled: "jobs that have not run yet, due at a set time", retrying: "failed attempts waiting for their retry's backoff"};
  let timer;

  const tab = () => (new URLSearchParams(location.search).get("later") === "retrying" ? "retrying" : "scheduled");
  const lastError = (j) => {
    const e = (j.errors || []).at(-1) || {};
    const kind = (e.exception || e.type || "").split(".").pop();
    const message = (e.message || j.error || "").split("\n")[0];
    return kind && message ? `${kind}: ${message}` : kind || message || "";
  };
  // "in 9 min" beside the time (in the chosen zone): how long until the job runs by itself.
  function due(at) {
    if (!at) return "–";
    const s = Math.round((Date.parse(at) - Date.now()) / 1000);
    const left = s <= 0 ? "due now" : s < 90 ? `in ${s} s` : s < 5400 ? `in ${Math.round(s / 60)} min` : `in ${(s / 3600).toFixed(1)} h`;
    return `${window.jobsite.time(at)} (${left})`;
  }

  function row(j) {
    const ticked = $(`tbody input[value="${CSS.escape(j.id)}"]`, section)?.checked;
    const run = may("retry") ? `<button type="button" data-run-now="${esc(j.id)}" data-queue="${esc(j.queue)}">run now</button>` : "";
    return `<tr data-id="${esc(j.id)}"><td data-label="select"><input type="checkbox" aria-label="select" value="${esc(j.id)}" data-queue="${esc(j.queue)}" ${ticked ? "checked" : ""}></td>
      <td data-label="id"><a href="${esc(jobPage(j.id))}"><small>${esc(j.id)}</small></a></td><td data-label="task">${esc(j.task)}</td><td data-label="queue">${esc(j.queue)}</td>
      <td data-label="attempt">${j.attempt}${j.max_retries != null && j.attempt ? ` of ${j.max_retries + 1}` : ""}</td><td class="at" data-label="due">${esc(due(j.run_at))}</td>
      <td class="error-line" data-label="last error">${esc(lastError(j))}</td><td>${run}</td></tr>`;
  }

  async function load() {
    clearTimeout(timer);
    const now = tab();
    for (const b of $$("[data-tab]", section)) b.setAttribute("aria-selected", String(b.dataset.tab === now));
    $(".tab-note", section).textContent = NOTES[now];
    try {
      const jobs = await api(`/scheduled?retrying=${now === "retrying"}&limit=${SHOWN}`);
      $("tbody", section).innerHTML = jobs.map(row).join("") || `<tr><td colspan="8" class="empty">${now === "retrying" ? "no retry waiting" : "no job scheduled"}</td></tr>`;
      $(".page-info", section).textContent = jobs.length >= SHOWN ? `the ${SHOWN} due next` : plural(jobs.length, "job");
    } catch (error) {
      $(".page-info", section).textContent = `could not load: ${error.message}`;
    }
    timer = setTimeout(() => (document.hidden ? (timer = setTimeout(load, REFRESH_MS)) : load()), REFRESH_MS);
  }

  async function runOne(id) {
    if (!await ask(`Run job ${id} now?`, {confirm: "Run now", detail: "It is submitted at once instead of waiting for its time; the workers take it in turn."})) return;
    try {
      const job = await api(`/jobs/${seg(id)}/run-now`, {method: "POST"});
      toast(`Job ${id} runs now (${window.jobsite.stateWord(job.state)}).`, "ok");
    } catch (error) { toast(`Failed: ${error.message}`, "error"); }
    load();
    document.dispatchEvent(new CustomEvent("jobsite:acted"));
  }

  async function runSelected() {
    const picked = $$("tbody input:checked", section);
    if (!picked.length) { toast("Tick some jobs first.", "error"); return; }
    if (!await ask(`Run ${plural(picked.length, "job")} now?`, {confirm: "Run now"})) return;
    const byQueue = {};
    for (const box of picked) (byQueue[box.dataset.queue] ||= []).push(box.value);
    let matched = 0, changed = 0;
    const skipped = {};
    try {
      for (const [queue, ids] of Object.entries(byQueue)) {
        const answer = await api("/bulk/run-now", {method: "POST", body: {queue, ids}});
        matched += answer.matched; changed += answer.changed;
        for (const [why, n] of Object.entries(answer.skipped || {})) skipped[why] = (skipped[why] || 0) + n;
      }
      const why = Object.entries(skipped).map(([reason, n]) => `${n} ${reason}`).join(", ");
      toast(`run now: ${changed} of ${plural(matched, "job")} submitted${why ? `; skipped: ${why}` : ""}`, "ok", 15000);
    } catch (error) { toast(`Failed: ${error.message}`, "error"); }
    load();
    document.dispatchEvent(new CustomEvent("jobsite:acted"));
  }

  section.addEventListener("click", (event) => {
    const switcher = event.target.closest("[data-tab]");
    if (switcher) {
      const p = new URLSearchParams(location.search);
      if (switcher.dataset.tab === "retrying") p.set("later", "retrying"); else p.delete("later");
      history.replaceState(null, "", `${location.pathname}${p.toString() ? `?${p}` : ""}#later`);
      load();
      return;
    }
    const b = event.target.closest("button[data-run-now]");
    if (!b) return;
    if (b.dataset.runNow === "selected") runSelected(); else runOne(b.dataset.runNow);
  });
  document.addEventListener("jobsite:zone", load);
  window.jobsite.hideForbidden(section);
  load();
})();
