// The schedules page: the list from the API, refreshed every 2 s; forms and buttons for
// users who may change schedules (config.may.change_queue).
(() => {
  "use strict";
  const {$, $$, esc, seg, api, may, jobPage, hideForbidden, ask, toast} = window.jobsite;
  const REFRESH_MS = 2000;
  const form = $("#schedule-form");
  let editing = null;  // {queue, name} while the form edits a schedule
  let timer;
  let shown = [];

  const {time} = window.jobsite;
  const path = (s, action = "") => `/schedules/${seg(s.queue)}/${seg(s.name)}${action}`;
  const say = (text, error = false) => { $("#message").textContent = text; $("#message").className = error ? "error" : ""; toast(text, error ? "error" : "ok"); };
  // New schedules default to the browser's own time zone (cron ticks are read in it).
  const browserZone = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";

  function when(s) {
    const base = s.cron ? `cron <code>${esc(s.cron)}</code> (${esc(s.tz)})` : `every ${esc(s.every_s)} s`;
    const count = s.repeat_limit
      ? `<br><small class="fired">${esc(s.fired)} of ${esc(s.repeat_limit)} runs fired, ${esc(s.remaining)} left</small>`
      : (s.fired ? `<br><small class="fired">${esc(s.fired)} runs fired</small>` : "");
    return base + (s.skip_if_running ? ", skip if running" : "") + count;
  }

  // A scheduled flow: its jobs in order, each with the indexes of its parents.
  function what(s) {
    if (!s.flow) return `<code>${esc(s.task)}</code><br><small>${esc(JSON.stringify(s.args))} ${esc(JSON.stringify(s.kwargs))}</small>`;
    const jobs = s.flow.map((j, i) => `<li><code>${esc(j.task)}</code> <small>${esc(JSON.stringify(j.args))}${j.parents.length ? ` after ${j.parents.map((p) => p + 1).join(", ")}` : ""}</small></li>`).join("");
    return `<span class="tag">flow of ${s.flow.length} jobs</span><ol class="flow-jobs">${jobs}</ol>`;
  }

  function lastRun(s) {
    const run = s.last_run;
    if (!run) return "never";
    const state = run.state || "unknown";
    return `<a href="${esc(jobPage(run.id))}">${esc(time(run.at))}</a>
      <span class="state state-${esc(state)}">${esc(state)}</span>${run.manual ? ' <span class="tag">run now</span>' : ""}`;
  }

  // The dead-man's switch of each schedule (GET /health), by "queue/name".
  let health = {};

  function healthCell(key) {
    const h = health[key];
    if (!h) return "";
    const why = h.reasons.length ? `<br><small>${h.reasons.map(esc).join("<br>")}</small>` : "";
    return `<span class="health health-${esc(h.state)}" data-health="${esc(h.state)}">${esc(h.state)}</span>${why}`;
  }

  function row(s) {
    const key = `${s.queue}/${s.name}`;
    const runs = s.next_runs.map((t) => `<li>${esc(time(t))}</li>`).join("");
    return `<tr data-key="${esc(key)}">
      <td data-label="queue / name"><b>${esc(s.name)}</b><br><small>${esc(s.queue)}</small></td>
      <td data-label="task">${what(s)}</td>
      <td data-label="when">${when(s)}</td>
      <td class="next" data-label="next runs">${runs ? `<ol>${runs}</ol>` : "–"}</td>
      <td class="last" data-label="last run">${lastRun(s)}</td>
      <td class="origin" data-label="origin"><span class="tag">${esc(s.origin)}</span>${s.overridden ? ' <span class="tag override">overridden</span>' : ""}</td>
      <td class="paused" data-label="state">${s.paused ? "paused" : "active"}</td>
      <td class="health-cell" data-label="health">${healthCell(key)}</td>
      <td data-needs="change_queue">
        ${s.flow ? "" : '<button data-action="edit">Edit</button>'}
        <button data-action="${s.paused ? "resume" : "pause"}">${s.paused ? "Resume" : "Pause"}</button>
        <button data-action="run">Run now</button>
        <button data-action="delete">Delete</button></td></tr>`;
  }

  async function load() {
    clearTimeout(timer);
    try {
      const [listed, checked] = await Promise.all([api("/schedules"), api("/health")]);
      shown = listed;
      health = Object.fromEntries(checked.schedules.map((h) => [`${h.queue}/${h.name}`, h]));
      const body = $("#schedules tbody");
      body.innerHTML = shown.map(row).join("") || `<tr><td colspan="9">no schedules yet</td></tr>`;
      hideForbidden(body);
      window.jobsite.loaded(null);
    } catch (error) {
      window.jobsite.loaded(error);
    }
    timer = setTimeout(load, REFRESH_MS);
  }

  // The chosen task's arguments as one input each (argfields.js). They fill the raw JSON boxes
  // (what is sent); a raw box edited by hand wins until a field is touched again.
  let rawEdited = false;
  const box = $("#task-args .fields");
  const fields = window.jobsite.argumentFields(box);

  // One input per parameter of the chosen task, filled from `args` (by position) and `kwargs`.
  function renderFields(name, args = [], kwargs = {}) {
    $("#task-args .task-name").textContent = name || "";
    $("#task-args .empty").hidden = fields.render(name, args, kwargs) > 0;
    rawEdited = false;
    $("#args-hint").textContent = "";
  }

  function syncRaw() {
    form.args.value = "[]";
    form.kwargs.value = JSON.stringify(fields.values());
  }

  function showKind(kind) {
    for (const el of $$("[data-kind]", form)) el.hidden = el.dataset.kind !== kind;
  }

  function startEdit(s) {
    editing = {queue: s.queue, name: s.name};
    form.name.value = s.name; form.name.disabled = true;
    form.queue.value = s.queue; form.queue.disabled = true;
    form.task.value = s.task;
    form.args.value = JSON.stringify(s.args); form.kwargs.value = JSON.stringify(s.kwargs);
    renderFields(s.task, s.args, s.kwargs);
    rawEdited = s.args.length > fields.count(s.task);  // more than the fields say
    form.kind.value = s.cron ? "cron" : "every";
    form.every_s.value = s.every_s ?? ""; form.cron.value = s.cron ?? ""; form.tz.value = s.tz;
    form.skip_if_running.checked = s.skip_if_running; form.paused.checked = s.paused;
    form.repeat_limit.value = s.repeat_limit ?? "";
    showKind(form.kind.value);
    $("#editor h2").textContent = `Edit ${s.queue}/${s.name}`;
    $("#schedule-form button[type=submit]").textContent = "Save";
    $("[data-action=cancel-edit]", form).hidden = false;
    $("#editor").scrollIntoView();
  }

  function stopEdit() {
    editing = null;
    clearErrors();
    form.reset();
    form.name.disabled = form.queue.disabled = false;
    form.tz.value = browserZone;
    renderFields(form.task.value);
    showKind("every");
    $("#editor h2").textContent = "New schedule";
    $("#schedule-form button[type=submit]").textContent = "Create";
    $("[data-action=cancel-edit]", form).hidden = true;
  }

  function parsed(field, kind) {
    let value;
    try { value = JSON.parse(form[field].value || (kind === "list" ? "[]" : "{}")); } catch (error) { throw new Error(`${field}: not JSON (${error.message})`); }
    if (kind === "list" ? !Array.isArray(value) : (value === null || typeof value !== "object" || Array.isArray(value))) throw new Error(`${field} must be a JSON ${kind}`);
    return value;
  }

  function definition() {
    if (!rawEdited) syncRaw();
    const cron = form.kind.value === "cron";
    return {task: form.task.value, args: parsed("args", "list"), kwargs: parsed("kwargs", "object"),
      every_s: cron ? null : Number(form.every_s.value), cron: cron ? form.cron.value : null,
      tz: cron ? form.tz.value || "UTC" : "UTC", skip_if_running: form.skip_if_running.checked, paused: form.paused.checked,
      repeat_limit: form.repeat_limit.value ? Number(form.repeat_limit.value) : null};
  }

  // The input a refusal is about: the one a validation error names, else the one its words
  // name (the engine's ConfigError says "invalid cron expression: ...", "unknown time zone: ...").
  const FIELD_WORDS = [[/cron expression/i, "cron"], [/time zone/i, "tz"], [/\bevery_s\b/, "every_s"],
    [/\brepeat_limit\b/, "repeat_limit"], [/already has a schedule named/, "name"], [/^queue names/, "queue"]];
  function fieldOf(error) {
    const named = error.field && form.elements[error.field] ? error.field : null;
    return named ?? FIELD_WORDS.find(([words]) => words.test(error.reason ?? ""))?.[1] ?? null;
  }
  function clearErrors() {
    $("#form-error").textContent = "";
    for (const el of $$(".field-error", form)) el.remove();
    for (const el of $$("[aria-invalid]", form)) el.removeAttribute("aria-invalid");
  }
  // Say why the form was refused: the reason alone (never the HTTP status), at its field when
  // one is shown, else under the form.
  function refused(error) {
    const reason = error.reason ?? error.message;
    const input = form.elements[fieldOf(error) ?? ""];
    if (!input?.closest || input.closest("[hidden]")) { $("#form-error").textContent = reason; return; }
    const note = document.createElement("small");
    Object.assign(note, {className: "error field-error", textContent: reason, id: `${input.name}-error`});
    note.setAttribute("role", "alert");
    input.after(note);
    input.setAttribute("aria-invalid", "true");
    input.setAttribute("aria-describedby", note.id);
    input.focus();
  }

  async function save(event) {
    event.preventDefault();
    clearErrors();
    try {
      const body = definition();
      if (editing) {
        await api(path(editing), {method: "PUT", body});
        say(`saved ${editing.queue}/${editing.name}`);
      } else {
        body.name = form.name.value;
        if (form.queue.value) body.queue = form.queue.value;
        const made = await api("/schedules", {method: "POST", body});
        say(`created ${made.queue}/${made.name}`);
      }
      stopEdit();
      load();
    } catch (error) {
      refused(error);
    }
  }

  async function act(action, s) {
    if (action === "edit") return startEdit(s);
    if (action === "delete" && !await ask(`Delete schedule ${s.queue}/${s.name}?`, {confirm: "Delete", danger: true, detail: "Jobs it submitted stay."})) return;
    const [method, suffix] = {pause: ["POST", "/pause"], resume: ["POST", "/resume"], run: ["POST", "/run"], delete: ["DELETE", ""]}[action];
    try {
      const answer = await api(path(s, suffix), {method});
      say(action === "run" ? `submitted job ${answer.id}` : `${action}: ${s.queue}/${s.name}`);
    } catch (error) {
      say(`${action} failed: ${error.reason ?? error.message}`, true);
    }
    load();
  }

  $("#schedules tbody").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-action]");
    if (!button) return;
    const key = button.closest("tr").dataset.key;
    const s = shown.find((x) => `${x.queue}/${x.name}` === key);
    if (s) act(button.dataset.action, s);
  });
  form.addEventListener("submit", save);
  form.kind.addEventListener("change", () => showKind(form.kind.value));
  form.tz.value = browserZone;
  form.task.addEventListener("change", () => { renderFields(form.task.value); syncRaw(); });
  box.addEventListener("input", () => {
    rawEdited = false;
    try { syncRaw(); $("#args-hint").textContent = ""; } catch (error) { $("#args-hint").textContent = error.message; }
  });
  for (const raw of [form.args, form.kwargs]) raw.addEventListener("input", () => { rawEdited = true; });
  $("[data-action=cancel-edit]", form).addEventListener("click", stopEdit);

  hideForbidden();
  if (may("change_queue")) {
    $("#editor").hidden = false;
    api("/tasks").then((tasks) => {
      fields.setTasks(tasks);
      form.task.innerHTML = tasks.map((t) => `<option value="${esc(t.name)}">${esc(t.name)}</option>`).join("");
      renderFields(form.task.value);
      syncRaw();
    }).catch((error) => { $("#form-error").textContent = `could not load tasks: ${error.message}`; });
  }
  document.addEventListener("jobsite:zone", load);
  load();
})();
