// The Jobs page's submit form (for users who may submit): a registered task, its arguments as
// one field each from its schema (argfields.js), and a queue, delay and priority when given;
// sent as POST /api/v1/jobs, so it is checked as any submission (types, queue, permission).
(() => {
  "use strict";
  const {$, esc, api, may, toast, jobPage} = window.jobsite;
  const section = $("#submit");
  const form = $("#submit-form");
  if (!section || !may("submit")) return;
  const fields = window.jobsite.argumentFields($("#submit-args .fields"));
  const error = $(".error", form);

  function show(name) {
    $("#submit-args .task-name").textContent = name || "";
    $("#submit-args .empty").hidden = fields.render(name) > 0;
  }

  form.task.addEventListener("change", () => show(form.task.value));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.textContent = "";
    let body;
    try {
      body = {task: form.task.value, kwargs: fields.values()};
    } catch (invalid) { error.textContent = invalid.message; return; }
    if (form.queue.value.trim()) body.queue = form.queue.value.trim();
    if (form.delay_s.value !== "") body.delay_s = Number(form.delay_s.value);
    if (form.priority.value !== "") body.priority = Number(form.priority.value);
    try {
      const job = await api("/jobs", {method: "POST", body});
      const note = toast(`Submitted job ${job.id}: `, "ok", 15000);
      const link = document.createElement("a");
      Object.assign(link, {href: jobPage(job.id), textContent: "open it"});
      note.querySelector("span").append(link);
      document.dispatchEvent(new CustomEvent("jobsite:acted"));
    } catch (failed) { error.textContent = failed.reason || failed.message; }
  });

  api("/tasks").then((tasks) => {
    fields.setTasks(tasks);
    form.task.innerHTML = tasks.map((t) => `<option value="${esc(t.name)}">${esc(t.name)}</option>`).join("");
    show(form.task.value);
  }).catch((failed) => { error.textContent = `could not load tasks: ${failed.message}`; });
})();
