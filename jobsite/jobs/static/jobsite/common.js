// What every Jobsite page shares: the page's config, escaping, calls to the JSON API, the
// "Redis is unreachable" banner, toasts (the result of an action) and dialogs in the page.
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
    if (response.status === 503) redis(false, typeof answer?.detail === "string" ? answer.detail : "");
    else if (response.ok) redis(true);
    if (!response.ok) throw new Error(`${response.status} ${typeof answer?.detail === "string" ? answer.detail : JSON.stringify(answer?.detail)}`);
    return answer;
  }
  // Redis reachable or not: a banner says so, the numbers are marked stale and every action
  // (a button that changes something) is disabled until it answers again.
  let downSince = null;
  function redis(up, detail = "", what = "Redis is unreachable") {
    const banner = document.getElementById("redis-down");
    if (up) {
      if (downSince === null) return;
      downSince = null;
      banner.hidden = true;
      delete document.body.dataset.down;
      for (const b of document.querySelectorAll("button[data-down-disabled]")) { b.disabled = false; delete b.dataset.downDisabled; }
      toast("Redis answers again: live data resumed.", "ok");
      return;
    }
    if (downSince === null) downSince = new Date();
    banner.hidden = false;
    document.body.dataset.down = "1";
    banner.querySelector(".what").textContent = what;
    banner.querySelector(".since").textContent = `since ${downSince.toLocaleTimeString()}`;
    banner.querySelector(".detail").textContent = detail ? `(${detail})` : "";
    for (const b of document.querySelectorAll("main button:not([data-safe]), dialog button.danger")) {
      if (!b.disabled) { b.disabled = true; b.dataset.downDisabled = "1"; }
    }
  }

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
  function ask(question, {confirm = "OK", danger = false, detail = ""} = {}) {
    const dialog = document.createElement("dialog");
    dialog.className = "ask";
    dialog.innerHTML = `<form method="dialog"><p class="question"></p><p class="detail"></p>
      <menu><button value="no" data-safe>Cancel</button> <button value="yes" class="${danger ? "danger" : ""}"></button></menu></form>`;
    dialog.querySelector(".question").textContent = question;
    dialog.querySelector(".detail").textContent = detail;
    dialog.querySelector("button[value=yes]").textContent = confirm;
    document.body.append(dialog);
    dialog.showModal();
    dialog.querySelector("button[value=yes]").focus();
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => { resolve(dialog.returnValue === "yes"); dialog.remove(); });
    });
  }

  window.jobsite = {
    redis,
    toast,
    ask,
    plural: (n, word, many = `${word}s`) => `${n} ${n === 1 ? word : many}`,
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
