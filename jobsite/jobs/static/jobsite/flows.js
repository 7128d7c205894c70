// The flow list (GET /flows): newest first, jobs per state; a row opens to its jobs (GET /flows/{id}).
(() => {
  "use strict";
  const {$, esc, api, jobPage} = window.jobsite;
  const {time, plural, loaded} = window.jobsite;
  let flows = [];
  const open = new Set();  // flow ids shown opened, kept across refreshes
  let timer;

  const states = (counts) => Object.entries(counts).map(([state, n]) =>
    `<span class="state state-${esc(state)}">${esc(state)} ${n}</span>`).join(" ");

  function jobsRow(flow) {
    const items = flow.graph.map((node) => `<li data-job="${esc(node.id)}"><a href="${esc(jobPage(node.id))}">${esc(node.id)}</a>
      <code>${esc(node.task)}</code> <span class="state state-${esc(node.state)}">${esc(node.state)}</span>
      ${node.parents.length ? `<small>after ${node.parents.map(esc).join(", ")}</small>` : ""}</li>`).join("");
    return `<tr class="flow-jobs" data-jobs-of="${esc(flow.flow_id)}"><td colspan="6"><ol>${items}</ol></td></tr>`;
  }

  function row(f, i) {
    return `<tr data-index="${i}" data-flow="${esc(f.flow_id)}"><td data-label="flow"><code>${esc(f.flow_id)}</code></td><td data-label="queue">${esc(f.queue)}</td>
      <td class="count" data-label="jobs">${f.jobs}</td><td class="states" data-label="states">${states(f.states)}</td><td data-label="submitted">${esc(time(f.submitted_at))}</td>
      <td><button data-act="toggle">${open.has(f.flow_id) ? "Hide" : "Jobs"}</button></td></tr>`;
  }

  async function load() {
    clearTimeout(timer);
    try {
      const queue = $("#filters [name=queue]").value.trim();
      flows = await api(`/flows${queue ? `?queue=${encodeURIComponent(queue)}` : ""}`);
      const details = await Promise.all(flows.filter((f) => open.has(f.flow_id)).map((f) => api(`/flows/${encodeURIComponent(f.flow_id)}`)));
      const byId = Object.fromEntries(details.map((d) => [d.flow_id, d]));
      $("#flow-list tbody").innerHTML = flows.map((f, i) => row(f, i) + (byId[f.flow_id] ? jobsRow(byId[f.flow_id]) : "")).join("")
        || `<tr><td colspan="6">no flows</td></tr>`;
      $("#flow-count").textContent = `${plural(flows.length, "flow")} shown`;
      loaded(null);
    } catch (error) {
      loaded(error);
    }
    timer = setTimeout(load, 5000);
  }

  $("#flow-list").addEventListener("click", (event) => {
    const button = event.target.closest("button[data-act=toggle]");
    if (!button) return;
    const id = flows[Number(button.closest("tr").dataset.index)].flow_id;
    if (open.has(id)) open.delete(id); else open.add(id);
    load();
  });
  $("#filters").addEventListener("submit", (event) => { event.preventDefault(); load(); });
  document.addEventListener("jobsite:zone", load);
  load();
})();
