// SITS live dashboard: polls /v1/dashboard/state once a second; no external assets.
"use strict";
(function () {
  const POLL_MS = 1000;
  const HISTORY = 120; // points kept per series (two minutes at one poll a second)
  const COLORS = ["#58a6ff", "#3fb950", "#d29922", "#f85149", "#bc8cff", "#39c5cf", "#ff7b72", "#e3b341"];
  const key = new URLSearchParams(location.hash.slice(1)).get("key");
  const latency = new Map(); // endpoint id -> [values]
  const inflight = new Map();
  let previous = null; // last state, for rates

  const $ = (id) => document.getElementById(id);
  const fmt = (v, digits = 1) => (v === null || v === undefined || Number.isNaN(v) ? "–" : Number(v).toFixed(digits));
  const pct = (num, den) => (den > 0 ? (100 * num / den).toFixed(1) + "%" : "–");

  function cell(row, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    row.appendChild(td);
    return td;
  }

  function push(series, id, value) {
    if (!series.has(id)) series.set(id, []);
    const values = series.get(id);
    values.push(value);
    if (values.length > HISTORY) values.shift();
  }

  function health(endpoint) {
    if (endpoint.available) return ["ok", endpoint.phase];
    if (endpoint.phase === "ready") return ["warn", endpoint.circuit === "open" ? "circuit open" : "ejected"];
    return ["bad", endpoint.phase];
  }

  function renderEndpoints(state) {
    const body = $("endpoints").tBodies[0];
    body.replaceChildren();
    for (const model of state.models) {
      for (const e of model.endpoints) {
        const row = document.createElement("tr");
        row.dataset.endpoint = e.id;
        cell(row, model.name);
        cell(row, e.id);
        const [cls, label] = health(e);
        const td = cell(row, label);
        const dot = document.createElement("span");
        dot.className = "dot " + cls;
        td.prepend(dot);
        cell(row, e.circuit);
        cell(row, fmt(e.weight, 2), "num");
        cell(row, fmt(e.dynamic_weight, 3), "num");
        cell(row, String(e.in_flight), "num");
        cell(row, fmt(e.latency_ewma_ms, 2) + " ms", "num");
        cell(row, fmt(e.latency_p95_ms, 2) + " ms", "num");
        cell(row, fmt(e.ttft_ewma_ms, 2) + " ms", "num");
        cell(row, (100 * e.error_rate).toFixed(1) + "%", "num");
        cell(row, fmt(e.qps, 1), "num");
        cell(row, e.concurrency_limit === null ? "–" : String(e.concurrency_limit), "num");
        body.appendChild(row);
        push(latency, e.id, e.latency_ewma_ms);
        push(inflight, e.id, e.in_flight);
      }
    }
  }

  function renderDecisions(state) {
    const body = $("decisions").tBodies[0];
    body.replaceChildren();
    for (const d of state.decisions.slice(0, 25)) {
      const row = document.createElement("tr");
      cell(row, new Date(d.at * 1000).toLocaleTimeString());
      cell(row, d.request_id);
      cell(row, d.model);
      cell(row, d.endpoint);
      cell(row, String(d.status), "num");
      cell(row, fmt(d.latency_ms, 2) + " ms", "num");
      cell(row, d.route, "route");
      cell(row, d.attempts, "route");
      body.appendChild(row);
    }
  }

  function renderKpis(state) {
    const t = state.totals;
    $("kpi-requests").textContent = String(t.requests ?? 0);
    if (previous && previous.totals) {
      const dt = Math.max(0.001, state.now - previous.now);
      const p = previous.totals;
      const requests = t.requests - p.requests;
      $("kpi-rps").textContent = fmt(requests / dt, 1);
      $("kpi-errors").textContent = pct(t.errors - p.errors, requests);
      $("kpi-cache").textContent = pct(t.cache_hits - p.cache_hits, t.cache_lookups - p.cache_lookups);
      $("kpi-fallbacks").textContent = pct(t.fallbacks - p.fallbacks, requests);
      $("kpi-retries").textContent = fmt((t.retries - p.retries) / dt, 2);
    } else {
      $("kpi-errors").textContent = pct(t.errors, t.requests);
      $("kpi-cache").textContent = pct(t.cache_hits, t.cache_lookups);
      $("kpi-fallbacks").textContent = pct(t.fallbacks, t.requests);
    }
    const tr = state.tracing;
    $("kpi-tracing").textContent = tr.enabled ? `${tr.state} · ratio ${tr.sampling_ratio} · ${tr.exported_spans} spans` : "off";
  }

  const usd = (v) => (v === null || v === undefined ? "–" : "$" + Number(v).toFixed(4));

  function limitCell(row, limit) {
    if (!limit) return cell(row, "–", "num");
    const used = limit.in_use === null ? "?"
      : Number.isInteger(limit.in_use) ? String(limit.in_use) : fmt(limit.in_use, limit.in_use < 10 ? 1 : 0);
    const td = cell(row, `${used} / ${limit.limit}`, "num");
    if (limit.in_use !== null && limit.in_use >= limit.limit) td.classList.add("over");
    return td;
  }

  function tenantRow(body, r, withTeam) {
    const row = document.createElement("tr");
    row.dataset[withTeam ? "key" : "team"] = r.id;
    cell(row, r.name === r.id ? r.id : `${r.name} (${r.id})`);
    if (withTeam) cell(row, r.team);
    cell(row, r.period);
    cell(row, usd(r.spent_usd), "num");
    cell(row, usd(r.soft_usd), "num");
    cell(row, usd(r.hard_usd), "num");
    const cap = r.hard_usd ?? r.soft_usd;
    const used = cell(row, cap ? pct(r.spent_usd, cap) : "–", "num");
    if (r.hard_usd && r.spent_usd >= r.hard_usd) used.classList.add("over");
    else if (r.soft_usd && r.spent_usd >= r.soft_usd) used.classList.add("soft");
    for (const name of ["rpm", "tpm", "concurrency"]) limitCell(row, r.limits[name]);
    body.appendChild(row);
  }

  function renderTenants(state) {
    const section = $("tenants");
    const t = state.tenants;
    section.hidden = !t;
    if (!t) return;
    const m = t.limits;
    $("tenants-mode").textContent = m.mode === "redis"
      ? `· limits global (Redis) · ${m.live_replicas} live replicas`
      : `· limits local (${m.mode}): share ${m.share} of each limit, ${m.live_replicas} live replicas`;
    for (const [id, rows, withTeam] of [["tenant-teams", t.teams, false], ["tenant-keys", t.keys, true]]) {
      const body = $(id).tBodies[0];
      body.replaceChildren();
      for (const r of rows) tenantRow(body, r, withTeam);
    }
  }

  function drawChart(canvas, series) {
    const ctx = canvas.getContext("2d");
    const w = canvas.width, h = canvas.height, pad = 28;
    ctx.clearRect(0, 0, w, h);
    let max = 0;
    for (const values of series.values()) for (const v of values) max = Math.max(max, v);
    max = max > 0 ? max * 1.1 : 1;
    ctx.strokeStyle = "#2a3642";
    ctx.fillStyle = "#8a96a3";
    ctx.font = "10px sans-serif";
    for (let i = 0; i <= 4; i++) {
      const y = pad / 2 + (h - pad) * i / 4;
      ctx.beginPath(); ctx.moveTo(pad, y); ctx.lineTo(w, y); ctx.stroke();
      ctx.fillText(fmt(max * (1 - i / 4), max < 10 ? 1 : 0), 0, y + 3);
    }
    let index = 0;
    for (const values of series.values()) {
      ctx.strokeStyle = COLORS[index++ % COLORS.length];
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      values.forEach((v, i) => {
        const x = pad + (w - pad) * i / (HISTORY - 1);
        const y = pad / 2 + (h - pad) * (1 - v / max);
        if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
      });
      ctx.stroke();
    }
  }

  function renderLegend() {
    const legend = $("legend");
    legend.replaceChildren();
    let index = 0;
    for (const id of latency.keys()) {
      const span = document.createElement("span");
      span.style.color = COLORS[index++ % COLORS.length];
      span.textContent = "■ " + id;
      legend.appendChild(span);
    }
  }

  async function poll() {
    try {
      const response = await fetch("/v1/dashboard/state", { headers: key ? { Authorization: "Bearer " + key } : {} });
      if (!response.ok) {
        const body = await response.json().catch(() => ({}));
        throw new Error((body.error && body.error.message) || "HTTP " + response.status);
      }
      const state = await response.json();
      renderEndpoints(state);
      renderDecisions(state);
      renderKpis(state);
      renderTenants(state);
      drawChart($("chart-latency"), latency);
      drawChart($("chart-inflight"), inflight);
      renderLegend();
      previous = state;
      $("status").textContent = `live · registry v${state.registry_version} · updated ${new Date().toLocaleTimeString()}`;
      document.body.dataset.loaded = "1";
    } catch (error) {
      $("status").textContent = "error: " + error.message;
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  poll();
})();
