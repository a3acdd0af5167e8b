// Cacheplane console: live updates over the WebSocket, REST re-fetch on (re)connect,
// countdowns, charts (Chart.js from npm) and confirmed actions through the REST API.
(function () {
  "use strict";
  const page = document.getElementById("page");
  const kind = page ? page.dataset.page : null;
  const state = { chart: null, live: { requests: 0 }, lastEventAt: null };

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
  function usd(v) { return "$" + Number(v || 0).toFixed(v >= 1 ? 2 : 4); }
  function pct(v) { return v === null || v === undefined ? "—" : Math.round(v * 100) + " %"; }
  async function getJSON(url) {
    const r = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!r.ok) throw new Error(url + " → " + r.status);
    return r.json();
  }

  // --- Countdowns ------------------------------------------------------------------
  function tickCountdowns() {
    const now = Date.now();
    document.querySelectorAll(".countdown").forEach((el) => {
      const iso = el.dataset.expire;
      if (!iso) { el.textContent = "—"; return; }
      const s = Math.round((Date.parse(iso) - now) / 1000);
      if (s <= 0) { el.textContent = "expired"; return; }
      const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
      el.textContent = (h ? h + "h " : "") + (h || m ? m + "m " : "") + sec + "s";
    });
  }
  setInterval(tickCountdowns, 1000);
  tickCountdowns();

  // --- Charts ----------------------------------------------------------------------
  function hitChart(series) {
    const canvas = document.getElementById("hit-chart");
    if (!canvas || !window.Chart) return null;
    const labels = series.map((p) => new Date(p.at).toLocaleTimeString());
    return new window.Chart(canvas, {
      type: "line",
      data: {
        labels,
        datasets: [
          { label: "available", data: series.map(() => null), borderColor: "#9fb3c8", spanGaps: true },
          { label: "captured by routing", data: series.map(() => null), borderColor: "#f0b429", spanGaps: true },
          { label: "delivered", data: series.map((p) => p.hit_rate), borderColor: "#27ab83", spanGaps: true },
        ],
      },
      options: { animation: false, scales: { y: { min: 0, max: 1, ticks: { callback: (v) => v * 100 + "%" } } },
                 plugins: { legend: { display: true } } },
    });
  }
  function pushPoint(p) {
    if (!state.chart || !p.prompt_tokens) return;
    const d = state.chart.data;
    d.labels.push(new Date(p.at * 1000).toLocaleTimeString());
    d.datasets[0].data.push(p.available_tokens / p.prompt_tokens);
    d.datasets[1].data.push(p.routed_tokens / p.prompt_tokens);
    d.datasets[2].data.push(p.cached_tokens / p.prompt_tokens);
    if (d.labels.length > 240) { d.labels.shift(); d.datasets.forEach((ds) => ds.data.shift()); }
    state.chart.update("none");
  }

  // --- Renderers -------------------------------------------------------------------
  function renderTenant(s) {
    if (s.spend) {
      setText("tile-spent", usd(s.spend.spent_usd));
      setText("tile-projected", usd(s.spend.projected_usd));
      setText("tile-saved", usd(s.spend.saved_usd));
      setText("tile-hit-rate", pct(s.spend.hit_ratio));
    }
    if (s.caches) {
      const body = document.querySelector("#caches-table tbody");
      if (!body) return;
      body.innerHTML = "";
      if (!s.caches.length) body.innerHTML = '<tr class="empty"><td colspan="6" class="muted">No caches yet.</td></tr>';
      s.caches.forEach((c) => {
        const tr = document.createElement("tr");
        tr.dataset.cache = c.id;
        tr.innerHTML = `<td><a href="/t/${page.dataset.tenant}/caches/${c.id}/"></a></td><td></td><td></td>` +
          `<td><span class="state state-${c.state}" data-role="state">${c.state}</span></td>` +
          `<td><span class="countdown" data-expire="${c.expire_at || ""}">—</span> <span class="muted">${c.ttl_policy}</span></td><td>${c.hit_count}</td>`;
        tr.children[0].firstChild.textContent = c.name;
        tr.children[1].textContent = c.provider;
        tr.children[2].textContent = c.model;
        body.appendChild(tr);
      });
      tickCountdowns();
    }
  }
  function renderPlatform(s) {
    setText("tile-tenants", s.tenants_total);
    setText("tile-hit-rate", pct(s.fleet_hit_rate));
    renderWorkers(s.workers || []);
  }
  function renderWorkers(workers) {
    const body = document.querySelector("#workers-table tbody");
    if (!body) return;
    workers.forEach((w) => {
      const row = body.querySelector(`tr[data-worker="${CSS.escape(w.name)}"]`);
      if (!row) return;
      const kv = w.kv_usage;
      row.children[3].innerHTML = `<span class="state state-${w.state}">${w.state}</span>`;
      row.children[4].innerHTML = kv === null || kv === undefined ? "—" :
        `<div class="bar ${kv > 0.85 ? "hot" : ""}"><div class="fill" style="width:${Math.round(kv * 100)}%"></div></div>${Math.round(kv * 100)} %`;
      row.children[5].textContent = pct(w.hit_rate);
      row.children[6].textContent = w.running ?? "—";
      row.children[7].textContent = w.waiting ?? "—";
    });
  }
  function renderCache(c) {
    const badge = document.getElementById("cache-state");
    if (badge) { badge.textContent = c.state; badge.className = "state state-" + c.state; }
    setText("cache-hits", c.hit_count);
    const cd = document.getElementById("cache-countdown");
    if (cd) cd.dataset.expire = c.expire_at || "";
    const tl = document.getElementById("timeline");
    if (tl) {
      tl.innerHTML = "";
      c.timeline.forEach((t) => {
        const li = document.createElement("li");
        li.innerHTML = `<span class="state state-${t.to}">${t.to}</span> <time></time> <span class="muted"></span>`;
        li.children[1].textContent = t.at;
        li.children[2].textContent = t.reason;
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
    } catch (e) { /* the next reconnect retries */ }
  }

  // --- Live events -----------------------------------------------------------------
  function onEvent(msg) {
    state.lastEventAt = performance.now();
    const p = msg.payload || {};
    if (msg.event === "usage.tick") {
      state.live.requests += p.requests || 0;
      setText("tile-live-requests", state.live.requests);
      setText("tile-rps", p.requests || 0);
      setText("tile-spend-rate", usd((p.cost_micros || 0) / 1e6));
      pushPoint(p);
      if (kind === "tenant") scheduleRefetch();
    } else if (msg.event === "caches.cache.state") {
      if (kind === "cache" && p.id === page.dataset.cache) { refetch(); toast(`${p.name}: ${p.state}`); }
      if (kind === "tenant") {
        const row = document.querySelector(`tr[data-cache="${CSS.escape(p.id)}"]`);
        if (row) {
          const badge = row.querySelector('[data-role="state"]');
          badge.textContent = p.state; badge.className = "state state-" + p.state;
          const cd = row.querySelector(".countdown"); if (cd && p.expire_at) cd.dataset.expire = p.expire_at;
          tickCountdowns();
        } else { refetch(); }
      }
    } else if (msg.event === "workers.snapshot") {
      renderWorkers(p.workers || []);
    } else if (msg.event && msg.event.startsWith("billing.alert")) {
      toast(`Budget alert: ${p.budget || ""} ${p.threshold || ""} %`, true);
      const list = document.getElementById("alerts");
      if (list) { const li = document.createElement("li"); li.textContent = `${p.budget} crossed ${p.threshold} %`; list.prepend(li); }
    }
    window.__cacheplaneLastEvent = { event: msg.event, at: Date.now() };
    if (msg.sent_at) {  // event-to-DOM latency, read by bench/console_latency.py
      (window.__cacheplaneLatencies = window.__cacheplaneLatencies || []).push(
        { event: msg.event, ms: Date.now() - msg.sent_at * 1000 });
    }
  }
  let refetchTimer = null;
  function scheduleRefetch() {  // coalesce: at most one REST refresh per 2 s of ticks
    if (refetchTimer) return;
    refetchTimer = setTimeout(() => { refetchTimer = null; refetch(); }, 2000);
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

  // --- Actions (confirmed, through REST) -------------------------------------------
  document.querySelectorAll("form[data-action]").forEach((form) => {
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      if (!window.confirm(form.dataset.confirm)) return;
      const body = {};
      new FormData(form).forEach((v, k) => { body[k] = /^\d+$/.test(v) ? Number(v) : v; });
      const r = await fetch(form.dataset.url, {
        method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
        body: JSON.stringify(body),
      });
      const data = await r.json().catch(() => ({}));
      if (r.ok) { toast(form.dataset.action + ": " + (data.status || data.state || "ok")); refetch(); }
      else toast((data.error && data.error.message) || "The action failed (" + r.status + ").", true);
    });
  });

  // --- Audit page ------------------------------------------------------------------
  async function loadAudit(params) {
    const tbody = document.querySelector("#audit-table tbody");
    const qs = new URLSearchParams();
    Object.entries(params || {}).forEach(([k, v]) => { if (v) qs.set(k, k === "since" ? new Date(v).toISOString() : v); });
    try {
      const data = await getJSON(`/api/v1/tenants/${page.dataset.tenant}/audit/events?` + qs);
      tbody.innerHTML = "";
      (data.results || []).forEach((ev) => {
        const tr = document.createElement("tr");
        [ev.occurred_at, ev.seq, ev.action, ev.outcome, ev.actor_name, ev.target_type + " " + ev.target_id]
          .forEach((v, i) => { const td = document.createElement("td"); if (i === 3) td.innerHTML = `<span class="state state-${ev.outcome}"></span>`; (i === 3 ? td.firstChild : td).textContent = v; tr.appendChild(td); });
        tbody.appendChild(tr);
      });
      if (!tbody.children.length) tbody.innerHTML = '<tr><td colspan="6" class="muted">No events match.</td></tr>';
    } catch (e) { tbody.innerHTML = `<tr><td colspan="6" class="error">Could not load events.</td></tr>`; }
  }
  if (kind === "audit") {
    const form = document.getElementById("audit-filters");
    const current = () => Object.fromEntries(new FormData(form).entries());
    form.addEventListener("submit", (e) => { e.preventDefault(); loadAudit(current()); });
    document.getElementById("export-button").addEventListener("click", async () => {
      const f = current();
      const body = { format: "jsonl" };
      if (f.action) body.action = f.action; if (f.outcome) body.outcome = f.outcome;
      if (f.actor) body.actor = f.actor; if (f.since) body.since = new Date(f.since).toISOString();
      const r = await fetch(`/api/v1/tenants/${page.dataset.tenant}/audit/exports`, {
        method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() }, body: JSON.stringify(body) });
      const data = await r.json().catch(() => ({}));
      setText("export-status", r.ok ? `Export ${data.id} ${data.status}: download from /api/v1/tenants/${page.dataset.tenant}/audit/exports/${data.id}/download` : ((data.error && data.error.message) || "Export failed"));
    });
    loadAudit({});
  }

  // --- Break-even ------------------------------------------------------------------
  async function breakeven(form, model, tokens, ttl, rate, target) {
    const payload = { provider: "vertex", model, context_tokens: Number(tokens), queries_per_hour: String(rate), ttl_seconds: Number(ttl) };
    const r = await fetch(`/api/v1/tenants/${page.dataset.tenant}/break-even`, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() }, body: JSON.stringify(payload) });
    return [r.ok, await r.json().catch(() => ({}))];
  }
  if (kind === "breakeven") {
    const form = document.getElementById("breakeven-form");
    let chart = null;
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const f = Object.fromEntries(new FormData(form).entries());
      const [ok, data] = await breakeven(form, f.model, f.context_tokens, f.ttl_seconds, f.queries_per_hour);
      if (!ok) { setText("breakeven-result", (data.error && data.error.message) || "Could not compute."); return; }
      setText("breakeven-result", `Break-even at ${Number(data.breakeven_queries_per_hour).toFixed(2)} queries/hour. ` +
        `At ${f.queries_per_hour}/h: ${usd(data.hourly_cost_with_cache_micros / 1e6)}/h with the cache, ` +
        `${usd(data.hourly_cost_without_cache_micros / 1e6)}/h without.`);
      const be = Number(data.breakeven_queries_per_hour);
      const xs = [], withC = [], without = [];
      const max = Math.max(10, Math.ceil((isFinite(be) ? be : 10) * 3));
      for (let q = 0; q <= max; q += max / 30) {
        xs.push(q.toFixed(1));
        without.push(q * data.miss_cost_micros / 1e6);
        withC.push((data.storage_per_hour_micros + q * data.hit_cost_micros) / 1e6);
      }
      if (chart) chart.destroy();
      chart = new window.Chart(document.getElementById("breakeven-chart"), {
        type: "line", data: { labels: xs, datasets: [
          { label: "cost/hour with cache ($)", data: withC, borderColor: "#27ab83" },
          { label: "cost/hour without cache ($)", data: without, borderColor: "#d64545" } ] },
        options: { animation: false, scales: { x: { title: { display: true, text: "queries per hour" } } } },
      });
    });
    form.requestSubmit();
  }
  const position = document.getElementById("breakeven-position");
  if (position && position.dataset.tokens !== "0") {
    breakeven(null, position.dataset.model, position.dataset.tokens, position.dataset.ttl, position.dataset.rate).then(([ok, d]) => {
      if (!ok) { position.textContent = (d.error && d.error.message) || "No price for this model."; return; }
      const be = Number(d.breakeven_queries_per_hour), rate = Number(position.dataset.rate);
      position.textContent = `Observed ${rate.toFixed(2)} queries/hour against a break-even of ${isFinite(be) ? be.toFixed(2) : "∞"}: ` +
        (rate >= be ? "this cache pays for itself." : "this cache costs more than it saves at the current rate.");
    });
  }

  // --- Boot ------------------------------------------------------------------------
  window.addEventListener("load", () => {
    const initial = document.getElementById("initial-summary");
    if (initial) {
      const s = JSON.parse(initial.textContent);
      state.chart = hitChart(s.hit_series || []);
    }
    connect(0);
  });
})();
