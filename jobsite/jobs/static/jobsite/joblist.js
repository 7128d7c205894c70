// The overview's job list (History): counts per state, filters kept in the URL, sortable time
// columns, cursor paging, bulk actions. Times are shown in the browser's zone, and the "since"
// field is read in it too (sent as an absolute time, kept in the URL as UTC).
(() => {
  "use strict";
  const {$, $$, esc, seg, api, config, may, jobPage, toast, ask, plural} = window.jobsite;
  const vocabulary = config.vocabulary;
  const word = (state) => vocabulary.labels?.[state] ?? state;
  const PAGE = 25;
  const REFRESH_MS = 5000;
  const FIELDS = ["q", "state", "queue", "task", "since", "fingerprint"];
  const form = $("#filter");
  let timer;
  let shown = {items: [], next_cursor: null};

  const pad = (n) => String(n).padStart(2, "0");
  // An absolute time as the value of a datetime-local field, in the browser's zone.
  const localInput = (iso) => {
    const d = new Date(iso);
    return Number.isNaN(d.getTime()) ? "" : `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
  };
  // A datetime-local value (the browser's zone) as an absolute UTC time.
  const absolute = (value) => {
    const d = new Date(value);
    return Number.isNaN(d.getTime()) ? "" : d.toISOString();
  };
  const time = (at) => (at ? new Date(at).toLocaleString() : "–");
  const latest = (...times) => times.filter(Boolean).sort((a, b) => Date.parse(b) - Date.parse(a))[0];
  function duration(job) {
    const start = latest(job.started_at, job.retried_at);
    if (!start || !job.completed_at) return "–";
    const ms = Date.parse(job.completed_at) - Date.parse(start);
    if (ms < 0) return "–";
    return ms < 1000 ? `${ms} ms` : ms < 60_000 ? `${(ms / 1000).toFixed(2)} s` : `${(ms / 60_000).toFixed(1)} min`;
  }

  const url = () => new URLSearchParams(location.search);
  // The filter as the URL holds it (blank fields left out).
  function chosen() {
    const p = url();
    return Object.fromEntries(FIELDS.filter((f) => p.get(f)).map((f) => [f, p.get(f)]));
  }

  function fillForm() {
    const p = url();
    for (const f of FIELDS) form.elements[f].value = f === "since" ? (p.get(f) ? localInput(p.get(f)) : "") : (p.get(f) ?? "");
    $("#filter .group").hidden = !p.get("fingerprint");  // shown when a dead-letter group led here
    const sort = p.get("sort") || "-submitted_at";
    for (const th of $$("#search th[data-sort]")) {
      const on = sort.replace("-", "") === th.dataset.sort;
      th.classList.toggle("sorted", on);
      th.classList.toggle("asc", on && !sort.startsWith("-"));
      th.setAttribute("aria-sort", on ? (sort.startsWith("-") ? "descending" : "ascending") : "none");
    }
  }

  function go(change) {
    const p = url();
    for (const [k, v] of Object.entries(change)) { if (v) p.set(k, v); else p.delete(k); }
    history.pushState(null, "", `${location.pathname}${p.toString() ? `?${p}` : ""}#search`);
    fillForm();
    load();
  }

  // The API query of the URL's filter (the counts leave the state out: one count per state).
  function query(extra = {}, withState = true) {
    const c = chosen();
    const p = new URLSearchParams();
    if (c.q) p.set("q", c.q);
    if (c.state && withState) p.set("state", c.state);
    if (c.queue) p.set("queue", c.queue);
    if (c.task) p.set("task_like", c.task);
    if (c.since) p.set("since", c.since);
    if (c.fingerprint) p.set("fingerprint", c.fingerprint);
    for (const [k, v] of Object.entries(extra)) if (v) p.set(k, v);
    return p;
  }

  function row(j) {
    const ticked = $(`#search tbody input[value="${CSS.escape(j.id)}"]`)?.checked;
    const cancel = may("cancel") && vocabulary.cancellable.includes(j.state) ? `<button data-job="${esc(j.id)}" data-action="cancel">cancel</button>` : "";
    return `<tr data-id="${esc(j.id)}"><td><input type="checkbox" aria-label="select" value="${esc(j.id)}" ${ticked ? "checked" : ""}></td>
      <td><a href="${esc(jobPage(j.id))}"><small>${esc(j.id)}</small></a></td><td>${esc(j.task)}</td><td>${esc(j.queue)}</td>
      <td class="state-${esc(j.state)}">${esc(word(j.state))}</td><td>${j.attempt}</td>
      <td class="at">${esc(time(j.submitted_at))}</td><td class="at">${esc(time(latest(j.started_at, j.retried_at)))}</td>
      <td class="at">${esc(time(j.completed_at))}</td><td>${esc(duration(j))}</td><td>${cancel}</td></tr>`;
  }

  function renderCounts(counts) {
    const now = url().get("state") || "";
    const link = (state, label, n) => `<a href="#search" data-state="${esc(state)}" class="${state === now ? "chosen" : ""}">${esc(label)} <b>${n}</b></a>`;
    const states = vocabulary.states.filter((s) => counts.states[s]);
    $("#state-counts").innerHTML = [link("", "all", counts.total), ...states.map((s) => link(s, word(s), counts.states[s]))].join("");
  }

  async function load() {
    clearTimeout(timer);
    const p = url();
    const sort = p.get("sort") || "-submitted_at";
    const cursor = p.get("cursor") || "";
    try {
      const [page, counts] = await Promise.all([
        api(`/jobs?${query({sort, cursor, limit: String(PAGE)})}`),
        api(`/job-counts?${query({}, false)}`),
      ]);
      shown = page;
      $("#search tbody").innerHTML = page.items.map(row).join("") || `<tr><td colspan="11" class="empty">no job matches</td></tr>`;
      renderCounts(counts);
      const matching = p.get("state") ? counts.states[p.get("state")] ?? 0 : counts.total;
      $("#search .page-info").textContent = `${plural(matching, "job")} match${matching === 1 ? "es" : ""}; ${cursor ? "a later page" : "the first page"} of ${PAGE}`;
      $("#search [data-page=next]").hidden = !page.next_cursor;
      $("#search [data-page=first]").hidden = !cursor;
    } catch (error) {
      $("#search .page-info").textContent = `could not load: ${error.message}`;
    }
    // The first page follows new jobs; a later page stays put until asked.
    if (!cursor) timer = setTimeout(() => { if (!document.hidden) load(); else timer = setTimeout(load, REFRESH_MS); }, REFRESH_MS);
  }

  // "changed 3 of 46 jobs; 43 skipped (40 no longer retryable...)" from a bulk answer.
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
    const ids = $$("#search tbody input:checked").map((i) => i.value);
    if (scope === "selected" && !ids.length) { toast("Tick some jobs first.", "error"); return; }
    const c = chosen();
    if (scope !== "selected" && c.fingerprint) { toast("An error group is acted on from the Dead letters page (or tick the jobs here).", "error"); return; }
    const filter = Object.fromEntries(Object.entries({state: c.state, queue: c.queue, task_like: c.task, q: c.q, since: c.since}).filter(([, v]) => v));
    // "All matching" with no filter at all is said explicitly: the API never guesses "everything".
    const body = scope === "selected" ? {ids} : (Object.keys(filter).length ? filter : {all: true});
    let answer;
    try { answer = await api(`/bulk/${seg(action)}`, {method: "POST", body: {...body, dry_run: true}}); } catch (error) { toast(`Failed: ${error.message}`, "error"); return; }
    if (!answer.matched) { toast(`No job to ${action}${ids.length ? ` among the ${plural(ids.length, "selected job")}` : ""}.`); return; }
    const unfit = Object.entries(answer.skipped || {}).map(([reason, n]) => `${n} ${reason}`).join(", ");
    if (!await ask(`${action[0].toUpperCase()}${action.slice(1)} ${plural(answer.matched, "job")}?`, {confirm: action, danger: action === "cancel", detail: unfit ? `Left alone: ${unfit}.` : ""})) return;
    try {
      toast(tally(action, await api(`/bulk/${seg(action)}`, {method: "POST", body})), "ok", 15000);
    } catch (error) { toast(`Failed: ${error.message}`, "error"); }
    load();
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const values = Object.fromEntries(new FormData(form));
    go({...values, since: values.since ? absolute(values.since) : "", cursor: ""});
  });
  $("#search").addEventListener("click", (event) => {
    const sorter = event.target.closest("th[data-sort] a");
    if (sorter) {
      event.preventDefault();
      const field = sorter.closest("th").dataset.sort;
      const now = url().get("sort") || "-submitted_at";
      go({sort: now === `-${field}` ? field : `-${field}`, cursor: ""});
      return;
    }
    const state = event.target.closest("#state-counts a");
    if (state) { event.preventDefault(); go({state: state.dataset.state, cursor: ""}); return; }
    const pager = event.target.closest("[data-page]");
    if (pager) { event.preventDefault(); go({cursor: pager.dataset.page === "next" ? shown.next_cursor : ""}); return; }
    const b = event.target.closest("button[data-bulk]");
    if (b) bulk(b.dataset.bulk, b.dataset.scope);
  });
  window.addEventListener("popstate", () => { fillForm(); load(); });
  document.addEventListener("jobsite:acted", () => load());
  // Suggestions for the task field: every task the workers know.
  api("/tasks").then((tasks) => {
    $("#task-names").innerHTML = tasks.map((t) => `<option value="${esc(t.name)}"></option>`).join("");
  }).catch(() => {});
  fillForm();
  load();
})();
