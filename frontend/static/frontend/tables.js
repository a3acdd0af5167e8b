// Sorting, filtering and pagination for every console table (class "data"): click a
// header to sort (numbers, dates and text; a cell's data-sort wins), type to filter, and
// page through 25 rows at a time. Works on server-rendered rows and on rows the live
// code re-renders (it listens for "cp:table-updated").
(function () {
  "use strict";
  const PAGE = 25;
  function key(cell) {
    if (!cell) return "";
    const raw = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
    const n = Number(String(raw).replace(/[$,%\s]/g, ""));
    if (raw !== "" && !isNaN(n)) return n;
    const t = Date.parse(raw);
    if (/^\d{4}-\d\d-\d\d/.test(raw) && !isNaN(t)) return t;
    return String(raw).toLowerCase();
  }
  function enhance(table, index) {
    if (table.dataset.enhanced) return;
    table.dataset.enhanced = "1";
    const body = table.tBodies[0];
    if (!body) return;
    const st = { col: -1, dir: 1, filter: "", page: 0 };
    const bar = document.createElement("div");
    bar.className = "table-tools";
    const id = "filter-" + (table.id || "t" + index);
    const label = document.createElement("label"); label.htmlFor = id; label.className = "sr-only"; label.textContent = "Filter rows";
    const input = document.createElement("input"); input.type = "search"; input.id = id; input.placeholder = "Filter…";
    const pager = document.createElement("span"); pager.className = "pager";
    bar.append(label, input, pager);
    table.parentNode.insertBefore(bar, table);
    const heads = table.tHead ? [...table.tHead.rows[0].cells] : [];
    heads.forEach((th, col) => {
      const text = th.textContent;
      if (!text.trim() || th.dataset.nosort !== undefined) return;
      const b = document.createElement("button"); b.type = "button"; b.className = "sort"; b.textContent = text;
      th.replaceChildren(b); th.setAttribute("aria-sort", "none");
      b.addEventListener("click", () => {
        st.dir = st.col === col ? -st.dir : 1; st.col = col;
        heads.forEach((h) => h.setAttribute("aria-sort", "none"));
        th.setAttribute("aria-sort", st.dir > 0 ? "ascending" : "descending");
        apply();
      });
    });
    input.addEventListener("input", () => { st.filter = input.value.toLowerCase(); st.page = 0; apply(); });
    function apply() {
      const rows = [...body.rows].filter((r) => !r.classList.contains("empty") && r.cells.length > 1);
      if (st.col >= 0) {
        rows.sort((a, b) => { const x = key(a.cells[st.col]), y = key(b.cells[st.col]); return (x > y ? 1 : x < y ? -1 : 0) * st.dir; });
        rows.forEach((r) => body.appendChild(r));
      }
      const shown = rows.filter((r) => !st.filter || r.textContent.toLowerCase().includes(st.filter));
      const pages = Math.max(1, Math.ceil(shown.length / PAGE));
      st.page = Math.min(st.page, pages - 1);
      rows.forEach((r) => { r.hidden = true; });
      shown.slice(st.page * PAGE, (st.page + 1) * PAGE).forEach((r) => { r.hidden = false; });
      pager.replaceChildren();
      bar.hidden = rows.length <= 5 && !st.filter;
      if (pages > 1) {
        const prev = document.createElement("button"); prev.type = "button"; prev.textContent = "‹ prev"; prev.disabled = st.page === 0;
        const next = document.createElement("button"); next.type = "button"; next.textContent = "next ›"; next.disabled = st.page >= pages - 1;
        prev.addEventListener("click", () => { st.page -= 1; apply(); });
        next.addEventListener("click", () => { st.page += 1; apply(); });
        pager.append(prev, document.createTextNode(` page ${st.page + 1} of ${pages} (${shown.length} rows) `), next);
      } else if (st.filter) pager.textContent = `${shown.length} row(s)`;
    }
    table.cpApply = apply;
    apply();
  }
  function all() { document.querySelectorAll("table.data").forEach((t, i) => { enhance(t, i); if (t.cpApply) t.cpApply(); }); }
  document.addEventListener("DOMContentLoaded", all);
  document.addEventListener("cp:table-updated", all);
})();
