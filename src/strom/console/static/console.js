// Strom console: small progressive enhancements. Pages work without it; this adds live numbers.
"use strict";

function formatNumber(value) {
  return value === null || value === undefined ? "–" : Number(value).toLocaleString("en-US");
}

function formatBytesRate(value) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = value;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return (i === 0 ? Math.round(v) : v.toFixed(1)) + " " + units[i] + "/s";
}

// Fields shown only for one value of a <select data-mode> (offset / timestamp inputs).
function wireModes(form) {
  const select = form.querySelector("select[data-mode]");
  if (!select) return;
  const update = () => {
    form.querySelectorAll("[data-for-mode]").forEach((el) => {
      el.hidden = el.dataset.forMode !== select.value;
    });
  };
  select.addEventListener("change", update);
  update();
}

// A destructive button stays disabled until the typed text matches (the server checks again).
function wireConfirm(form) {
  const input = form.querySelector("[data-must-match]");
  const button = form.querySelector("[data-confirm-button]");
  if (!input || !button) return;
  const update = () => { button.disabled = input.value.trim() !== input.dataset.mustMatch; };
  input.addEventListener("input", update);
  update();
}

// Live consumer-group numbers: state, members, lag per partition and in total.
function pollGroup(root) {
  const url = root.dataset.poll;
  const tick = async () => {
    try {
      const response = await fetch(url, { headers: { Accept: "application/json" } });
      const data = await response.json();
      if (!response.ok) throw new Error(data.error || response.statusText);
      root.querySelectorAll("[data-field]").forEach((el) => {
        const value = data[el.dataset.field];
        el.textContent = typeof value === "number" ? formatNumber(value) : value;
      });
      for (const row of data.partitions) {
        const tr = document.querySelector(`tr[data-tp="${CSS.escape(row.topic + ":" + row.partition)}"]`);
        if (!tr) continue;
        tr.querySelectorAll("[data-col]").forEach((td) => { td.textContent = formatNumber(row[td.dataset.col]); });
      }
      root.classList.remove("stale");
    } catch (err) {
      root.classList.add("stale");
    }
  };
  setInterval(tick, 3000);
}

// Message browser: a click (or Enter) on a compact row shows its detail row below it.
function toggleRecord(tr) {
  const detail = tr.nextElementSibling;
  if (!detail || !detail.classList.contains("detail")) return;
  detail.hidden = !detail.hidden;
  tr.setAttribute("aria-expanded", String(!detail.hidden));
}

