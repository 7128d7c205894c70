// Dead letters grouped by error fingerprint, with resubmit and purge of a whole group.
(() => {
  "use strict";
  const {$, esc, api, jobPage, hideForbidden, ask, toast, plural, config} = window.jobsite;
  const time = (at) => (at ? new Date(at).toLocaleString() : "–");
  const VERBS = {resubmit: "Resubmit", purge: "Purge"};
  let groups = [];
  let timer;
  let known = null;  // the task names workers know (/tasks): a group of others is not resubmitted

  // A group whose jobs name a task no worker knows (UnknownTask) would only be dropped again:
  // the API says so (cannot_run) and refuses it; so does a task this site does not list.
  const cannotRun = (g) => g.cannot_run || (known !== null && Object.keys(g.tasks).some((t) => !known.has(t))
    ? g.cannot_run || "its task is not deployed: deploy it, then resubmit" : "");

  function filters() {
    const params = new URLSearchParams();
    for (const name of ["queue", "task"]) {
      const value = $(`#filters [name=${name}]`).value.trim();
      if (value) params.set(name, value);
    }
    return params;
  }

  function row(g, i) {
    const s = g.sample || {};
    const tasks = Object.entries(g.tasks).map(([t, n]) => `${esc(t)} <small>×${n}</small>`).join("<br>");
    const error = g.fingerprint ? `<b>${esc(s.exception)}</b>: ${esc(s.pattern || s.message)}` : `<b>no error recorded</b> (${esc(s.type)}): ${esc(s.message)}`;
    const jobs = g.fingerprint ? `<br><a href="${esc(config.dashboard)}?fingerprint=${encodeURIComponent(g.fingerprint)}#search"><small>its jobs</small></a>` : "";
    return `<tr data-index="${i}"><td class="count">${g.count}${jobs}</td>
      <td>${error}${s.frame ? `<br><small>at <code>${esc(s.frame)}</code></small>` : ""}${s.not_retried ? `<br><small class="not-retried">not retried: ${esc(s.not_retried)}</small>` : ""}
        <br><small>fingerprint <code>${esc(g.fingerprint || "–")}</code>; newest: ${s.job_id ? `<a href="${esc(jobPage(s.job_id))}">${esc(s.job_id)}</a>` : "–"}
        ${g.fingerprint && s.pattern !== s.message ? `<q>${esc(s.message)}</q>` : ""}</small></td>
      <td>${tasks}</td><td>${g.queues.map(esc).join(", ")}</td><td>${esc(time(g.first_seen))}</td><td>${esc(time(g.last_seen))}</td>
      <td>${cannotRun(g) ? `<button data-act="resubmit" data-needs="retry" data-cannot-run disabled title="${esc(cannotRun(g))}">Resubmit</button> <small class="cannot-run">cannot run: task not deployed</small>` : `<button data-act="resubmit" data-needs="retry">Resubmit</button>`}
        <button data-act="purge" data-needs="purge">Purge</button></td></tr>`;
  }

  async function load() {
    clearTimeout(timer);
    try {
      const query = filters().toString();
      if (known === null) known = new Set((await api("/tasks")).map((t) => t.name));
      groups = await api(`/dead-letters${query ? `?${query}` : ""}`);
      $("#groups tbody").innerHTML = groups.map(row).join("") || `<tr><td colspan="7">no dead letters</td></tr>`;
      hideForbidden($("#groups"));
      $("#status").textContent = `${groups.reduce((n, g) => n + g.count, 0)} dead letters in ${groups.length} groups`;
    } catch (error) {
      $("#status").textContent = `could not load: ${error.message}`;
    }
    timer = setTimeout(load, 5000);
  }

  // Count first (dry run), confirm with the count, then act on the whole group.
  async function act(action, group) {
    const body = {fingerprint: group.fingerprint, ...Object.fromEntries(filters())};
    const message = $("#message");
    try {
      const {matched} = await api(`/dead-letters/${action}`, {method: "POST", body: {...body, dry_run: true}});
      if (!matched) { toast(`No dead letter of this group left to ${action}.`); load(); return; }
      const detail = action === "purge" ? "Purged jobs are deleted from Redis for good." : "Each runs again as a new attempt series.";
      if (!await ask(`${VERBS[action]} ${plural(matched, "dead letter")} of this group?`, {confirm: VERBS[action], danger: action === "purge", detail})) return;
      const {changed} = await api(`/dead-letters/${action}`, {method: "POST", body});
      const skipped = matched - changed;
      message.textContent = `${VERBS[action]}: ${changed} of ${plural(matched, "job")}`;
      toast(`${VERBS[action]}: ${changed} of ${plural(matched, "job")}${skipped ? `; ${skipped} skipped (no longer in the dead-letter queue: resubmitted, purged or expired meanwhile)` : ""}.`, "ok", 12000);
    } catch (error) {
      message.textContent = `${VERBS[action]} failed: ${error.message}`;
      toast(`${VERBS[action]} failed: ${error.message}`, "error");
    }
    load();
  }

  $("#groups").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-act]");
    if (button) act(button.dataset.act, groups[Number(button.closest("tr").dataset.index)]);
  });
  $("#filters").addEventListener("submit", (event) => { event.preventDefault(); load(); });
  load();
})();
