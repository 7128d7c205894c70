// What every Jobsite page shares: the page's config, escaping, and calls to the JSON API.
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
    const answer = response.status === 204 ? null : await response.json();
    if (!response.ok) throw new Error(`${response.status} ${typeof answer?.detail === "string" ? answer.detail : JSON.stringify(answer?.detail)}`);
    return answer;
  }
  window.jobsite = {
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
