// Dead letters grouped by error fingerprint, with resubmit and purge of a whole group. After a
// resubmit the group says what became of its jobs (completed, failed again, still running),
// followed for about 30 s through /job-counts of the ids the answer named. A group can be muted
// (its dead letters still counted, no alert) for a while or until unmuted: muted groups are
// folded at the bottom, "show muted" unfolds them. A group past the server's cap changes in the
// background: its progress shows above the table, as on the Jobs page (followRun, common.js).
(() => {
  "use strict";
  const {$, esc, api, jobPage, hideForbidden, ask, toast, plural, config} = window.jobsite;
  const {time, loaded, followRun} = window.jobsite;
  const VERBS = {resubmit: "Resubmit", purge: "Purge"};
  let groups = [];
  let timer;
  let known = null;  // the task names workers know (/tasks): a group of others is not resubmitted
  // fingerprint -> the follow-up of its last resubmit: {total, ids, since, link, counts, until}.
  const followed = new Map();
  const FOLLOW_MS = 2000;
  const FOLLOW_FOR_MS = 30_000;
  const IDS_PER_CALL = 100;  // what /job-counts takes in `ids` (IDS_MAX)
  const FOLLOW_MAX = 1000;  // a larger resubmit is followed through its first 1000 jobs
  const TALLY_MS = 30_000;
  const tallied = {path: "", at: 0};  // the last tally read, and when
  // How long a mute holds: [for_s, words] ("" : until unmuted).
  const DURATIONS = [["3600", "1 hour"], ["86400", "1 day"], ["604800", "1 week"], ["", "until unmuted"]];
  let showMuted = false;

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
    return `<tr data-index="${i}"><td class="count" data-label="jobs">${g.count}${jobs}</td>
      <td data-label="error">${error}${s.frame ? `<br><small>at <code>${esc(s.frame)}</code></small>` : ""}${s.not_retried ? `<br><small class="not-retried">not retried: ${esc(s.not_retried)}</small>` : ""}
        <br><small>fingerprint <code>${esc(g.fingerprint || "–")}</code>; newest: ${s.job_id ? `<a href="${esc(jobPage(s.job_id))}">${esc(s.job_id)}</a>` : "–"}
        ${g.fingerprint && s.pattern !== s.message ? `<q>${esc(s.message)}</q>` : ""}</small>${outcome(g.fingerprint)}</td>
      <td data-label="tasks">${tasks}</td><td data-label="queues">${g.queues.map(esc).join(", ")}</td><td data-label="first seen">${esc(time(g.first_seen))}</td><td data-label="last seen">${esc(time(g.last_seen))}</td>
      <td>${cannotRun(g) ? `<button data-act="resubmit" data-needs="retry" data-cannot-run disabled title="${esc(cannotRun(g))}">Resubmit</button> <small class="cannot-run">cannot run: task not deployed</small>` : `<button data-act="resubmit" data-needs="retry">Resubmit</button>`}
        <button data-act="purge" data-needs="purge">Purge</button>${muting(g)}</td></tr>`;
  }

  // "muted until <time>" (or "until unmuted"), by whom and why, of each queue the group is muted in.
  function mutedLabel(m) {
    const until = m.until ? `until ${esc(time(m.until))}` : "until unmuted";
    const why = m.reason ? `: <q>${esc(m.reason)}</q>` : "";
    return `<small class="muted-label" data-queue="${esc(m.queue)}">muted in ${esc(m.queue)} ${until}${m.muted_by ? ` by ${esc(m.muted_by)}` : ""}${why}</small>`;
  }

  // A group's Mute (for the queues it is not muted in) and Unmute buttons, and its mutes.
  function muting(g) {
    if (!g.fingerprint) return "";
    const mutedIn = new Set(g.mutes.map((m) => m.queue));
    const mute = g.queues.some((q) => !mutedIn.has(q)) ? ` <button data-act="mute" data-needs="retry" data-safe>Mute…</button>` : "";
    const unmute = g.mutes.length ? ` <button data-act="unmute" data-needs="retry" data-safe>Unmute</button>` : "";
    return `${mute}${unmute}${g.mutes.map((m) => `<br>${mutedLabel(m)}`).join("")}`;
  }

  // "resubmitted 11: 0 completed, 11 failed again, 0 still running (see them)" for a group
  // resubmitted from this page ("" for any other).
  function outcome(fingerprint) {
    const f = followed.get(fingerprint);
    if (!f) return "";
    const c = f.counts;
    const parts = c ? [`${c.completed} completed`, `${c.failed} failed again`, ...(c.cancelled ? [`${c.cancelled} cancelled`] : []), `${c.running} still running`] : ["checking…"];
    const partly = f.ids.length > FOLLOW_MAX ? ` (following the first ${FOLLOW_MAX})` : "";
    const ended = c && c.running && Date.now() >= f.until ? "; no longer followed here" : "";
    const link = f.link ? ` <a href="${esc(f.link)}">see them</a>` : "";
    return `<p class="resubmit-outcome" role="status" data-fingerprint="${esc(fingerprint)}">resubmitted ${f.total}${partly}: ${esc(parts.join(", "))}${ended}${f.error ? ` <small class="error">${esc(f.error)}</small>` : ""} (${link.trim() || "–"})</p>`;
  }

  // Groups resubmitted here whose dead letters are all gone from the list (running, completed).
  function orphans() {
    const listed = new Set(groups.map((g) => g.fingerprint));
    return [...followed.keys()].filter((fp) => !listed.has(fp)).map((fp) => `<tr class="resubmit-outcome"><td></td>
      <td colspan="6"><small>group <code>${esc(fp || "–")}</code>, no dead letter left</small>${outcome(fp)}</td></tr>`).join("");
  }

  function render() {
    const open = groups.map(row).filter((_, i) => !groups[i].muted);
    $("#groups tbody").innerHTML = orphans() + open.join("") || `<tr><td colspan="7">${groups.length ? "no dead letters but in muted groups" : "no dead letters"}</td></tr>`;
    const muted = groups.map((g, i) => [g, i]).filter(([g]) => g.muted);
    const count = muted.reduce((n, [g]) => n + g.count, 0);
    const fold = muted.length ? `<tr class="muted-fold"><td colspan="7"><button type="button" id="show-muted" data-safe aria-expanded="${showMuted}">${showMuted ? "hide" : "show"} muted</button>
      <small>${plural(muted.length, "muted group")}, ${plural(count, "dead letter")}: still counted, no alert</small></td></tr>` : "";
    $("#muted-groups").innerHTML = fold + (showMuted ? muted.map(([g, i]) => row(g, i)).join("") : "");
    hideForbidden($("#groups"));
  }

  // Follow a group's resubmitted jobs: their states in the history (the rows the mirror saw
  // resubmitted: submitted at or after `since`; the others still count as running).
  async function follow(fingerprint) {
    const f = followed.get(fingerprint);
    if (!f) return;
    clearTimeout(f.timer);
    const ids = f.ids.slice(0, FOLLOW_MAX);
    try {
      const calls = [];
      for (let i = 0; i < ids.length; i += IDS_PER_CALL) {
        const query = new URLSearchParams({ids: ids.slice(i, i + IDS_PER_CALL).join(","), since: f.since});
        calls.push(api(`/job-counts?${query}`));
      }
      const states = {};
      for (const answer of await Promise.all(calls)) {
        for (const [state, n] of Object.entries(answer.states)) states[state] = (states[state] || 0) + n;
      }
      const completed = states.completed || 0;
      const cancelled = states.cancelled || 0;
      const failed = config.vocabulary.dead.reduce((n, s) => n + (states[s] || 0), 0);
      f.counts = {completed, failed, cancelled, running: Math.max(0, ids.length - completed - cancelled - failed)};
      f.error = "";
    } catch (error) {
      f.error = error.message;
    }
    render();
    if ((!f.counts || f.counts.running) && Date.now() < f.until) f.timer = setTimeout(() => follow(fingerprint), FOLLOW_MS);
  }

  // Where Redis (the Overview's count) and the history (this page) disagree, say by how much
  // and why: rows not written yet, or rows the history keeps after the cleaner pruned the DLQ.
  function renderTally(tallies) {
    const lines = tallies.filter((t) => t.in_redis || t.in_history).map((t) => {
      const pruned = Math.max(0, t.in_history - (t.checked - t.without_row));
      const notes = [];
      if (t.without_row) notes.push(`${plural(t.without_row, "has", "have")} no row here yet (reconciliation adds ${t.without_row === 1 ? "it" : "them"})`);
      if (pruned) notes.push(`${plural(pruned, "row")} kept here after the cleaner pruned ${pruned === 1 ? "its job" : "their jobs"} from Redis`);
      const counts = `<b>${esc(t.queue)}</b>: ${t.in_redis} in Redis, ${t.in_history} in the history`;
      return `<li data-queue="${esc(t.queue)}" data-without-row="${t.without_row}">${counts}${notes.length ? `: ${esc(notes.join("; "))}` : ""}</li>`;
    });
    $("#tally").innerHTML = lines.length ? `<small>Dead letters per queue</small><ul>${lines.join("")}</ul>` : "";
  }

  async function load() {
    clearTimeout(timer);
    try {
      const query = filters().toString();
      if (known === null) known = new Set((await api("/tasks")).map((t) => t.name));
      groups = await api(`/dead-letters${query ? `?${query}` : ""}`);
      render();
      // The tally walks each dead-letter queue: every 30 s, or at once when the filter changed.
      const path = `/dead-letters/counts${filters().get("queue") ? `?queue=${encodeURIComponent(filters().get("queue"))}` : ""}`;
      if (path !== tallied.path || Date.now() - tallied.at > TALLY_MS) {
        renderTally(await api(path));
        Object.assign(tallied, {path, at: Date.now()});
      }
      const quiet = groups.filter((g) => g.muted);
      const muted = quiet.length ? `; ${quiet.reduce((n, g) => n + g.count, 0)} of them in ${plural(quiet.length, "muted group")}` : "";
      $("#group-count").textContent = `${plural(groups.reduce((n, g) => n + g.count, 0), "dead letter")} in ${plural(groups.length, "group")}${muted}`;
      loaded(null);
    } catch (error) {
      loaded(error);
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
      const answer = await api(`/dead-letters/${action}`, {method: "POST", body});
      if (answer.state) {  // past the server's cap: a background run (202), followed as it goes
        message.textContent = `${VERBS[action]}: ${plural(answer.matched, "job")}, in the background`;
        const run = await followRun($("#dead-letters .bulk-run"), action, answer);
        message.textContent = `${VERBS[action]}: ${run.changed} of ${plural(run.looked_at, "job")} changed (${run.state})`;
        load();
        return;
      }
      const {changed} = answer;
      const skipped = matched - changed;
      if (action === "resubmit" && changed && answer.ids?.length) {
        clearTimeout(followed.get(group.fingerprint)?.timer);
        followed.set(group.fingerprint, {total: changed, ids: answer.ids, since: answer.since, link: answer.jobs_url, counts: null, until: Date.now() + FOLLOW_FOR_MS});
        follow(group.fingerprint);
      }
      message.textContent = `${VERBS[action]}: ${changed} of ${plural(matched, "job")}`;
      toast(`${VERBS[action]}: ${changed} of ${plural(matched, "job")}${skipped ? `; ${skipped} skipped (no longer in the dead-letter queue: resubmitted, purged or expired meanwhile)` : ""}.`, "ok", 12000);
    } catch (error) {
      message.textContent = `${VERBS[action]} failed: ${error.message}`;
      toast(`${VERBS[action]} failed: ${error.message}`, "error");
    }
    load();
  }

  // Ask how long and why; resolve to {for_s, reason}, or null when cancelled.
  function askMute(queues) {
    const dialog = document.createElement("dialog");
    dialog.className = "ask mute-dialog";
    dialog.innerHTML = `<form method="dialog"><p class="question"></p>
      <p class="detail">Its new dead letters are still recorded and counted, but raise no alert; the group is folded at the bottom of this page.</p>
      <p><label>for <select name="for_s">${DURATIONS.map(([v, w]) => `<option value="${v}">${w}</option>`).join("")}</select></label></p>
      <p><label>reason <input name="reason" maxlength="500" size="36" placeholder="partner API down until Monday"></label></p>
      <menu><button value="no" data-safe>Cancel</button> <button value="yes" data-safe>Mute</button></menu></form>`;
    dialog.querySelector(".question").textContent = `Mute this group in ${queues.join(", ")}?`;
    document.body.append(dialog);
    dialog.showModal();
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => {
        const form = dialog.querySelector("form");
        const forS = form.elements.for_s.value;
        resolve(dialog.returnValue === "yes" ? {for_s: forS ? Number(forS) : null, reason: form.elements.reason.value.trim()} : null);
        dialog.remove();
      });
    });
  }

  // Mute a group in each queue it is listed in and not muted in yet (one call per queue), or
  // unmute it wherever it is muted.
  async function mute(action, group) {
    const path = `/dead-letters/groups/${encodeURIComponent(group.fingerprint)}/mute`;
    const mutedIn = new Set(group.mutes.map((m) => m.queue));
    try {
      if (action === "mute") {
        const queues = group.queues.filter((q) => !mutedIn.has(q));
        const chosen = await askMute(queues);
        if (!chosen) return;
        for (const queue of queues) await api(path, {method: "POST", body: {queue, ...chosen}});
        toast(`Muted in ${queues.join(", ")}: its dead letters raise no alert ${chosen.for_s ? `for ${DURATIONS.find(([v]) => Number(v) === chosen.for_s)?.[1] ?? `${chosen.for_s} s`}` : "until unmuted"}.`, "ok");
      } else {
        for (const queue of mutedIn) await api(`${path}?${new URLSearchParams({queue})}`, {method: "DELETE"});
        toast(`Unmuted in ${[...mutedIn].join(", ")}: its dead letters alert again.`, "ok");
      }
    } catch (error) {
      toast(`${action === "mute" ? "Mute" : "Unmute"} failed: ${error.reason || error.message}`, "error");
    }
    load();
  }

  $("#groups").addEventListener("click", (event) => {
    if (event.target.closest("#show-muted")) {
      showMuted = !showMuted;
      render();
      return;
    }
    const button = event.target.closest("button[data-act]");
    if (!button) return;
    const group = groups[Number(button.closest("tr").dataset.index)];
    if (["mute", "unmute"].includes(button.dataset.act)) mute(button.dataset.act, group);
    else act(button.dataset.act, group);
  });
  $("#filters").addEventListener("submit", (event) => { event.preventDefault(); load(); });
  document.addEventListener("jobsite:zone", render);
  load();
})();
