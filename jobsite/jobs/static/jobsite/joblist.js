// The job list of the Jobs page and of the Overview's History section (#search): counts per
// state, filters, sort, page size and the page's cursor all in the URL (a link or a refresh shows
// the same page), sortable time and duration columns, cursor paging both ways, bulk actions.
// Times are shown in the zone the header's toggle chose (the browser's or UTC, common.js), and
// the "since" field is read in it too (sent as an absolute time, kept in the URL as UTC).
(() => {
  "use strict";
  const {$, $$, esc, seg, api, config, may, jobPage, toast, ask, plural, stateWord: word} = window.jobsite;
  const {bulkTally, followRun} = window.jobsite;
  const vocabulary = config.vocabulary;
  const section = $("#search");
  // The section's anchor in the list's links: "#search" on the Overview, where others come first.
  const anchor = section.dataset.anchor || "";
  // The page size: the URL's when the page offers that size (the Jobs page), else the page's own.
  const SIZES = $$("select[name=limit] option", section).map((o) => Number(o.value));
  const SIZE = Number(section.dataset.limit) || 25;
  // The first page follows new jobs: every 5 s in submission order (an index gives it), every
  // 30 s in the others (each a scan of the matching jobs: docs/api.md).
  const REFRESH_MS = 5000;
  const SCAN_REFRESH_MS = 30_000;
  const FIELDS = ["q", "state", "queue", "task", "since", "fingerprint", "ids"];
  // A page other than the first: `cursor` pages after a row, `before` before one (the API's words).
  const AWAY = {cursor: "", before: ""};
  // What the list of an order holds: jobs without that time (or duration) are not in it.
  const ONLY = {started_at: "jobs that started", completed_at: "jobs that reached their final state",
    duration_seconds: "jobs that started and reached their final state"};
  const form = $("#filter");
  let timer;
  let loads = 0;  // an answer to an older load (the URL changed meanwhile) is dropped
  let shown = {items: [], next_cursor: null, prev_cursor: null};

  // An absolute time as the value of a datetime-local field, and back, in the chosen zone.
  const {time, timeInput: zoneInput, fromTimeInput: absolute} = window.jobsite;
  // The API's duration_seconds (the latest attempt, start to end: what the duration sort orders by).
  function duration(job) {
    const s = job.duration_seconds;
    if (s === null || s === undefined || s < 0) return "–";
    const ms = Math.round(s * 1000);
    return ms < 1000 ? `${ms} ms` : ms < 60_000 ? `${(ms / 1000).toFixed(2)} s` : `${(ms / 60_000).toFixed(1)} min`;
  }

  const url = () => new URLSearchParams(location.search);
  const sortOf = (p = url()) => p.get("sort") || "-submitted_at";
  const limit = (p = url()) => (SIZES.includes(Number(p.get("limit"))) ? Number(p.get("limit")) : SIZE);
  // This page's URL with `change` made (a blank value drops the parameter).
  function href(change) {
    const p = url();
    for (const [k, v] of Object.entries(change)) { if (v) p.set(k, v); else p.delete(k); }
    return `${location.pathname}${p.toString() ? `?${p}` : ""}${anchor}`;
  }
  // The filter as the URL holds it (blank fields left out).
  function chosen() {
    const p = url();
    return Object.fromEntries(FIELDS.filter((f) => p.get(f)).map((f) => [f, p.get(f)]));
  }

  function fillForm() {
    const p = url();
    for (const f of FIELDS) form.elements[f].value = f === "since" ? (p.get(f) ? zoneInput(p.get(f)) : "") : (p.get(f) ?? "");
    $("#filter .group").hidden = !p.get("fingerprint");  // shown when a dead-letter group led here
    // The jobs a resubmit named (the Dead letters page's "see them"): kept until cleared.
    $("#filter .ids").hidden = !p.get("ids");
    $("#filter .ids b").textContent = plural((p.get("ids") || "").split(",").length, "job");
    const sort = sortOf(p);
    for (const th of $$("#search th[data-sort]")) {
      const on = sort.replace("-", "") === th.dataset.sort;
      th.classList.toggle("sorted", on);
      th.classList.toggle("asc", on && !sort.startsWith("-"));
      th.setAttribute("aria-sort", on ? (sort.startsWith("-") ? "descending" : "ascending") : "none");
      th.querySelector("a").href = href({sort: flipped(sort, th.dataset.sort), ...AWAY});
    }
    const size = $("select[name=limit]", section);
    if (size) size.value = String(limit(p));
    // "clear" keeps the page size; "see all jobs" (the Overview's) takes the filters and the order
    $("#filter [data-clear]").href = `${location.pathname}${p.get("limit") ? `?limit=${p.get("limit")}` : ""}${anchor}`;
    const all = $("a[data-all-jobs]", section);
    if (all) {
      all.dataset.path ??= all.pathname;
      const kept = new URLSearchParams([...p].filter(([k]) => [...FIELDS, "sort"].includes(k)));
      all.href = `${all.dataset.path}${kept.toString() ? `?${kept}` : ""}`;
    }
  }

  // Newest (largest) first on a first click, then the other way.
  const flipped = (sort, field) => (sort === `-${field}` ? field : `-${field}`);

  function go(change, {replace = false} = {}) {
    history[replace ? "replaceState" : "pushState"](null, "", href(change));
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
    if (c.ids) p.set("ids", c.ids);
    for (const [k, v] of Object.entries(extra)) if (v) p.set(k, v);
    return p;
  }

  function row(j) {
    const ticked = $(`#search tbody input[value="${CSS.escape(j.id)}"]`)?.checked;
    const cancel = may("cancel") && vocabulary.cancellable.includes(j.state) ? `<button data-job="${esc(j.id)}" data-action="cancel">cancel</button>` : "";
    return `<tr data-id="${esc(j.id)}"><td data-label="select"><input type="checkbox" aria-label="select" value="${esc(j.id)}" ${ticked ? "checked" : ""}></td>
      <td data-label="id"><a href="${esc(jobPage(j.id))}"><small>${esc(j.id)}</small></a></td><td data-label="task">${esc(j.task)}</td><td data-label="queue">${esc(j.queue)}</td>
      <td class="state-${esc(j.state)}" data-label="state">${esc(word(j.state))}</td><td data-label="attempt">${j.attempt}</td>
      <td class="at" data-label="submitted">${esc(time(j.submitted_at))}</td><td class="at" data-label="started">${esc(time(j.started_at))}${j.retried_at ? `<br><small>latest attempt ${esc(time(j.retried_at))}</small>` : ""}</td>
      <td class="at" data-label="completed">${esc(time(j.completed_at))}</td><td data-label="duration">${esc(duration(j))}</td><td>${cancel}</td></tr>`;
  }

  function renderCounts(counts) {
    const now = url().get("state") || "";
    const link = (state, label, n) => `<a href="${esc(href({state, ...AWAY}))}" data-state="${esc(state)}" class="${state === now ? "chosen" : ""}">${esc(label)} <b>${n}</b></a>`;
    const states = vocabulary.states.filter((s) => counts.states[s]);
    $("#state-counts").innerHTML = [link("", "all", counts.total), ...states.map((s) => link(s, word(s), counts.states[s]))].join("");
  }

  async function load() {
    clearTimeout(timer);
    const p = url();
    const sort = sortOf(p);
    const cursor = p.get("cursor") || "";
    const before = cursor ? "" : p.get("before") || "";
    const size = limit(p);
    const mine = ++loads;
    try {
      const [page, counts] = await Promise.all([
        api(`/jobs?${query({sort, cursor, before, limit: String(size)})}`),
        api(`/job-counts?${query({}, false)}`),
      ]);
      if (mine !== loads) return;
      // Back at the start: show the first page itself (a full one, which follows new jobs).
      if (before && !page.prev_cursor) { go({before: ""}, {replace: true}); return; }
      shown = page;
      $("#search tbody").innerHTML = page.items.map(row).join("") || `<tr><td colspan="11" class="empty">no job matches</td></tr>`;
      renderCounts(counts);
      const matching = p.get("state") ? counts.states[p.get("state")] ?? 0 : counts.total;
      const only = ONLY[sort.replace("-", "")];
      $("#search .page-info").textContent = `${plural(matching, "job")} match${matching === 1 ? "es" : ""}; ${cursor || before ? "a later page" : "the first page"} of ${size}${only ? `, listing only ${only}` : ""}`;
      const pager = {first: cursor || before ? AWAY : null, prev: page.prev_cursor ? {before: page.prev_cursor, cursor: ""} : null,
        next: page.next_cursor ? {cursor: page.next_cursor, before: ""} : null};
      for (const [which, change] of Object.entries(pager)) {
        const link = $(`#search [data-page=${which}]`);
        link.hidden = !change;
        if (change) link.href = href(change);
      }
    } catch (error) {
      if (mine !== loads) return;
      $("#search .page-info").textContent = `could not load: ${error.message}`;
    }
    // The first page follows new jobs; a later page stays put until asked.
    const every = sort.endsWith("submitted_at") ? REFRESH_MS : SCAN_REFRESH_MS;
    if (!cursor && !before) timer = setTimeout(() => { if (!document.hidden) load(); else timer = setTimeout(load, every); }, every);
  }

  // A row's cancel: the list's own (the Overview's handler of its other buttons never sees it).
  async function cancel(id) {
    if (!await ask(`Cancel job ${id}?`, {confirm: "Yes", danger: true})) return;
    try {
      const answer = await api(`/jobs/${seg(id)}`, {method: "DELETE"});
      toast(`Cancelled job ${id} (${answer?.outcome ?? "cancelled"}).`, "ok");
      document.dispatchEvent(new CustomEvent("jobsite:acted"));
    } catch (error) { toast(`Failed: ${error.message}`, "error"); }
  }

  async function bulk(action, scope) {
    const ids = $$("#search tbody input:checked").map((i) => i.value);
    if (scope === "selected" && !ids.length) { toast("Tick some jobs first.", "error"); return; }
    const c = chosen();
    if (scope !== "selected" && c.fingerprint) { toast("An error group is acted on from the Dead letters page (or tick the jobs here).", "error"); return; }
    if (scope !== "selected" && c.ids) { toast("Jobs chosen by id are acted on by ticking them.", "error"); return; }
    const filter = Object.fromEntries(Object.entries({state: c.state, queue: c.queue, task_like: c.task, q: c.q, since: c.since}).filter(([, v]) => v));
    // "All matching" with no filter at all is said explicitly: the API never guesses "everything".
    const body = scope === "selected" ? {ids} : (Object.keys(filter).length ? filter : {all: true});
    let answer;
    try { answer = await api(`/bulk/${seg(action)}`, {method: "POST", body: {...body, dry_run: true}}); } catch (error) { toast(`Failed: ${error.message}`, "error"); return; }
    if (!answer.matched) { toast(`No job to ${action}${ids.length ? ` among the ${plural(ids.length, "selected job")}` : ""}.`); return; }
    const unfit = Object.entries(answer.skipped || {}).map(([reason, n]) => `${n} ${reason}`).join(", ");
    if (!await ask(`${action[0].toUpperCase()}${action.slice(1)} ${plural(answer.matched, "job")}?`, {confirm: action, danger: action === "cancel", detail: unfit ? `Left alone: ${unfit}.` : ""})) return;
    try {
      const done = await api(`/bulk/${seg(action)}`, {method: "POST", body});
      // Past the server's cap the change runs in the background (202, a run): follow it.
      if (done.state) follow(action, done); else toast(bulkTally(action, done), "ok", 15000);
    } catch (error) { toast(`Failed: ${error.message}`, "error"); }
    load();
  }

  // A background bulk change: its progress under the buttons until it ends, then the list again.
  async function follow(action, run) {
    await followRun($(".bulk-run", section), action, run);
    load();
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const values = Object.fromEntries(new FormData(form));
    go({...values, since: values.since ? absolute(values.since) : "", ...AWAY});
  });
  // The list's links are real links (a new tab opens the same page); a plain click stays here.
  $("#search").addEventListener("click", (event) => {
    const plain = event.button === 0 && !event.metaKey && !event.ctrlKey && !event.shiftKey && !event.altKey;
    const sorter = event.target.closest("th[data-sort] a");
    if (sorter && plain) {
      event.preventDefault();
      go({sort: flipped(sortOf(), sorter.closest("th").dataset.sort), ...AWAY});
      return;
    }
    const state = event.target.closest("#state-counts a");
    if (state && plain) { event.preventDefault(); go({state: state.dataset.state, ...AWAY}); return; }
    const pager = event.target.closest("[data-page]");
    if (pager && plain) {
      event.preventDefault();
      const which = pager.dataset.page;
      go(which === "next" ? {cursor: shown.next_cursor, before: ""} : which === "prev" ? {before: shown.prev_cursor, cursor: ""} : AWAY);
      return;
    }
    const one = event.target.closest("button[data-action=cancel][data-job]");
    if (one) { event.stopPropagation(); cancel(one.dataset.job); return; }
    const b = event.target.closest("button[data-bulk]");
    if (b) bulk(b.dataset.bulk, b.dataset.scope);
  });
  // Another page size keeps the page's place (a cursor is a row's position, not a page number).
  $("select[name=limit]", section)?.addEventListener("change", (event) => {
    const size = Number(event.target.value);
    go({limit: size === SIZE ? "" : String(size)});
  });
  window.addEventListener("popstate", () => { fillForm(); load(); });
  // Another zone: "since" says the same instant in it (even typed, not sent yet), times redrawn.
  document.addEventListener("jobsite:zone", (event) => {
    const since = form.elements.since;
    if (since.value) since.value = zoneInput(absolute(since.value, event.detail.previous));
    load();
  });
  document.addEventListener("jobsite:acted", () => load());
  // Suggestions for the task field: every task the workers know.
  api("/tasks").then((tasks) => {
    $("#task-names").innerHTML = tasks.map((t) => `<option value="${esc(t.name)}"></option>`).join("");
  }).catch(() => {});
  window.jobsite.hideForbidden(section);
  fillForm();
  load();
})();
