// "Why isn't my job running?": the reasons a waiting job waits, each linking to its fix.
(() => {
  "use strict";
  const {$, esc} = window.jobsite;
  document.addEventListener("jobsite:job", (event) => {
    const reasons = event.detail.waiting || [];
    const section = $("#waiting");
    section.hidden = !reasons.length;
    $("#waiting ol").innerHTML = reasons.map((r) => `<li data-code="${esc(r.code)}">${esc(r.message)}
      ${r.link ? `<a href="${esc(r.link)}">change</a>` : ""}</li>`).join("");
  });
})();
