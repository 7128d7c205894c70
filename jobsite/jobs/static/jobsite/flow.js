// The job page's flow: parents and children with their states and links, and the whole graph
// drawn as SVG (parents left of their children), redrawn on each `jobsite:job` refresh.
(() => {
  "use strict";
  const {$, esc, seg, api, config, jobPage} = window.jobsite;
  const vocabulary = config.vocabulary;
  const W = 190, H = 46, GAP_X = 60, GAP_Y = 18, PAD = 12;
  let drawn = "";
  let timer;

  // Colour by the vocabulary's named sets, never by a list of states written here.
  function colour(state) {
    if (state === "completed") return "#1e8449";
    if (vocabulary.dead.includes(state)) return "#c0392b";
    if (vocabulary.live.includes(state)) return "#3b7cff";
    return "#8a93a6";
  }

  function nodesOf(job) {
    if (job.flow.length) return job.flow;
    const self = {id: job.id, task: job.task, state: job.state, parents: job.parents.map((p) => p.id)};
    return [...job.parents.map((p) => ({...p, parents: []})), self, ...job.children];
  }

  // Depth of each node: 0 without parents in the graph, else one more than its deepest parent.
  function layout(nodes) {
    const byId = new Map(nodes.map((n) => [n.id, n]));
    const depth = new Map();
    const visit = (n, seen = new Set()) => {
      if (depth.has(n.id)) return depth.get(n.id);
      if (seen.has(n.id)) return 0;  // never loops, even on bad data
      seen.add(n.id);
      const parents = n.parents.filter((p) => byId.has(p)).map((p) => visit(byId.get(p), seen));
      const d = parents.length ? Math.max(...parents) + 1 : 0;
      depth.set(n.id, d);
      return d;
    };
    nodes.forEach((n) => visit(n));
    const rows = new Map();
    const at = new Map();
    for (const n of nodes) {
      const d = depth.get(n.id);
      const row = rows.get(d) ?? 0;
      rows.set(d, row + 1);
      at.set(n.id, {x: PAD + d * (W + GAP_X), y: PAD + row * (H + GAP_Y)});
    }
    const width = PAD * 2 + (Math.max(...depth.values()) + 1) * (W + GAP_X) - GAP_X;
    const height = PAD * 2 + Math.max(...rows.values()) * (H + GAP_Y) - GAP_Y;
    return {at, width, height};
  }

  function svg(job, nodes) {
    const {at, width, height} = layout(nodes);
    const edges = nodes.flatMap((n) => n.parents.filter((p) => at.has(p)).map((p) => {
      const a = at.get(p), b = at.get(n.id);
      const [x1, y1, x2, y2] = [a.x + W, a.y + H / 2, b.x, b.y + H / 2];
      return `<path class="edge" data-from="${esc(p)}" data-to="${esc(n.id)}" d="M${x1},${y1} C${x1 + GAP_X / 2},${y1} ${x2 - GAP_X / 2},${y2} ${x2 - 4},${y2}"
        fill="none" stroke="#8a93a6" stroke-width="1.5" marker-end="url(#flow-arrow)"/>`;
    }));
    const boxes = nodes.map((n) => {
      const {x, y} = at.get(n.id);
      const me = n.id === job.id;
      return `<a class="node" href="${esc(jobPage(n.id))}" data-id="${esc(n.id)}" data-state="${esc(n.state)}">
        <title>${esc(n.id)}</title>
        <rect x="${x}" y="${y}" width="${W}" height="${H}" rx="6" fill="${me ? "#eef3ff" : "#fff"}"
          stroke="${colour(n.state)}" stroke-width="${me ? 3 : 1.5}"/>
        <text x="${x + 8}" y="${y + 18}" font-size="12" fill="#1d2330">${esc(n.task.length > 26 ? `…${n.task.slice(-25)}` : n.task)}</text>
        <text x="${x + 8}" y="${y + 36}" font-size="12" font-weight="600" fill="${colour(n.state)}">${esc(window.jobsite.stateWord(n.state))}</text></a>`;
    });
    return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}"
      role="img" aria-label="the flow of job ${esc(job.id)}">
      <defs><marker id="flow-arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="8" markerHeight="8" orient="auto">
        <path d="M0,0 L8,4 L0,8 z" fill="#8a93a6"/></marker></defs>${edges.join("")}${boxes.join("")}</svg>`;
  }

  function links(title, jobs) {
    if (!jobs.length) return "";
    return `<b>${title}:</b> ${jobs.map((j) => `<a href="${esc(jobPage(j.id))}" data-related="${esc(title)}">${esc(j.task)}</a>
      <span class="state state-${esc(j.state)}">${esc(j.state)}</span>`).join(", ")} `;
  }

  // job.js stops refreshing once its job ended; while others of the flow are live, keep the
  // graph's states current on our own.
  function follow(job, nodes) {
    clearTimeout(timer);
    if (vocabulary.live.includes(job.state) || !nodes.some((n) => vocabulary.live.includes(n.state))) return;
    timer = setTimeout(async () => {
      try { render(await api(`/jobs/${seg(job.id)}`)); } catch { follow(job, nodes); }
    }, 2000);
  }

  document.addEventListener("jobsite:job", (event) => render(event.detail));

  function render(job) {
    const section = $("#flow");
    const nodes = nodesOf(job);
    if (nodes.length < 2) { section.hidden = true; return; }
    const key = JSON.stringify(nodes);
    follow(job, nodes);
    if (key === drawn) return;
    drawn = key;
    section.hidden = false;
    $("h2", section).textContent = job.flow_id ? `Flow ${job.flow_id} (${nodes.length} jobs)` : "Parents and children";
    $(".lists", section).innerHTML = links("parents", job.parents) + links("children", job.children);
    $(".graph", section).innerHTML = svg(job, nodes);
  }
})();
