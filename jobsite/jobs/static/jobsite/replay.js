// The job page's replays: links both ways, and a form to replay the job with edited arguments.
// Filled from the `jobsite:job` event job.js fires on every refresh (detail: GET /jobs/{id}).
(() => {
  "use strict";
  const {$, esc, seg, config, api, may, jobPage, hideForbidden} = window.jobsite;
  const section = $("#replay");
  const form = $("form", section);
  const text = $("#replay-arguments");
  const message = $(".message", section);
  let edited = false;  // once the user types, refreshes leave the textarea alone

  const link = (id) => `<a href="${esc(jobPage(id))}"><code>${esc(id)}</code></a>`;

  document.addEventListener("jobsite:job", (event) => {
    const job = event.detail;
    const parts = [];
    if (job.replay_of) parts.push(`Replay of ${link(job.replay_of)}.`);
    if (job.replays?.length) parts.push(`Replayed as ${job.replays.map(link).join(", ")}.`);
    $(".links", section).innerHTML = parts.join(" ") || "Not a replay, and not replayed yet.";
    if (!edited) text.value = JSON.stringify({args: job.args, kwargs: job.kwargs}, null, 2);
    // No replay of a task no worker has (the API answers 422); job.js shows the reason.
    form.hidden = Boolean(job.cannot_run) || !may("retry");
  });
  text.addEventListener("input", () => { edited = true; });

  // Read the textarea: an object with an `args` list and a `kwargs` object (either may be left out).
  function parse() {
    let value;
    try { value = JSON.parse(text.value); } catch (error) { throw new Error(`not JSON: ${error.message}`); }
    if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Error('give an object: {"args": [...], "kwargs": {...}}');
    const extra = Object.keys(value).filter((k) => k !== "args" && k !== "kwargs");
    if (extra.length) throw new Error(`unknown keys: ${extra.join(", ")}`);
    return value;
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    let body;
    try { body = parse(); } catch (error) { message.textContent = error.message; return; }
    message.textContent = "submitting…";
    try {
      const job = await api(`/jobs/${seg(config.job_id)}/replay`, {method: "POST", body});
      message.innerHTML = `submitted as ${link(job.id)}`;
      window.location.assign(jobPage(job.id));
    } catch (error) {
      message.textContent = `refused: ${error.message}`;
    }
  });
  hideForbidden(section);
})();
