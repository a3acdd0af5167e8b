// Cacheplane console: live updates over the WebSocket, REST re-fetch on (re)connect,
// countdowns, charts on a real time axis (Chart.js + date-fns adapter, both from npm),
// confirmations and copy buttons for the server-rendered forms. No inline script anywhere
// (the CSP forbids it): page data arrives through a json_script block.
(function () {
  "use strict";
  const page = document.getElementById("page");
  const kind = page ? page.dataset.page : null;
  const dataEl = document.getElementById("page-data");
  const initial = dataEl ? JSON.parse(dataEl.textContent) : null;
  const state = { chart: null, spendChart: null, kvChart: null, range: "live", live: { requests: 0 } };
  const LIVE_KEEP_MS = 10 * 60 * 1000;
  const KV_KEEP_MS = 30 * 60 * 1000;

  function csrfToken() {
    const m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }
  function toast(text, bad) {
    const el = document.getElementById("toast");
    if (!el) return;
    el.textContent = text;
    el.className = "toast show" + (bad ? " bad" : "");
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { el.className = "toast"; }, 4000);
  }
  function setText(id, text) { const el = document.getElementById(id); if (el) el.textContent = text; }
  function usd(v) {  // as the server's |usd filter: 4 places below $1, thousands separated
    const n = Number(v || 0), places = n !== 0 && Math.abs(n) < 1 ? 4 : 2;
    return "$" + n.toLocaleString("en-US", {minimumFractionDigits: places, maximumFractionDigits: places});
  }
  function money(v) {  // axis ticks: "$0.00012", "$1.5", never "1.2E-4"
    const n = Number(v || 0);
    if (n === 0) return "$0";
    if (Math.abs(n) >= 1) return "$" + n.toFixed(2);
    const digits = Math.min(10, Math.max(2, 1 - Math.floor(Math.log10(Math.abs(n)))));
    return "$" + n.toFixed(digits);
  }
  function pct(v) { return v === null || v === undefined ? "—" : Math.round(v * 100) + " %"; }
  async function getJSON(url) {
    const r = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!r.ok) throw new Error(url + " → " + r.status);
    return r.json();
  }
  async function postJSON(url, body) {
    const r = await fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify(body),
    });
    return [r.ok, await r.json().catch(() => ({}))];
  }
  function humanTime(iso) {
    const d = new Date(iso);
    if (isNaN(d)) return "—";
    const s = Math.round((d - Date.now()) / 1000), a = Math.abs(s);
    let text;
    if (a < 45) text = s > 0 ? "in a few seconds" : "just now";
    else {
      const [n, u] = a < 3600 ? [Math.round(a / 60), "min"] : a < 86400 ? [Math.round(a / 3600), "h"] : [Math.round(a / 86400), "d"];
      text = s > 0 ? `in ${n} ${u}` : `${n} ${u} ago`;
    }
    return text;
  }
  function timeEl(iso) {
    const t = document.createElement("time");
    t.dateTime = iso;
    t.title = new Date(iso).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
    t.textContent = humanTime(iso);
    return t;
  }
  function stored(key, keepMs) {
    try {
      const items = JSON.parse(sessionStorage.getItem(key) || "[]");
      const cutoff = Date.now() - keepMs;
      return items.filter((p) => p.t >= cutoff);
    } catch (e) { return []; }
  }
  function store(key, items) { try { sessionStorage.setItem(key, JSON.stringify(items)); } catch (e) { /* full */ } }

  // --- Forms: tenant switcher, confirmations, copy buttons ---------------------------
  const switcher = document.getElementById("tenant-switcher");
  if (switcher) switcher.addEventListener("change", () => { if (switcher.value) location.href = "/t/" + encodeURIComponent(switcher.value) + "/"; });
  document.addEventListener("submit", (e) => {
    const button = e.submitter;
    const message = button && button.dataset.confirm;
    if (message && !window.confirm(message)) e.preventDefault();
  });
  document.querySelectorAll("button[data-copy]").forEach((b) => {
    b.addEventListener("click", async () => {
      const input = document.getElementById(b.dataset.copy);
      input.select();
      try { await navigator.clipboard.writeText(input.value); toast("Copied."); } catch (e) { toast("Press Ctrl+C to copy."); }
    });
  });

  // --- Countdowns and relative times -------------------------------------------------
  function tickCountdowns() {
    const now = Date.now();
    document.querySelectorAll(".countdown").forEach((el) => {
      const iso = el.dataset.expire;
      if (!iso) { el.textContent = "—"; return; }
      const s = Math.round((Date.parse(iso) - now) / 1000);
      if (s <= 0) { el.textContent = "expiring"; return; }
      const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
      el.textContent = (h ? h + "h " : "") + (h || m ? m + "m " : "") + sec + "s";
      el.title = new Date(iso).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
    });
  }
  setInterval(tickCountdowns, 1000);
  setInterval(() => document.querySelectorAll("time[datetime]").forEach((t) => { t.textContent = humanTime(t.dateTime); }), 30000);

  // --- Charts ------------------------------------------------------------------------
  // A Grafana-like time picker: named ranges, a custom from/to, drag on a chart to zoom
  // in (chartjs-plugin-zoom, from npm; the finer buckets are re-read over REST), hover
  // tooltips with exact values, ticks chosen by Chart.js for the span shown, and a click
  // on a spend bar opening the request log for that bucket.
  const COLORS = { available: "#627d98", routed: "#b7791f", delivered: "#147d64", spend: "#2680c2", saved: "#1a7f5a" };
  const RANGE_MS = { "1h": 3600e3, "6h": 6 * 3600e3, "24h": 86400e3, "7d": 7 * 86400e3, "30d": 30 * 86400e3 };
  if (window.Chart && window.ChartZoom) window.Chart.register(window.ChartZoom);
  function timeScale(unit) {
    // No fixed unit: Chart.js picks seconds to days from the span, so every range (and a
    // zoom) gets several readable ticks, not one.
    return { type: "time", time: { unit: unit || false, minUnit: "second", tooltipFormat: "yyyy-MM-dd HH:mm:ss",
      displayFormats: { second: "HH:mm:ss", minute: "HH:mm", hour: "MMM d HH:mm", day: "MMM d" } },
      ticks: { maxRotation: 0, autoSkip: true, maxTicksLimit: 8, source: "auto" } };
  }
  function zoomOptions(chart) {
    return { zoom: { drag: { enabled: true, backgroundColor: "rgba(38,128,194,0.15)" }, mode: "x",
      onZoomComplete: ({ chart: c }) => zoomedTo(c, chart) } };
  }
  function exactShare(ctx) { return `${ctx.dataset.label}: ${ctx.parsed.y === null ? "no data" : (ctx.parsed.y * 100).toFixed(2) + " %"}`; }
  function exactUsd(ctx) { return `${ctx.dataset.label}: $${Number(ctx.parsed.y || 0).toFixed(6)}`; }
  function buildCharts() {
    const canvas = document.getElementById("hit-chart");
    if (!canvas || !window.Chart) return;
    // Distinct dashes and point shapes: the three series often coincide (routing captured
    // all the reuse), and a line drawn over another must still be told apart.
    const line = (key, dash, point) => ({ label: key, data: [], borderColor: COLORS[key], backgroundColor: COLORS[key],
      borderDash: dash, pointStyle: point, pointRadius: 2.5, borderWidth: 2, spanGaps: false });
    state.chart = new window.Chart(canvas, {
      type: "line",
      data: { datasets: [line("available", [8, 4], "rect"), line("routed", [3, 3], "triangle"), line("delivered", [], "circle")] },
      options: { animation: false, maintainAspectRatio: false, parsing: false,
        interaction: { mode: "nearest", axis: "x", intersect: false },
        scales: { x: timeScale(), y: { min: 0, max: 1, title: { display: true, text: "share of prompt tokens" }, ticks: { callback: (v) => Math.round(v * 100) + "%" } } },
        plugins: { legend: { display: true, labels: { filter: (item, data) => data.datasets[item.datasetIndex].data.length > 0 } },
                   tooltip: { callbacks: { label: exactShare } }, zoom: zoomOptions("hit") } },
    });
    const spend = document.getElementById("spend-chart");
    if (spend) {
      state.spendChart = new window.Chart(spend, {
        type: "bar",
        data: { datasets: [
          { label: "spend ($)", data: [], backgroundColor: COLORS.spend, maxBarThickness: 14 },
          { label: "saved by caching ($)", data: [], backgroundColor: COLORS.saved, maxBarThickness: 14 },
        ] },
        options: { animation: false, maintainAspectRatio: false, parsing: false,
          interaction: { mode: "index", intersect: false },
          onClick: (event, elements) => spendClicked(elements),
          scales: { x: { ...timeScale(), stacked: false, offset: true },
                    y: { beginAtZero: true, title: { display: true, text: "USD per bucket" }, ticks: { callback: (v) => money(v) } } },
          plugins: { tooltip: { callbacks: { label: exactUsd, footer: () => (page.dataset.requestsUrl ? "Click for the requests behind this bar" : "") } },
                     zoom: zoomOptions("spend") } },
      });
    }
    // A range the user picks wins over the opening guess, whichever answers last.
    document.querySelectorAll("[data-range]").forEach((b) => b.addEventListener("click", () => { state.userChose = true; selectRange(b.dataset.range); }));
    const custom = document.getElementById("range-custom");
    if (custom) custom.addEventListener("submit", (e) => {
      e.preventDefault();
      const from = Date.parse(custom.elements.since.value + "Z"), to = Date.parse(custom.elements.until.value + "Z");
      if (isNaN(from) || isNaN(to) || to <= from) { toast("Choose a From before the To.", true); return; }
      state.userChose = true;
      selectRange("custom", [from, to]);
    });
    const reset = document.getElementById("zoom-reset");
    if (reset) reset.addEventListener("click", () => selectRange(state.zoomedFrom || state.range, state.zoomedFrom === "custom" ? state.customSpan : null));
    openingRange().then((r) => { if (!state.userChose) selectRange(r); });
  }
  // Live when this browser holds live points; else the last hour if it had traffic (a
  // first visit then shows history instead of an empty live chart).
  async function openingRange() {
    if (livePoints().length || !page.dataset.seriesUrl) return "live";
    try {
      const data = await getJSON(page.dataset.seriesUrl + "?range=1h");
      return data.points.some((p) => p.requests > 0) ? "1h" : "live";
    } catch (e) { return "live"; }
  }
  function liveKey() { return "cp.live." + (page.dataset.ws || kind); }
  function livePoints() { return stored(liveKey(), LIVE_KEEP_MS); }
  function isoMinute(ms) { return new Date(ms).toISOString().slice(0, 19); }
  function setSpan(span, stepMs) {
    state.span = span; state.stepMs = stepMs;
    [state.chart, state.spendChart].forEach((c) => {
      if (!c) return;
      // resetZoom calls onZoomComplete itself: not a drag, so zoomedTo must ignore it.
      if (c.resetZoom && c.isZoomedOrPanned && c.isZoomedOrPanned()) { state.resetting = true; c.resetZoom("none"); state.resetting = false; }
      c.options.scales.x.min = span[0]; c.options.scales.x.max = span[1];
      c.update("none");
    });
    const custom = document.getElementById("range-custom");
    if (custom && state.range !== "custom") { custom.elements.since.value = isoMinute(span[0]); custom.elements.until.value = isoMinute(span[1]); }
    const link = document.getElementById("range-requests");
    if (link && page.dataset.requestsUrl) link.href = requestsUrl(span[0], span[1]);
    const shown = document.getElementById("range-shown");
    if (shown) shown.textContent = `${isoMinute(span[0]).replace("T", " ")} to ${isoMinute(span[1]).replace("T", " ")} UTC, buckets of ${Math.round(stepMs / 1000)} s`;
    page.dataset.rangeDrawn = String(Number(page.dataset.rangeDrawn || 0) + 1);
  }
  function requestsUrl(from, to) { return page.dataset.requestsUrl + "?since=" + isoMinute(from) + "&until=" + isoMinute(to); }
  function spendClicked(elements) {
    if (!elements.length || !page.dataset.requestsUrl) return;
    const x = state.spendChart.data.datasets[elements[0].datasetIndex].data[elements[0].index].x;
    location.href = requestsUrl(x, x + (state.stepMs || 60000));
  }
  function drawLive() {
    const pts = livePoints();
    const ds = state.chart.data.datasets;
    ds[0].data = pts.map((p) => ({ x: p.t, y: p.a }));
    ds[1].data = pts.map((p) => ({ x: p.t, y: p.r }));
    ds[2].data = pts.map((p) => ({ x: p.t, y: p.d }));
    if (state.spendChart) {
      const s = state.spendChart.data.datasets;
      s[0].data = pts.map((p) => ({ x: p.t, y: p.c || 0 }));
      s[1].data = [];
    }
    const now = Date.now(), first = pts.length ? pts[0].t : now - 60000;
    setSpan([Math.min(first, now - 60000), now], 1000);
  }
  async function selectRange(range, span) {
    state.range = range;
    if (range !== "custom") state.zoomedFrom = null;
    document.querySelectorAll("[data-range]").forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.range === range)));
    const reset = document.getElementById("zoom-reset");
    if (reset) reset.hidden = !state.zoomedFrom;
    if (!state.chart) return;
    if (range === "live" || !page.dataset.seriesUrl) { drawLive(); return; }
    const query = range === "custom" ? `?since=${isoMinute(span[0])}Z&until=${isoMinute(span[1])}Z` : "?range=" + range;
    try {
      const data = await getJSON(page.dataset.seriesUrl + query);
      if (state.range !== range) return;
      const ds = state.chart.data.datasets;
      ds[0].data = []; ds[1].data = [];
      ds[2].data = data.points.map((p) => ({ x: Date.parse(p.at), y: p.hit_rate }));
      if (state.spendChart) {
        const s = state.spendChart.data.datasets;
        s[0].data = data.points.map((p) => ({ x: Date.parse(p.at), y: p.cost_usd }));
        s[1].data = data.points.map((p) => ({ x: Date.parse(p.at), y: p.saved_usd }));
      }
      const to = range === "custom" ? span[1] : Date.now();
      setSpan(range === "custom" ? span : [to - RANGE_MS[range], to], data.step_seconds * 1000);
    } catch (e) { toast("Could not load the range.", true); }
  }
  // A drag on either chart: show that span on both, with the finer buckets re-read over
  // REST (Live keeps its per-second points and only narrows the axis).
  function zoomedTo(c) {
    if (state.resetting) return;
    const from = Math.round(c.scales.x.min), to = Math.round(c.scales.x.max);
    if (!(to > from)) return;
    if (state.range === "live" || !page.dataset.seriesUrl) {
      [state.chart, state.spendChart].forEach((o) => { if (o && o !== c) { o.options.scales.x.min = from; o.options.scales.x.max = to; o.update("none"); } });
      page.dataset.rangeDrawn = String(Number(page.dataset.rangeDrawn || 0) + 1);
      return;
    }
    state.userChose = true;
    if (!state.zoomedFrom) state.zoomedFrom = state.range;
    if (state.zoomedFrom === "custom" && !state.customSpan) state.customSpan = state.span;
    const custom = document.getElementById("range-custom");
    if (custom) { custom.elements.since.value = isoMinute(from); custom.elements.until.value = isoMinute(to); }
    selectRange("custom", [from, to]).then(() => { const r = document.getElementById("zoom-reset"); if (r) r.hidden = false; });
  }
  function pushTick(p) {
    if (!p.prompt_tokens) return;
    const pts = livePoints();
    pts.push({ t: p.at * 1000, a: p.available_tokens / p.prompt_tokens, r: p.routed_tokens / p.prompt_tokens,
               d: p.cached_tokens / p.prompt_tokens, c: (p.cost_micros || 0) / 1e6 });
    store(liveKey(), pts.slice(-600));
    if (state.chart && state.range === "live") drawLive();
  }

  // KV memory pressure per worker over time, with the 85 % line: 1 h / 24 h / 7 d from the
  // stored per-minute samples (the server's kv-series), Live from the probe snapshots.
  state.kvRange = "1h";
  function kvPush(workers) {
    const key = "cp.kv";
    const pts = stored(key, KV_KEEP_MS);
    const t = Date.now();
    workers.forEach((w) => { if (w.kv_usage !== null && w.kv_usage !== undefined) pts.push({ t, w: w.name, v: w.kv_usage }); });
    store(key, pts.slice(-3000));
    if (state.kvRange === "live") drawKv(kvLiveSeries(pts), "minute");
    else if (Date.now() - (state.kvFetched || 0) > 30000) selectKvRange(state.kvRange);
  }
  function kvLiveSeries(pts) {
    const names = [...new Set(pts.map((p) => p.w))].sort();
    return names.map((n) => ({ name: n, data: pts.filter((p) => p.w === n).map((p) => ({ x: p.t, y: p.v })) }));
  }
  async function selectKvRange(range) {
    state.kvRange = range;
    document.querySelectorAll("[data-kv-range]").forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.kvRange === range)));
    if (range === "live") { drawKv(kvLiveSeries(stored("cp.kv", KV_KEEP_MS)), "minute"); return; }
    if (!page.dataset.kvSeriesUrl) return;
    state.kvFetched = Date.now();
    try {
      const data = await getJSON(page.dataset.kvSeriesUrl + "?range=" + range);
      if (state.kvRange !== range) return;
      const series = Object.keys(data.workers).sort().map((n) => ({ name: n,
        data: data.workers[n].map((p) => ({ x: Date.parse(p.at), y: p.max })) }));
      const start = Date.now() - (range === "1h" ? 3600e3 : range === "24h" ? 86400e3 : 7 * 86400e3);
      drawKv(series, range === "1h" ? "minute" : range === "24h" ? "hour" : "day", [start, Date.now()]);
    } catch (e) { toast("Could not load the KV history.", true); }
  }
  function drawKv(series, unit, span) {
    const canvas = document.getElementById("kv-chart");
    if (!canvas || !window.Chart) return;
    const palette = ["#2680c2", "#147d64", "#b7791f", "#9446ed", "#c2255c", "#486581"];
    const datasets = series.map((s, i) => ({ label: s.name, data: s.data, spanGaps: false,
      borderColor: palette[i % palette.length], backgroundColor: palette[i % palette.length], pointRadius: s.data.length < 60 ? 2 : 0 }));
    if (!span) {
      const xs = series.flatMap((s) => s.data.map((p) => p.x));
      span = xs.length ? [Math.min(...xs), Math.max(...xs, Math.min(...xs) + 60000)] : [Date.now() - 60000, Date.now()];
    }
    datasets.push({ label: "85 % (eviction pressure)", data: [{ x: span[0], y: 0.85 }, { x: span[1], y: 0.85 }],
      borderColor: "#d64545", borderDash: [6, 4], pointRadius: 0, backgroundColor: "#d64545" });
    if (!state.kvChart) {
      state.kvChart = new window.Chart(canvas, { type: "line", data: { datasets },
        options: { animation: false, maintainAspectRatio: false, parsing: false,
          scales: { x: { ...timeScale(unit), min: span[0], max: span[1] },
                    y: { min: 0, max: 1, title: { display: true, text: "KV cache used" }, ticks: { callback: (v) => Math.round(v * 100) + "%" } } } } });
    } else {
      state.kvChart.data.datasets = datasets;
      state.kvChart.options.scales.x.time.unit = unit;
      state.kvChart.options.scales.x.min = span[0]; state.kvChart.options.scales.x.max = span[1];
      state.kvChart.update("none");
    }
  }

  // --- Renderers ---------------------------------------------------------------------
  // caches.models.LIVE_STATES; the server's own "live" wins when the payload carries it.
  const LIVE = new Set(["pending", "creating", "active", "refreshing"]);
  const isLive = (c) => (typeof c.live === "boolean" ? c.live : LIVE.has(c.state));
  function renderTenant(s) {
    if (s.spend) {
      setText("tile-spent", usd(s.spend.spent_usd));
      setText("tile-saved", usd(s.spend.saved_usd));
      setText("tile-hit-rate", pct(s.spend.hit_ratio));
      const asOf = document.getElementById("spend-as-of");
      if (asOf) asOf.replaceChildren(timeEl(s.generated_at));
      (s.spend.budgets || []).forEach((b) => {  // billing's one budget figure (budget_figures)
        const row = document.querySelector(`.budget[data-budget="${CSS.escape(b.id)}"]`);
        if (!row) return;
        for (const k of ["committed", "spent", "reserved", "remaining"]) {
          const el = row.querySelector(`.budget-${k}`);
          if (el) el.textContent = usd(b[`${k}_usd`]);
        }
        row.querySelector("meter").value = b.used_fraction;
      });
    }
    if (s.caches) {
      const body = document.querySelector("#caches-table tbody");
      if (!body) return;
      body.replaceChildren();
      if (!s.caches.length) {
        const tr = document.createElement("tr"); tr.className = "empty";
        const td = document.createElement("td"); td.colSpan = 6; td.className = "muted"; td.textContent = "No caches yet.";
        tr.appendChild(td); body.appendChild(tr);
      }
      s.caches.forEach((c) => {
        const tr = document.createElement("tr");
        tr.dataset.cache = c.id;
        const cells = [0, 1, 2, 3, 4, 5].map(() => document.createElement("td"));
        const a = document.createElement("a"); a.href = `/t/${encodeURIComponent(page.dataset.tenant)}/caches/${encodeURIComponent(c.id)}/`; a.textContent = c.name;
        cells[0].appendChild(a);
        cells[1].textContent = c.provider; cells[2].textContent = c.model;
        const badge = document.createElement("span"); badge.className = "state state-" + c.state; badge.dataset.role = "state"; badge.textContent = c.state;
        cells[3].appendChild(badge);
        if (isLive(c)) {
          const cd = document.createElement("span"); cd.className = "countdown"; cd.dataset.expire = c.expire_at || ""; cells[4].appendChild(cd);
          const pol = document.createElement("span"); pol.className = "muted"; pol.textContent = " " + c.ttl_policy; cells[4].appendChild(pol);
        } else { const e = document.createElement("span"); e.className = "muted"; e.textContent = "ended"; cells[4].appendChild(e); }
        cells[4].dataset.sort = c.expire_at || "";
        cells[5].textContent = c.hit_count;
        cells.forEach((td) => tr.appendChild(td));
        body.appendChild(tr);
      });
      tickCountdowns();
      document.dispatchEvent(new CustomEvent("cp:table-updated"));
    }
  }
  function renderPlatform(s) {
    setText("tile-tenants", s.tenants_total);
    setText("tile-hit-rate", pct(s.fleet_hit_rate));
    if (s.top) { renderTop("top-spend", s.top.by_spend, "spend_usd"); renderTop("top-savings", s.top.by_savings, "saved_usd"); }
    (s.tenants || []).forEach((t) => {  // month spend per tenant, as the ledger booked it
      const cell = document.querySelector(`#tenants-table tr[data-slug="${CSS.escape(t.slug)}"] td.spend`);
      if (cell) { cell.textContent = usd(t.month_spend_usd); cell.dataset.sort = t.month_spend_usd; }
    });
    renderWorkers(s.workers || []);
  }
  function renderTop(id, rows, field) {
    const body = document.querySelector(`#${id} tbody`);
    if (!body || !rows.length) return;
    body.replaceChildren(...rows.map((t) => {
      const tr = document.createElement("tr");
      const name = document.createElement("td"), value = document.createElement("td");
      const a = document.createElement("a"); a.href = `/t/${encodeURIComponent(t.slug)}/`; a.textContent = t.name;
      name.appendChild(a); value.textContent = usd(t[field]); value.dataset.sort = t[field];
      tr.append(name, value); return tr;
    }));
  }
  function renderWorkers(workers) {
    const body = document.querySelector("#workers-table tbody");
    if (body) {
      workers.forEach((w) => {
        const row = body.querySelector(`tr[data-worker="${CSS.escape(w.name)}"]`);
        if (!row) return;
        const badge = document.createElement("span"); badge.className = "state state-" + w.state; badge.textContent = w.state;
        row.children[3].replaceChildren(badge);
        const kv = w.kv_usage;
        if (kv === null || kv === undefined) row.children[4].textContent = "—";
        else {
          const m = document.createElement("meter"); m.min = 0; m.max = 1; m.high = 0.85; m.optimum = 0; m.value = kv; m.setAttribute("aria-label", "KV cache usage");
          row.children[4].replaceChildren(m, document.createTextNode(" " + pct(kv)));
        }
        row.children[5].textContent = pct(w.hit_rate);
        row.children[6].textContent = w.running ?? "—";
        row.children[7].textContent = w.waiting ?? "—";
      });
    }
    if (kind === "workers") kvPush(workers);
  }
  function renderCache(c) {
    const badge = document.getElementById("cache-state");
    if (badge) { badge.textContent = c.state; badge.className = "state state-" + c.state; }
    setText("cache-hits", c.hit_count);
    const cd = document.getElementById("cache-countdown");
    if (cd && isLive(c)) cd.dataset.expire = c.expire_at || "";
    else if (cd) { cd.className = "muted"; cd.textContent = "ended"; }
    if (!isLive(c)) { const actions = document.getElementById("cache-actions"); if (actions) actions.remove(); }
    const tl = document.getElementById("timeline");
    if (tl) {
      tl.replaceChildren();
      c.timeline.forEach((t) => {
        const li = document.createElement("li");
        const b = document.createElement("span"); b.className = "state state-" + t.to; b.textContent = t.to;
        const why = document.createElement("span"); why.className = "muted"; why.textContent = " " + t.reason;
        li.append(b, document.createTextNode(" "), timeEl(t.at), why);
        tl.appendChild(li);
      });
    }
    tickCountdowns();
  }

  async function refetch() {
    if (!page || !page.dataset.summaryUrl) return;
    try {
      const data = await getJSON(page.dataset.summaryUrl);
      if (kind === "tenant") renderTenant(data);
      else if (kind === "platform" || kind === "workers") renderPlatform(data);
      else if (kind === "cache") renderCache(data);
      page.dataset.refreshed = String(Number(page.dataset.refreshed || 0) + 1);  // tests wait on it
    } catch (e) { /* the next reconnect retries */ }
  }

  // --- Live events -------------------------------------------------------------------
  function onEvent(msg) {
    const p = msg.payload || {};
    if (msg.event === "usage.tick") {
      state.live.requests += p.requests || 0;
      setText("tile-live-requests", state.live.requests);
      setText("tile-rps", p.requests || 0);
      setText("tile-spend-rate", usd((p.cost_micros || 0) / 1e6));
      pushTick(p);
      if (kind === "tenant") scheduleRefetch();
    } else if (msg.event === "usage.booked") {
      // The ledger booked this tenant's requests: re-read the ledger-backed tiles now.
      if (kind === "tenant" || kind === "platform") scheduleRefetch(300);
    } else if (msg.event === "caches.cache.state") {
      if (kind === "cache" && p.id === page.dataset.cache) { refetch(); toast(`${p.name}: ${p.state}`); }
      if (kind === "tenant") refetch();
    } else if (msg.event === "workers.snapshot") {
      renderWorkers(p.workers || []);
    } else if (msg.event && msg.event.startsWith("billing.alert")) {
      toast(`Budget alert: ${p.budget || ""} spent + reserved crossed ${p.threshold || ""} %`, true);
      const list = document.getElementById("alerts");
      if (list) { const li = document.createElement("li"); li.textContent = `${p.budget}: spent + reserved crossed ${p.threshold} %`; list.prepend(li); }
    }
    window.__cacheplaneLastEvent = { event: msg.event, at: Date.now() };
    if (msg.sent_at) {  // event-to-DOM latency, read by bench/console_latency.py
      (window.__cacheplaneLatencies = window.__cacheplaneLatencies || []).push(
        { event: msg.event, ms: Date.now() - msg.sent_at * 1000 });
    }
  }
  let refetchTimer = null;
  function scheduleRefetch(delay) {  // coalesce: at most one REST refresh per 2 s of ticks
    if (refetchTimer) return;
    refetchTimer = setTimeout(() => { refetchTimer = null; refetch(); }, delay || 2000);
  }
  function connect(attempt) {
    if (!page || !page.dataset.ws) return;
    const status = document.getElementById("live-status");
    const proto = location.protocol === "https:" ? "wss://" : "ws://";
    const ws = new WebSocket(proto + location.host + page.dataset.ws);
    ws.onopen = () => { if (status) status.className = "live-status on"; attempt = 0; refetch(); };
    ws.onmessage = (e) => { try { onEvent(JSON.parse(e.data)); } catch (err) { /* ignore */ } };
    ws.onclose = () => {
      if (status) status.className = "live-status off";
      const delay = Math.min(30000, 500 * 2 ** Math.min(attempt, 6)) * (0.5 + Math.random());
      setTimeout(() => connect(attempt + 1), delay);  // reconnect with backoff and jitter
    };
  }

  // --- Audit page: search, older pages, export in every format with a live download ---
  let auditNext = null;
  async function loadAudit(params, append) {
    const tbody = document.querySelector("#audit-table tbody");
    const more = document.getElementById("audit-more");
    let url;
    if (append && auditNext) url = auditNext;
    else {
      const qs = new URLSearchParams();
      Object.entries(params || {}).forEach(([k, v]) => { if (v) qs.set(k, k === "since" ? new Date(v + "Z").toISOString() : v); });
      url = `/api/v1/tenants/${encodeURIComponent(page.dataset.tenant)}/audit/events?` + qs;
    }
    try {
      const data = await getJSON(url);
      if (!append) tbody.replaceChildren();
      (data.results || []).forEach((ev) => {
        const tr = document.createElement("tr");
        const cells = [0, 1, 2, 3, 4, 5].map(() => document.createElement("td"));
        cells[0].appendChild(timeEl(ev.occurred_at)); cells[0].dataset.sort = ev.occurred_at;
        cells[1].textContent = ev.seq; cells[2].textContent = ev.action;
        const b = document.createElement("span"); b.className = "state state-" + ev.outcome; b.textContent = ev.outcome; cells[3].appendChild(b);
        cells[4].textContent = ev.actor_name || "—";
        cells[5].textContent = ev.target_name || `${ev.target_type} ${ev.target_id}`;
        cells.forEach((c) => tr.appendChild(c));
        tbody.appendChild(tr);
      });
      if (!tbody.children.length) {
        const tr = document.createElement("tr"); const td = document.createElement("td"); td.colSpan = 6; td.className = "muted"; td.textContent = "No events match.";
        tr.appendChild(td); tbody.appendChild(tr);
      }
      auditNext = data.next || null;
      more.hidden = !auditNext;
      document.dispatchEvent(new CustomEvent("cp:table-updated"));
    } catch (e) { tbody.replaceChildren(); const tr = document.createElement("tr"); const td = document.createElement("td"); td.colSpan = 6; td.className = "error"; td.textContent = "Could not load events."; tr.appendChild(td); tbody.appendChild(tr); }
  }
  async function followExport(id) {
    const status = document.getElementById("export-status");
    const url = `/api/v1/tenants/${encodeURIComponent(page.dataset.tenant)}/audit/exports/${encodeURIComponent(id)}`;
    for (let i = 0; i < 120; i++) {
      let ex;
      try { ex = await getJSON(url); } catch (e) { status.textContent = "Could not read the export's status."; return; }
      if (ex.status === "succeeded") {
        const a = document.createElement("a"); a.href = ex.download_url || url + "/download"; a.id = "export-download";
        const n = ex.total ?? ex.event_count;  // the export API's field is "total"
        a.textContent = `Download ${ex.format.toUpperCase()}` + (n === undefined || n === null ? "" : ` (${Number(n).toLocaleString("en-US")} ${n === 1 ? "event" : "events"})`); a.setAttribute("download", "");
        status.replaceChildren(a); return;
      }
      if (ex.status === "failed") { status.textContent = "Export failed: " + ((ex.error && ex.error.message) || "unknown error"); return; }
      status.textContent = `Export ${ex.status}…`;
      await new Promise((r) => setTimeout(r, 1000));
    }
    status.textContent = "The export is taking long; reload the page to check again.";
  }
  if (kind === "audit") {
    const form = document.getElementById("audit-filters");
    const current = () => Object.fromEntries(new FormData(form).entries());
    form.addEventListener("submit", (e) => { e.preventDefault(); loadAudit(current(), false); });
    document.getElementById("audit-more").addEventListener("click", () => loadAudit(null, true));
    document.getElementById("export-form").addEventListener("submit", async (e) => {
      e.preventDefault();
      const f = current();
      const body = { format: document.getElementById("f-format").value };
      ["action", "outcome", "actor"].forEach((k) => { if (f[k]) body[k] = f[k]; });
      if (f.since) body.since = new Date(f.since + "Z").toISOString();
      const [ok, data] = await postJSON(`/api/v1/tenants/${encodeURIComponent(page.dataset.tenant)}/audit/exports`, body);
      if (!ok) { setText("export-status", (data.error && data.error.message) || "Export failed"); return; }
      followExport(data.id);
    });
    loadAudit({}, false);
  }

  // --- Break-even --------------------------------------------------------------------
  async function breakeven(provider, model, pool, tokens, ttl, rate) {
    const payload = { provider, context_tokens: Number(tokens), queries_per_hour: String(rate), ttl_seconds: Number(ttl) };
    if (provider === "vllm") { payload.pool = pool || "default"; payload.model = model; } else payload.model = model;
    return postJSON(`/api/v1/tenants/${encodeURIComponent(page.dataset.tenant)}/break-even`, payload);
  }
  if (kind === "breakeven") {
    const form = document.getElementById("breakeven-form");
    let chart = null;
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const f = Object.fromEntries(new FormData(form).entries());
      if (!f.model) { setText("breakeven-result", "No models yet: add a price or register a worker."); return; }
      const [provider, ...rest] = f.model.split(":");
      const [ok, data] = await breakeven(provider, rest.join(":"), "default", f.context_tokens, f.ttl_seconds, f.queries_per_hour);
      if (!ok) { setText("breakeven-result", (data.error && data.error.message) || "Could not compute."); return; }
      const be = Number(data.breakeven_queries_per_hour);
      setText("breakeven-result", `Break-even at ${isFinite(be) ? be.toFixed(2) : "∞"} queries/hour. ` +
        `At ${f.queries_per_hour}/h: ${usd(data.hourly_cost_with_cache_micros / 1e6)}/h with the cache, ` +
        `${usd(data.hourly_cost_without_cache_micros / 1e6)}/h without.`);
      const withC = [], without = [];
      const max = Math.max(10, Math.ceil((isFinite(be) ? be : 10) * 3));
      for (let q = 0; q <= max; q += max / 30) {
        without.push({ x: q, y: q * data.miss_cost_micros / 1e6 });
        withC.push({ x: q, y: (data.storage_per_hour_micros + q * data.hit_cost_micros) / 1e6 });
      }
      if (chart) chart.destroy();
      chart = new window.Chart(document.getElementById("breakeven-chart"), {
        type: "line", data: { datasets: [
          { label: "cost/hour with cache ($)", data: withC, borderColor: COLORS.delivered, pointRadius: 0 },
          { label: "cost/hour without cache ($)", data: without, borderColor: "#d64545", pointRadius: 0 } ] },
        options: { animation: false, maintainAspectRatio: false, parsing: false, scales: { x: { type: "linear", title: { display: true, text: "queries per hour" } } } },
      });
    });
    form.requestSubmit();
  }
  const position = document.getElementById("breakeven-position");
  if (position && position.dataset.tokens !== "0") {
    const d = position.dataset;
    breakeven(d.provider, d.model, d.pool, d.tokens, d.ttl, d.rate).then(([ok, r]) => {
      if (!ok) { position.textContent = (r.error && r.error.message) || "No price for this model yet."; return; }
      const be = Number(r.breakeven_queries_per_hour), rate = Number(d.rate);
      position.textContent = `Observed ${rate.toFixed(2)} queries/hour against a break-even of ${isFinite(be) ? be.toFixed(2) : "∞"}: ` +
        (rate >= be ? "this cache pays for itself." : "this cache costs more than it saves at the current rate.");
    });
  }

  // --- A form posted after the session expired: its entries, restored (frontend.views) ---
  function resumeForm() {
    const el = document.getElementById("console-resume");
    if (!el) return;
    const pending = JSON.parse(el.textContent);
    const form = [...document.querySelectorAll("form[action]")].find((f) => new URL(f.action, location.href).pathname === pending.action);
    if (!form) return;
    Object.entries(pending.data || {}).forEach(([name, values]) => {
      const field = form.elements.namedItem(name);
      if (!field) return;
      const nodes = field instanceof RadioNodeList ? [...field] : [field];
      nodes.forEach((node) => {
        if (node.type === "checkbox" || node.type === "radio") node.checked = values.includes(node.value);
        else if (node.multiple) [...node.options].forEach((o) => { o.selected = values.includes(o.value); });
        else node.value = values[0] ?? "";
      });
    });
    // An unchecked box is absent from a post: absent here means unchecked.
    form.querySelectorAll("input[type=checkbox]").forEach((box) => { if (!(box.name in (pending.data || {}))) box.checked = false; });
    const details = form.closest("details"); if (details) details.open = true;
    form.dataset.resumed = "true";
    form.scrollIntoView({ block: "center" });
  }

  // --- New cache: the Model select offers the chosen provider's models only ------------
  function modelsFollowProvider() {
    const form = document.getElementById("cache-form");
    if (!form || !form.elements.provider || !form.elements.model) return;
    const provider = form.elements.provider, model = form.elements.model;
    const sync = () => {
      const label = provider.options[provider.selectedIndex].text;  // optgroup label = provider label
      let first = null;
      model.querySelectorAll("optgroup").forEach((g) => {
        const mine = g.label === label;
        g.disabled = !mine; g.hidden = !mine;
        if (mine && !first) first = g.querySelector("option");
      });
      const current = model.options[model.selectedIndex];
      if ((!current || current.parentElement.disabled) && first) first.selected = true;
    };
    provider.addEventListener("change", sync);
    sync();
  }

  // --- Boot --------------------------------------------------------------------------
  window.addEventListener("load", () => {
    resumeForm();
    modelsFollowProvider();
    tickCountdowns();
    buildCharts();
    if (kind === "workers") {
      document.querySelectorAll("[data-kv-range]").forEach((b) => b.addEventListener("click", () => selectKvRange(b.dataset.kvRange)));
      if (initial) kvPush(initial.workers || []);
      if (!state.kvFetched) selectKvRange("1h");
    }
    connect(0);
  });
})();
