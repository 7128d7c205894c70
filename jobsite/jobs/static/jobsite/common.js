// What every Jobsite page shares: the page's config, escaping, times in one zone (the header's
// toggle: the browser's or UTC), calls to the JSON API, the "Redis is unreachable" banner, toasts
// (the result of an action), dialogs in the page and the progress of a background bulk change.
// Whether Redis answers is the server's word alone (see redis() below), never the page's guess.
(() => {
  "use strict";
  const config = JSON.parse(document.getElementById("jobsite-config").textContent);
  const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  // Every value put into a URL is encoded: an id like "../queues/x/pause?" stays one segment.
  const seg = encodeURIComponent;

  // Times: every page shows them in one zone, the browser's own or UTC, as the operator chose
  // with the header's toggle; the choice is kept in localStorage, so every page and tab follows
  // it. Operators hold these times beside logs and alerts: a page never mixes two zones, and the
  // header names the one in use. A change is the event `jobsite:zone` ({zone, previous, name}),
  // on which each page draws its times again.
  const ZONE_KEY = "jobsite.timeZone";
  const LOCAL_ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  const storedZone = () => { try { return localStorage.getItem(ZONE_KEY); } catch { return null; } };
  let zone = storedZone() === "utc" ? "utc" : "local";
  const zoneName = (which = zone) => (which === "utc" ? "UTC" : LOCAL_ZONE);
  // The shapes of toLocaleString() and toLocaleTimeString(), in the browser's language.
  const SHAPES = {time: {year: "numeric", month: "numeric", day: "numeric", hour: "numeric", minute: "2-digit", second: "2-digit"},
    clock: {hour: "numeric", minute: "2-digit", second: "2-digit"}};
  const formats = new Map();
  // An instant (ISO text, ms since the epoch or a Date) in the chosen zone; "–" for none.
  function shown(at, shape) {
    if (at === null || at === undefined || at === "") return "–";
    const date = at instanceof Date ? at : new Date(at);
    if (Number.isNaN(date.getTime())) return "–";
    const key = `${shape} ${zoneName()}`;
    if (!formats.has(key)) formats.set(key, new Intl.DateTimeFormat(undefined, {...SHAPES[shape], timeZone: zoneName()}));
    return formats.get(key).format(date);
  }
  const pad = (n) => String(n).padStart(2, "0");
  // An instant as a datetime-local field's value ("2026-12-05T14:30") in the zone `which`.
  function timeInput(at, which = zone) {
    const d = new Date(at);
    if (Number.isNaN(d.getTime())) return "";
    if (which === "utc") return d.toISOString().slice(0, 16);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
  }
  // A datetime-local field's value, read in the zone `which`, as an absolute UTC time ("" if none).
  function fromTimeInput(value, which = zone) {
    if (!value) return "";
    const d = new Date(which === "utc" ? `${value}Z` : value);  // no offset: the browser's zone
    return Number.isNaN(d.getTime()) ? "" : d.toISOString();
  }
  // The header's toggle says the zone in use; [data-time-zone-name] elements name it too.
  function drawZone() {
    const toggle = document.getElementById("time-zone");
    if (toggle) {
      toggle.dataset.zone = zone;
      toggle.title = `times on every page are shown in ${zoneName()}; the other button switches`;
      toggle.querySelector("button[data-zone=local]").textContent = `${LOCAL_ZONE} (local)`;
      for (const b of toggle.querySelectorAll("button[data-zone]")) b.setAttribute("aria-pressed", String(b.dataset.zone === zone));
    }
    for (const el of document.querySelectorAll("[data-time-zone-name]")) el.textContent = zoneName();
  }
  function zoneChanged(previous) {
    drawZone();
    if (!known.up) drawRedis();
    document.dispatchEvent(new CustomEvent("jobsite:zone", {detail: {zone, previous, name: zoneName()}}));
  }
  function setTimeZone(which) {
    const previous = zone;
    zone = which === "utc" ? "utc" : "local";
    try { localStorage.setItem(ZONE_KEY, zone); } catch { /* storage refused: this page only */ }
    if (zone !== previous) zoneChanged(previous);
  }
  document.getElementById("time-zone")?.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-zone]");
    if (button) setTimeZone(button.dataset.zone);
  });
  // A choice made in another tab: this one follows.
  window.addEventListener("storage", (event) => {
    if (event.key !== ZONE_KEY) return;
    const previous = zone;
    zone = event.newValue === "utc" ? "utc" : "local";
    if (zone !== previous) zoneChanged(previous);
  });
  drawZone();
  // Call the API with the session and the CSRF token; resolve to the JSON answer, or throw
  // an Error whose message is the status and the API's own detail. The error also carries
  // `status`, `reason` (the detail alone, in words: what a form shows) and `field` (the input
  // a validation error names, when it names one).
  async function api(path, {method = "GET", body} = {}) {
    const headers = {"X-CSRFToken": config.csrf};
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(`${config.api}${path}`, {method, headers, credentials: "same-origin",
        body: body === undefined ? undefined : JSON.stringify(body)});
    } catch (error) {
      if (method === "GET") answered("down");  // no answer: the server is away
      throw error;
    }
    const answer = response.status === 204 ? null : await response.json().catch(() => ({detail: response.statusText}));
    redis(fromHeader(response.headers.get("Jobsite-Redis")));
    if (method === "GET") answered([401, 403].includes(response.status) ? "refused" : "live");
    if (!response.ok) {
      const detail = answer?.detail;
      const first = Array.isArray(detail) ? detail[0] : null;  // a validation error: {loc, msg}
      const error = new Error(`${response.status} ${typeof detail === "string" ? detail : JSON.stringify(detail)}`);
      error.status = response.status;
      error.field = first?.loc?.at(-1) ?? null;
      error.reason = typeof detail === "string" ? detail
        : first ? `${error.field ? `${error.field}: ` : ""}${first.msg}` : response.statusText;
      throw error;
    }
    return answer;
  }

  // The header's status says one thing on every page: the connection to the server, as the
  // Overview's socket or a page's refreshes find it ("live"; "polling" where the Overview's
  // socket cannot connect; "reconnecting…" while the server does not answer; "not allowed: sign
  // in again"), and that Redis does not answer when the server says so. What a page counts or
  // when it last refreshed is said in the page itself. A page that follows the connection itself
  // (the Overview: its socket) owns the header; on the others every GET of the API says it.
  let link = "connecting";
  let owned = false;
  const LINK_WORDS = {connecting: () => "connecting…", down: () => "reconnecting…", refused: () => "not allowed: sign in again",
    live: (up) => (up ? "live" : "connected, Redis unreachable"), polling: (up) => (up ? "polling" : "polling, Redis unreachable")};
  function drawLink() {
    const status = document.getElementById("status");
    if (!status) return;
    status.textContent = LINK_WORDS[link](known.up);
    status.dataset.link = link;
  }
  function connection(state) {
    link = state in LINK_WORDS ? state : "connecting";
    drawLink();
  }
  function answered(state) { if (!owned) connection(state); }
  // A page's load that failed (or not: null) says so above its sections, in the page.
  function loaded(error) {
    let note = document.getElementById("load-error");
    if (!error) { if (note) note.hidden = true; return; }
    if (!note) {
      note = document.createElement("p");
      Object.assign(note, {id: "load-error", className: "error wide"});
      note.setAttribute("role", "alert");
      document.querySelector("main")?.prepend(note);
    }
    note.hidden = false;
    note.textContent = `could not load: ${error.reason ?? error.message}`;
  }
  // Redis reachable or not, as the server says ({up, since_ms}: since when, by its clock): in the
  // page's config, in every API answer (the Jobsite-Redis header: "up <ms>" or "down <ms>") and
  // in the dashboard's snapshots. While it is down a banner says so since when, the numbers are
  // marked stale and every action (a button that changes something) is disabled. A report
  // counts only when it tells of a later transition than the one known: an answer from a server
  // process that has not tried Redis since, or one that left late, never undoes a newer one, so
  // "since" holds still for the whole outage and "answers again" is said once, when it is true.
  let known = {up: config.redis?.up ?? true, since_ms: config.redis?.since_ms ?? 0};
  const fromHeader = (value) => {
    const [word, ms] = (value || "").split(" ");
    return word === "up" || word === "down" ? {up: word === "up", since_ms: Number(ms)} : null;
  };
  function redis(report) {
    if (report && typeof report.up === "boolean" && report.up !== known.up && report.since_ms > known.since_ms) {
      known = {up: report.up, since_ms: report.since_ms};
      drawRedis();
      drawLink();
      if (known.up) toast("Redis answers again: live data resumed.", "ok");
      document.dispatchEvent(new CustomEvent("jobsite:redis", {detail: known}));
    } else if (!known.up) disableActions();  // buttons drawn since
  }
  function disableActions() {
    for (const b of document.querySelectorAll("main button:not([data-safe]), dialog button.danger")) {
      if (!b.disabled) { b.disabled = true; b.dataset.downDisabled = "1"; }
    }
  }
  function drawRedis() {
    const banner = document.getElementById("redis-down");
    banner.hidden = known.up;
    if (known.up) {
      delete document.body.dataset.down;
      for (const b of document.querySelectorAll("button[data-down-disabled]")) { b.disabled = false; delete b.dataset.downDisabled; }
      return;
    }
    document.body.dataset.down = "1";
    banner.querySelector(".since").textContent = `since ${shown(known.since_ms, "clock")}`;
    disableActions();
  }
  if (!known.up) drawRedis();

  // A short message about what an action did (and what it skipped, and why), in the page.
  function toast(text, kind = "info", timeoutMs = 8000) {
    let box = document.getElementById("toasts");
    const item = document.createElement("div");
    item.className = `toast toast-${kind}`;
    item.setAttribute("role", kind === "error" ? "alert" : "status");
    item.innerHTML = `<span></span><button type="button" aria-label="dismiss" data-safe>×</button>`;
    item.querySelector("span").textContent = text;
    item.querySelector("button").addEventListener("click", () => item.remove());
    box.append(item);
    if (timeoutMs) setTimeout(() => item.remove(), timeoutMs);
    return item;
  }

  // A dialog in the page instead of confirm(): resolves true when the user confirms.
  // `back` is the safe button: it says what not confirming means ("Keep it", "Go back").
  function ask(question, {confirm = "OK", danger = false, detail = "", back = "Go back"} = {}) {
    const dialog = document.createElement("dialog");
    dialog.className = "ask";
    dialog.innerHTML = `<form method="dialog"><p class="question"></p><p class="detail"></p>
      <menu><button value="no" data-safe>Cancel</button> <button value="yes" class="${danger ? "danger" : ""}"></button></menu></form>`;
    dialog.querySelector(".question").textContent = question;
    dialog.querySelector(".detail").textContent = detail;
    dialog.querySelector("button[value=yes]").textContent = confirm;
    dialog.querySelector("button[value=no]").textContent = back;
    document.body.append(dialog);
    dialog.showModal();
    dialog.querySelector("button[value=yes]").focus();
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => { resolve(dialog.returnValue === "yes"); dialog.remove(); });
    });
  }

  const plural = (n, word, many = `${word}s`) => `${n} ${n === 1 ? word : many}`;

  // "retry: 3 of 46 jobs changed; 43 skipped (40 no longer retryable...)" from a bulk answer.
  function bulkTally(action, answer) {
    const skipped = answer.matched - answer.changed;
    let text = `${action}: ${answer.changed} of ${plural(answer.matched, "job")} changed`;
    if (skipped > 0) {
      const why = Object.entries(answer.skipped || {}).map(([reason, n]) => `${n} ${reason}`).join(", ");
      text += `; ${skipped} skipped${why ? ` (${why})` : ""}`;
    }
    return text;
  }

  // A bulk change running in the background (a 202's run, from the Jobs page or the Dead letters
  // page): its progress in `box` (a .bulk-run element holding a <span> and a <progress>), read
  // every second until it ends, then its outcome as a toast. Resolves to the run as last read.
  async function followRun(box, action, run) {
    box.hidden = false;
    while (run.state === "running") {
      box.querySelector("span").textContent = `${action}: ${run.looked_at} of ${plural(run.matched, "job")} done, ${run.changed} changed`;
      box.querySelector("progress").value = run.matched ? run.looked_at / run.matched : 0;
      await new Promise((resolve) => setTimeout(resolve, 1000));
      try { run = await api(`/bulk/runs/${seg(String(run.id))}`); } catch (error) { toast(`Failed: ${error.message}`, "error"); break; }
    }
    box.hidden = true;
    if (run.state === "done") toast(bulkTally(action, {...run, matched: run.looked_at}), "ok", 15000);
    else if (run.state !== "running") toast(`${action} ${run.state}${run.error ? `: ${run.error}` : ""}; ${run.changed} changed (a new request goes on with the jobs still matching)`, "error", 0);
    return run;
  }

  window.jobsite = {
    redis,
    redisUp: () => known.up,
    // The header's connection state: "live", "polling", "down", "refused" or "connecting".
    connection,
    ownConnection: () => { owned = true; },
    loaded,
    toast,
    ask,
    plural,
    bulkTally,
    followRun,
    // The word an operator reads for a job state, the same on every page (the API keeps the
    // engine's: submitted is "waiting", started "running").
    stateWord: (state) => config.vocabulary?.labels?.[state] ?? state,
    // Times in the zone the header's toggle chose: a date and time, or the time of day alone.
    time: (at) => shown(at, "time"),
    clock: (at) => shown(at, "clock"),
    timeZoneName: () => zoneName(),  // "UTC" or the browser's IANA zone ("Europe/Paris")
    timeZoneChoice: () => zone,  // "local" or "utc"
    setTimeZone,
    timeInput,
    fromTimeInput,
    config,
    esc,
    seg,
    api,
    $: (sel, root = document) => root.querySelector(sel),
    $$: (sel, root = document) => [...root.querySelectorAll(sel)],
    may: (action) => Boolean(config.may[action]),
    jobPage: (id) => config.job_page.replace("JOB_ID", seg(id)),
    // Hide what this user may not do: elements name the actions they need in data-needs.
    hideForbidden(root = document) {
      for (const el of root.querySelectorAll("[data-needs]")) {
        if (!el.dataset.needs.split(" ").some((a) => Boolean(config.may[a]))) el.hidden = true;
      }
    },
  };
})();
