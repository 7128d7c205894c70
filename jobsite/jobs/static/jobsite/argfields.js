// A task's arguments as one input each, from its schema (GET /api/v1/tasks): numbers, booleans,
// text, JSON for the rest; required ones marked. The schedule editor and the Jobs page's submit
// form both build their fields here: `argumentFields(box)` draws them into `box`.
(() => {
  "use strict";
  const {$$, esc} = window.jobsite;

  const kindOf = (spec) => {
    const type = spec.type ?? (spec.anyOf || []).map((x) => x.type).find((t) => t && t !== "null");
    return ["integer", "number", "boolean", "string"].includes(type) ? type : "json";
  };

  function field(name, spec, required) {
    const kind = kindOf(spec);
    const mark = required ? ' <b class="required" title="required">*</b>' : "";
    const title = esc(spec.title || name);
    const note = kind === "json" ? ` <small>(JSON${spec.type ? ` ${esc(spec.type)}` : ""})</small>` : ` <small>(${kind})</small>`;
    const attrs = `name="arg:${esc(name)}" data-arg="${esc(name)}" data-type="${kind}" aria-label="${title}"${required && kind !== "boolean" ? " required" : ""}`;
    const input = kind === "boolean" ? `<input type="checkbox" ${attrs}>`
      : kind === "integer" || kind === "number" ? `<input type="number" step="${kind === "integer" ? "1" : "any"}" ${attrs}>`
      : `<input ${attrs} ${kind === "json" ? "placeholder='JSON, e.g. {\"a\": 1}' size=\"24\"" : ""}>`;
    return `<label data-arg-field="${esc(name)}">${esc(name)}${mark}${note} ${input}</label>`;
  }

  function argumentFields(box) {
    let tasks = [];
    const props = (name) => tasks.find((x) => x.name === name)?.arguments ?? {properties: {}, required: []};
    return {
      // The tasks to draw from, as GET /api/v1/tasks lists them.
      setTasks(list) { tasks = list; },
      // How many parameters the task's schema names.
      count: (name) => Object.keys(props(name).properties || {}).length,
      // One input per parameter of task `name`, filled from `args` (by position) and `kwargs`;
      // returns how many there are.
      render(name, args = [], kwargs = {}) {
        const {properties = {}, required = []} = props(name);
        const names = Object.keys(properties);
        box.innerHTML = names.map((n) => field(n, properties[n], required.includes(n))).join("");
        const values = {...Object.fromEntries(args.map((v, i) => [names[i], v]).filter(([n]) => n)), ...kwargs};
        for (const input of $$("[data-arg]", box)) {
          const value = values[input.dataset.arg];
          if (value === undefined) continue;
          if (input.dataset.type === "boolean") input.checked = Boolean(value);
          else input.value = input.dataset.type === "json" || typeof value === "object" ? JSON.stringify(value) : String(value);
        }
        return names.length;
      },
      // The fields as kwargs (blank ones left out); a field that is not valid raises naming it.
      values() {
        const kwargs = {};
        for (const input of $$("[data-arg]", box)) {
          const {arg, type: kind} = input.dataset;
          if (kind === "boolean") { kwargs[arg] = input.checked; continue; }
          if (input.value.trim() === "") continue;
          if (kind === "integer" || kind === "number") kwargs[arg] = Number(input.value);
          else if (kind === "string") kwargs[arg] = input.value;
          else {
            try { kwargs[arg] = JSON.parse(input.value); } catch (error) { throw new Error(`${arg}: not JSON (${error.message})`); }
          }
        }
        return kwargs;
      },
    };
  }

  window.jobsite.argumentFields = argumentFields;
})();
