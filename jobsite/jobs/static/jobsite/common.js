// What every Jobsite page shares: the page's config, escaping, calls to the JSON API, the
// "Redis is unreachable" banner, toasts (the result of an action) and dialogs in the page.
// Whether Redis answers is the server's word alone (see redis() below), never the page's guess.
(() => {
  "use strict";
  const config = JSON.parse(document.getElementById("jobsite-config").textContent);
  const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  // Every value put into a URL is encoded: an id like "../queues/x/pause?" stays one segment.
  const seg = encodeURIComponent;
  // Call the API with the session and the CSRF token; resolve to the JSON answer, or throw
  // an Error whose message is the status and the API's own detail.
  async function api(path, {method = "GET", body} = {}) {
    const headers = {"X-CSRFToken": config.csrf};
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(`${config.api}${path}`, {method, headers, credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body)});
    const answer = response.status === 204 ? null : await response.json().catch(() => ({detail: response.statusText}));
    redis(fromHeader(response.headers.get("Jobsite-Redis")));
    if (!response.ok) throw new Error(`${response.status} ${typeof answer?.detail === "string" ? answer.detail : JSON.stringify(answer?.detail)}`);
    return answer;
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
    banner.querySelector(".since").textContent = `since ${new Date(known.since_ms).toLocaleTimeString()}`;
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

  window.jobsite = {
    redis,
    redisUp: () => known.up,
    toast,
    ask,
    plural: (n, word, many = `${word}s`) => `${n} ${n === 1 ? word : many}`,
    // The word an operator reads for a job state, the same on every page (the API keeps the
    // engine's: submitted is "waiting", started "running").
    stateWord: (state) => config.vocabulary?.labels?.[state] ?? state,
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
