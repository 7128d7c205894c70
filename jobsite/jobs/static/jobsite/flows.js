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

  // A flow's jobs, parents first (the API's order): each names its parents by task, says
  // when it ended because a parent did, and which end of its parents runs it (not success).
  const DEAD = new Set(["failed", "cancelled", "stalled", "dropped", "expired"]);
  const RUNS_ON = {failure: "runs if a parent fails", end: "runs whatever its parents end in"};
  function jobsRow(flow) {
    const byId = Object.fromEntries(flow.graph.map((node) => [node.id, node]));
    const parent = (id) => (byId[id] ? `${esc(byId[id].task)} <small>${esc(id.slice(0, 8))}…</small>` : esc(id));
    const items = flow.graph.map((node) => {
      const deadParent = DEAD.has(node.state) && node.parents.some((p) => byId[p] && DEAD.has(byId[p].state));
      return `<li data-job="${esc(node.id)}"><code>${esc(node.task)}</code> <a href="${esc(jobPage(node.id))}"><small>${esc(node.id)}</small></a>
      <span class="state state-${esc(node.state)}">${esc(window.jobsite.stateWord(node.state))}</span>${deadParent ? ` <small class="because-parent">because a parent ended ${esc(node.parents.map((p) => byId[p] && byId[p].state).filter(Boolean)[0])}</small>` : ""}
      ${node.parents.length ? `<small>after ${node.parents.map(parent).join(", ")}</small>` : ""}${RUNS_ON[node.runs_on] ? ` <small class="runs-on">${RUNS_ON[node.runs_on]}</small>` : ""}</li>`;
    }).join("");
    return `<tr class="flow-jobs" data-jobs-of="${esc(flow.flow_id)}"><td colspan="7"><ol>${items}</ol></td></tr>`;
  }

  function row(f, i) {
    return `<tr data-index="${i}" data-flow="${esc(f.flow_id)}"><td data-label="flow"><code>${esc(f.flow_id)}</code></td><td data-label="name">${esc(f.name || "–")}</td><td data-label="queue">${esc(f.queue)}</td>
      <td class="count" data-label="jobs">${f.jobs}</td><td class="states" data-label="states">${states(f.states)}</td><td data-label="submitted">${esc(time(f.submitted_at))}</td>
      <td><button data-act="toggle">${open.has(f.flow_id) ? "Hide" : "Jobs"}</button></td></tr>`;
  }

  async function load() {
    clearTimeout(timer);
    try {
      const query = new URLSearchParams();
      for (const key of ["queue", "name"]) {
        const value = $(`#filters [name=${key}]`).value.trim();
        if (value) query.set(key, value);
      }
      flows = await api(`/flows${query.size ? `?${query}` : ""}`);
      const details = await Promise.all(flows.filter((f) => open.has(f.flow_id)).map((f) => api(`/flows/${encodeURIComponent(f.flow_id)}`)));
      const byId = Object.fromEntries(details.map((d) => [d.flow_id, d]));
      $("#flow-list tbody").innerHTML = flows.map((f, i) => row(f, i) + (byId[f.flow_id] ? jobsRow(byId[f.flow_id]) : "")).join("")
        || `<tr><td colspan="7">no flows</td></tr>`;
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
