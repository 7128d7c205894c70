// The queues page: each queue's counts, pause state, rate limit, cap on running jobs and
// concurrency keys, refreshed every 3 seconds; pause, resume and the limits are set through the API.
(() => {
  "use strict";
  const {$, $$, esc, seg, api, config, hideForbidden, ask, toast, plural} = window.jobsite;
  const vocabulary = config.vocabulary;
  // Columns in the words every page uses (the vocabulary's labels): live states, the waiting jobs
  // held back (a concurrency key's turn, a version no worker serves), dead letters, totals ended.
  const word = window.jobsite.stateWord;
  const columns = [
    ...vocabulary.live.map((s) => [word(s), s]),
    ["waiting their key's turn", "waiting_turn"],
    ["waiting for their version", "waiting_version"],
    ["dead letters", "dlq"],
    ...vocabulary.terminal.map((s) => [`${word(s)} (total)`, `${s}_total`]),
  ];
  const cards = new Map();
  let timer;

  function card(name) {
    if (cards.has(name)) return cards.get(name);
    const node = $("#queue-card").content.firstElementChild.cloneNode(true);
    node.dataset.queue = name;
    node.id = `queue-${name}`;  // the target of links to this queue (why a job waits)
    $(".name", node).textContent = name;
    $(".counts thead tr", node).innerHTML = columns.map(([label]) => `<th>${esc(label)}</th>`).join("");
    hideForbidden(node);
    node.addEventListener("click", (event) => {
      const button = event.target.closest("button[data-action]");
      if (button) act(name, button.dataset.action);
    });
    $("form.cap", node).addEventListener("submit", (event) => {
      event.preventDefault();
      const most = $("input[name=max_running]", node).value.trim();
      setLimit(name, "max_running", most ? Number(most) : null);
    });
    $("form.rate", node).addEventListener("submit", (event) => {
      event.preventDefault();
      setRate(name, $("input[name=rate_limit]", node).value.trim() || null);
    });
    $("form.clear select", node).innerHTML = vocabulary.terminal
      .map((s) => `<option value="${esc(s)}">${esc(word(s))}</option>`).join("");
    $("form.clear", node).addEventListener("submit", (event) => {
      event.preventDefault();
      clear(name, $("form.clear select", node).value);
    });
    $("#queue-list").append(node);
    cards.set(name, node);
    return node;
  }

  function render(queue) {
    const node = card(queue.name);
    $(".paused-state", node).textContent = queue.paused ? "paused" : "running";
    $(".paused-state", node).className = `paused-state ${queue.paused ? "state-failed" : "state-completed"}`;
    if (config.may.change_queue) {
      $("[data-action=pause]", node).hidden = queue.paused;
      $("[data-action=resume]", node).hidden = !queue.paused;
    }
    $(".counts tbody tr", node).innerHTML = columns.map(([label, key]) => `<td data-label="${esc(label)}">${queue.counts[key] ?? 0}</td>`).join("");
    const rate = queue.rate_limit;
    $(".rate-now", node).textContent = rate ? `${rate.per_s} per second (one start every ${rate.interval_ms} ms)` : "none";
    $(".cap-now", node).textContent = queue.max_running ? `${queue.max_running} at once` : "none";
    renderDrain(node, queue.drain);
    renderGap(node, queue.history_gap);
    $(".keys tbody", node).innerHTML = queue.concurrency_keys.map((k) => `<tr data-key="${esc(k.key)}">
      <td data-label="key"><code>${esc(k.key)}</code></td><td data-label="waiting">${k.waiting}</td><td data-label="running">${k.active}</td></tr>`).join("")
      || `<tr><td colspan="3">no job waits for its key's turn</td></tr>`;
  }

  // Events the engine had to trim before the history's mirror read them (its hard cap was
  // reached): how many, the jobs rebuilt from Redis and those lost to the history for good.
  function renderGap(node, gap) {
    const line = $(".history-gap", node);
    line.hidden = !gap || !gap.entries;
    if (!line.hidden) {
      line.textContent = `history gap: ${gap.entries} events trimmed before the mirror read them; ` +
        `${gap.rebuilt} jobs rebuilt from Redis, ${gap.lost} without a row`;
    }
  }

  // The queue's last drain (engine/resources/drain.py): running with its progress, or how it ended.
  function renderDrain(node, drain) {
    const line = $(".drain-state", node);
    if (!drain || drain.state === "none") { line.textContent = ""; return; }
    const when = drain.finished_at_ms ? ` at ${window.jobsite.clock(drain.finished_at_ms)}` : "";
    line.textContent = `drain ${drain.state}${when}: ${drain.cancelled} of ${drain.waiting} waiting jobs cancelled (by ${drain.by})${drain.error ? " " + drain.error : ""}`;
    $("[data-action=drain]", node).disabled = drain.state === "running";
  }

  async function load() {
    clearTimeout(timer);
    try {
      const names = (await api("/queues")).map((q) => q.name);
      $("#queue-list .empty").hidden = names.length > 0;
      for (const name of names) {
        const [queue, drain] = await Promise.all([api(`/queues/${seg(name)}`), api(`/queues/${seg(name)}/drain`)]);
        render({...queue, drain});
      }
      window.jobsite.loaded(null);
    } catch (error) {
      window.jobsite.loaded(error);
    }
    timer = setTimeout(load, 3000);
  }

  async function act(name, action) {
    const node = card(name);
    try {
      if (action === "lift") return await setRate(name, null);
      if (action === "uncap") return await setLimit(name, "max_running", null);
      if (action === "drain") {
        if (!await ask(`Drain queue ${name}?`, {confirm: "Drain", danger: true, detail: "Every job waiting in it now is cancelled; jobs enqueued from now on stay."})) return;
        renderDrain(node, await api(`/queues/${seg(name)}/drain`, {method: "POST"}));
        return;
      }
      const detail = action === "pause" ? "Workers start no new job from it until it is resumed; running jobs go on." : "";
      if (!await ask(`${action === "pause" ? "Pause" : "Resume"} queue ${name}?`, {confirm: action === "pause" ? "Pause" : "Resume", detail})) return;
      render(await api(`/queues/${seg(name)}/${action}`, {method: "POST"}).then(() => api(`/queues/${seg(name)}`)));
      $(".error", node).textContent = "";
      toast(`Queue ${name} ${action === "pause" ? "paused" : "resumed"}.`, "ok");
    } catch (error) {
      $(".error", node).textContent = error.message;
    }
  }

  // Clear a finished state's jobs from Redis: counted first, confirmed with the count.
  async function clear(name, state) {
    const path = `/queues/${seg(name)}/clear`;
    const label = word(state);
    try {
      const {count} = await api(path, {method: "POST", body: {state, dry_run: true}});
      if (!count) { toast(`No ${label} job of queue ${name} left in Redis.`); return; }
      const detail = "They are deleted from Redis for good (a batch at a time). The history keeps their rows: it stays the record of what happened. Waiting and running jobs are never touched.";
      if (!await ask(`Clear ${plural(count, `${label} job`)} of queue ${name} from Redis?`, {confirm: "Clear", danger: true, detail})) return;
      const done = await api(path, {method: "POST", body: {state}});
      toast(`Cleared ${plural(done.count, `${label} job`)} of queue ${name} from Redis; the history keeps their rows.`, "ok", 12000);
      load();
    } catch (error) {
      toast(`Clear failed: ${error.message}`, "error");
    }
  }

  // Change one of the queue's limits (the others stay): the rate limit or the cap on running jobs.
  async function setLimit(name, field, value) {
    const node = card(name);
    const form = $(field === "rate_limit" ? "form.rate" : "form.cap", node);
    try {
      render(await api(`/queues/${seg(name)}/limits`, {method: "PUT", body: {[field]: value}}));
      $(".error", form).textContent = "";
      $(`input[name=${field}]`, form).value = "";
    } catch (error) {
      $(".error", form).textContent = error.message;
    }
  }
  const setRate = (name, rate) => setLimit(name, "rate_limit", rate);

  document.addEventListener("jobsite:zone", () => load());
  $$("#queue-list .empty").forEach((el) => { el.hidden = true; });
  load();
})();
