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
  const chart = document.getElementById("throughput");
  if (chart && chart.querySelector("svg")) pollThroughput(chart);
});