function wireMessages(table) {
  table.addEventListener("click", (event) => {
    if (window.getSelection && String(window.getSelection()).length > 0) return;  // selecting text, not toggling
    const tr = event.target.closest("tr.record");
    if (tr) toggleRecord(tr);
  });
  table.addEventListener("keydown", (event) => {
    const tr = event.target.closest("tr.record");
    if (tr && (event.key === "Enter" || event.key === " ")) { event.preventDefault(); toggleRecord(tr); }
  });
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

// One rendered key/value/header (as the server's "shown" macro builds it), from /api/tail's JSON: text only.
function shownNode(r, cls) {
  if (r.kind === "null") return el("span", "null", "null");
  if (r.kind === "empty") return el("span", "null", "(empty)");
  const pre = el("pre", cls + " " + r.kind, r.text);
  pre.dataset.kind = r.kind;
  return pre;
}

function recordRows(m) {
  const tr = el("tr", "record new");
  tr.dataset.offset = m.offset;
  tr.dataset.partition = m.partition;
  tr.tabIndex = 0;
  tr.setAttribute("aria-expanded", "false");
  tr.append(el("td", "num", String(m.partition)), el("td", "num", String(m.offset)),
            el("td", "nowrap", m.timestamp));
  for (const [cls, r] of [["key", m.key], ["value", m.value]]) {
    const td = el("td", cls);
    td.append(el("span", "preview " + r.kind, r.preview));
    tr.append(td);
  }
  tr.append(el("td", "num header-count", m.headers.length ? String(m.headers.length) : "–"));
  const detail = el("tr", "detail");
  detail.hidden = true;
  const td = el("td");
  td.colSpan = 6;
  const dl = el("dl", "record-detail");
  const headers = el("dd", "headers");
  for (const [name, v] of m.headers) {
    const div = el("div", "header");
    div.append(el("span", "mono", name), document.createTextNode(": "), shownNode(v, "header"));
    headers.append(div);
  }
  if (!m.headers.length) headers.append(el("span", "muted", "–"));
  const key = el("dd", "key"); key.append(shownNode(m.key, "key"));
  const value = el("dd", "value"); value.append(shownNode(m.value, "value"));
  dl.append(el("dt", "", "Key"), key, el("dt", "", "Value"), value, el("dt", "", "Headers"), headers,
            el("dt", "", "Timestamp"), el("dd", "small", m.timestamp + " · " + (m.timestamp_type || "no type")));
  td.append(dl);
  detail.append(td);
  return [tr, detail];
}

// Live tail: asks /api/tail every 2 s for what arrived since the last answer, newest rows on top.
function wireLive(root, table) {
  const button = root.querySelector("#live-toggle");
  const status = root.querySelector("#live-status");
  const tbody = table.querySelector("tbody");
  let from = root.dataset.from;
  let timer = null;
  let seen = 0;
  const tick = async () => {
    try {
      const url = root.dataset.url + "&from=" + encodeURIComponent(from);
      const response = await fetch(url, { headers: { Accept: "application/json" } });
      const data = await response.json();
      if (!response.ok) throw new Error(data.error || response.statusText);
      from = data.from;
      const empty = tbody.querySelector("tr.empty-result");
      if (empty && data.records.length) empty.remove();
      for (const m of data.records) tbody.prepend(...recordRows(m));
      seen += data.records.length;
      status.textContent = "live · " + seen + " new · " + new Date().toLocaleTimeString();
      root.classList.remove("stale");
    } catch (err) {
      status.textContent = "live tail paused: " + err.message;
      root.classList.add("stale");
    }
  };
  button.addEventListener("click", () => {
    if (timer === null) {
      tick();
      timer = setInterval(tick, 2000);
      button.textContent = "Stop live tail";
      button.setAttribute("aria-pressed", "true");
    } else {
      clearInterval(timer);
      timer = null;
      button.textContent = "Live tail";
      button.setAttribute("aria-pressed", "false");
      status.textContent = "stopped";
    }
  });
  root.hidden = false;
}

// Topics list: a filter box that hides rows whose name does not contain the typed text.
function wireFilter(input) {
  const table = document.getElementById(input.dataset.filter);
  const count = document.getElementById(input.dataset.filter + "-count");
  const update = () => {
    const needle = input.value.trim().toLowerCase();
    let shown = 0;
    table.querySelectorAll("tbody tr[data-name]").forEach((tr) => {
      tr.hidden = needle !== "" && !tr.dataset.name.toLowerCase().includes(needle);
      if (!tr.hidden) shown += 1;
    });
    if (count) count.textContent = needle ? shown + " match" + (shown === 1 ? "" : "es") : "";
  };
  input.addEventListener("input", update);
  update();
}

// Throughput chart: a hand-drawn SVG of the last samples of /api/throughput.
const SERIES = [
  { key: "bytes_in", cls: "in", format: formatBytesRate, scale: "bytes" },
  { key: "bytes_out", cls: "out", format: formatBytesRate, scale: "bytes" },
  { key: "messages_in", cls: "msg", format: (v) => formatNumber(Math.round(v)) + " msg/s", scale: "messages" },
];

function drawChart(root, data) {
  const svg = root.querySelector("svg");
  const status = root.querySelector("[data-status]");
  const ns = "http://www.w3.org/2000/svg";
  const width = 800, height = 220, pad = 24;
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const points = data.points || [];
  if (data.error) {
    status.textContent = "metrics unavailable: " + data.error;
  } else if (points.length < 2) {
    status.textContent = "waiting for samples…";
  } else {
    const last = new Date(points[points.length - 1].t);
    status.textContent = "last sample " + last.toLocaleTimeString() + " · " + points.length + " points";
  }
  for (let i = 0; i <= 4; i += 1) {
    const y = pad + ((height - 2 * pad) * i) / 4;
    const grid = document.createElementNS(ns, "line");
    grid.setAttribute("x1", 0); grid.setAttribute("x2", width);
    grid.setAttribute("y1", y); grid.setAttribute("y2", y);
    grid.setAttribute("class", "grid");
    svg.appendChild(grid);
  }
  if (points.length < 2) return;
  const max = { bytes: 1, messages: 1 };
  for (const p of points) for (const s of SERIES) max[s.scale] = Math.max(max[s.scale], p[s.key]);
  const t0 = points[0].t, t1 = points[points.length - 1].t;
  for (const s of SERIES) {
    const line = document.createElementNS(ns, "polyline");
    const coords = points.map((p) => {
      const x = ((p.t - t0) / Math.max(t1 - t0, 1)) * width;
      const y = height - pad - (p[s.key] / max[s.scale]) * (height - 2 * pad);
      return x.toFixed(1) + "," + y.toFixed(1);
    });
    line.setAttribute("points", coords.join(" "));
    line.setAttribute("class", "series " + s.cls);
    svg.appendChild(line);
    const label = root.querySelector(`[data-last="${s.key}"]`);
    if (label) label.textContent = s.format(points[points.length - 1][s.key]);
  }
  // Text inside the stretched SVG would be distorted: the scale is written beside it instead.
  const scale = root.querySelector("[data-scale]");
  if (scale) {
    scale.textContent = "top line: " + formatBytesRate(max.bytes) + " · " + formatNumber(Math.round(max.messages)) + " msg/s";
  }
}

function pollThroughput(root) {
  const tick = async () => {
    try {
      const response = await fetch(root.dataset.url, { headers: { Accept: "application/json" } });
      drawChart(root, await response.json());
    } catch (err) {
      drawChart(root, { error: "the console did not answer", points: [] });
    }
  };
  tick();
  setInterval(tick, 2000);
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("form").forEach((form) => { wireModes(form); wireConfirm(form); });
  document.querySelectorAll("a[data-back]").forEach((a) => {
    a.addEventListener("click", (event) => {
      if (history.length > 1) { event.preventDefault(); history.back(); }
    });
  });
  const group = document.getElementById("group-live");
  if (group && group.dataset.poll) pollGroup(group);
  const messages = document.getElementById("messages");
  if (messages) wireMessages(messages);
  const live = document.getElementById("live");
  if (live && messages) wireLive(live, messages);
  document.querySelectorAll("input[data-filter]").forEach(wireFilter);
  const chart = document.getElementById("throughput");
  if (chart && chart.querySelector("svg")) pollThroughput(chart);
});
