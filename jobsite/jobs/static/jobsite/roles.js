// The roles page: every worker role with its queues and the live workers following it,
// refreshed every 3 seconds; roles are created, changed and deleted through the API.
(() => {
  "use strict";
  const {$, esc, seg, api, config, hideForbidden, ask, toast} = window.jobsite;
  const form = $("#role-form");
  let timer;

  function row(role) {
    const workers = role.workers.length ? role.workers.map((w) => `<code>${esc(w)}</code>`).join(", ") : "none";
    return `<tr data-role="${esc(role.name)}"><td data-label="role"><b>${esc(role.name)}</b></td>
      <td class="queues" data-label="queues (claim order)">${role.queues.map((q) => `<code>${esc(q)}</code>`).join(" → ")}</td>
      <td class="workers" data-label="workers following it">${workers}</td>
      <td data-label="changed">${esc(window.jobsite.time(role.changed_at))}</td>
      <td><button data-action="edit" data-needs="change_queue">Edit</button>
        <button data-action="delete" data-needs="change_queue" class="danger">Delete</button></td></tr>`;
  }

  async function load() {
    clearTimeout(timer);
    try {
      const roles = await api("/roles");
      const body = $("#role-list tbody");
      body.innerHTML = roles.map(row).join("");
      hideForbidden(body);
      $("#roles .empty").hidden = roles.length > 0;
      window.jobsite.loaded(null);
    } catch (error) {
      window.jobsite.loaded(error);
    }
    timer = setTimeout(load, 3000);
  }

  $("#role-list").addEventListener("click", async (event) => {
    const button = event.target.closest("button[data-action]");
    if (!button) return;
    const name = button.closest("tr").dataset.role;
    if (button.dataset.action === "edit") {
      const role = await api(`/roles/${seg(name)}`);
      form.elements.name.value = role.name;
      form.elements.queues.value = role.queues.join(", ");
      form.elements.queues.focus();
      return;
    }
    if (!await ask(`Delete role ${name}?`, {confirm: "Delete", danger: true,
      detail: "Its running workers keep their last queues until they restart."})) return;
    try {
      await api(`/roles/${seg(name)}`, {method: "DELETE"});
      toast(`Role ${name} deleted.`, "ok");
    } catch (error) {
      toast(`Role ${name} not deleted: ${error.message}`, "error");
    }
    load();
  });

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const name = form.elements.name.value.trim();
    const queues = form.elements.queues.value.split(",").map((q) => q.trim()).filter(Boolean);
    try {
      const role = await api(`/roles/${seg(name)}`, {method: "PUT", body: {queues}});
      $(".error", form).textContent = "";
      form.reset();
      const n = role.workers.length;
      const following = n ? ` ${window.jobsite.plural(n, "worker")} ${n === 1 ? "follows" : "follow"} it within a second.` : "";
      toast(`Role ${role.name} saved: ${role.queues.join(", ")}.${following}`, "ok");
      // Saved all the same (its workers may start later), but said: "no worker serves: x, y".
      if (role.warning) toast(`Role ${role.name}: ${role.warning}.`, "info", 0);
      load();
    } catch (error) {
      $(".error", form).textContent = error.reason ?? error.message;
    }
  });

  if (!config.may.change_queue) hideForbidden();
  document.addEventListener("jobsite:zone", load);
  load();
})();
