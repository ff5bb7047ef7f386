// One SVG chart panel for the dashboard (skyrl_widgets.charts.MetricChart). No build step.
// Everything drawn comes from the synced `series` trait, so a view that renders late draws it all.
const NS = "http://www.w3.org/2000/svg";
const W = 460;
const M = { l: 46, r: 10, t: 22, b: 24 };

function svgEl(tag, attrs, parent) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (parent) parent.appendChild(e);
  return e;
}

function nice(v) {
  if (!Number.isFinite(v)) return "";
  const a = Math.abs(v);
  if (a >= 1e6) return v.toExponential(1);
  if (a >= 100) return v.toFixed(0);
  return String(Number(v.toPrecision(3)));
}

function ranges(series, yFloor) {
  let xmin = Infinity, xmax = -Infinity, ymin = Infinity, ymax = -Infinity;
  const stacks = new Map();
  for (const s of series) {
    for (const p of s.points || []) {
      xmin = Math.min(xmin, p[0]);
      xmax = Math.max(xmax, p[0]);
      if (s.kind === "bar") {
        const top = (stacks.get(p[0]) || 0) + p[1];
        stacks.set(p[0], top);
        ymax = Math.max(ymax, top);
        ymin = Math.min(ymin, 0);
      } else {
        for (const y of p.slice(1)) { ymin = Math.min(ymin, y); ymax = Math.max(ymax, y); }
      }
    }
  }
  if (!Number.isFinite(xmin)) { xmin = 0; xmax = 1; }
  if (!Number.isFinite(ymin)) { ymin = 0; ymax = 1; }
  if (yFloor !== null && yFloor !== undefined) ymin = Math.min(ymin, yFloor);
  if (xmax === xmin) { xmin -= 0.5; xmax += 0.5; }
  if (ymax === ymin) { ymin -= 0.5; ymax += 0.5; }
  const pad = (ymax - ymin) * 0.05;
  return { xmin, xmax, ymin: ymin - (yFloor === ymin ? 0 : pad), ymax: ymax + pad };
}

function draw(model, host) {
  const series = model.get("series") || [];
  const H = model.get("height") || 210;
  const r = ranges(series, model.get("y_floor"));
  const px = (x) => M.l + ((x - r.xmin) / (r.xmax - r.xmin)) * (W - M.l - M.r);
  const py = (y) => M.t + (1 - (y - r.ymin) / (r.ymax - r.ymin)) * (H - M.t - M.b);
  host.replaceChildren();
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, class: "sk-chart-svg", width: "100%" }, host);
  svgEl("text", { x: M.l, y: 14, class: "sk-chart-title" }, svg).textContent = model.get("title");
  const x2 = W - M.r, y2 = H - M.b;
  svgEl("rect", { x: M.l, y: M.t, width: x2 - M.l, height: y2 - M.t, class: "sk-chart-frame" }, svg);
  for (const f of [0, 0.5, 1]) {
    const y = r.ymin + f * (r.ymax - r.ymin);
    svgEl("line", { x1: M.l, x2, y1: py(y), y2: py(y), class: "sk-chart-grid" }, svg);
    svgEl("text", { x: M.l - 4, y: py(y) + 3, "text-anchor": "end", class: "sk-chart-tick" }, svg).textContent = nice(y);
  }
  svgEl("text", { x: M.l, y: y2 + 14, class: "sk-chart-tick" }, svg).textContent = nice(r.xmin);
  svgEl("text", { x: x2, y: y2 + 14, "text-anchor": "end", class: "sk-chart-tick" }, svg).textContent = `step ${nice(r.xmax)}`;

  const selected = model.get("selected_step");
  if (selected !== null && selected !== undefined && selected >= r.xmin && selected <= r.xmax) {
    svgEl("line", { x1: px(selected), x2: px(selected), y1: M.t, y2, class: "sk-chart-selected" }, svg);
  }
  // bars first (stacked in series order), then bands, then lines and markers on top
  const bars = series.filter((s) => s.kind === "bar");
  if (bars.length) {
    const xs = new Set(bars.flatMap((s) => (s.points || []).map((p) => p[0])));
    const width = Math.max(1, ((W - M.l - M.r) / Math.max(1, xs.size + 1)) * 0.85);
    const base = new Map();
    for (const s of bars) {
      const g = svgEl("g", { class: "sk-series sk-bars", "data-name": s.name }, svg);
      for (const [x, v] of s.points || []) {
        const b = base.get(x) || 0;
        const top = py(b + v), bottom = py(b);
        svgEl("rect", { x: px(x) - width / 2, y: top, width, height: Math.max(0.3, bottom - top), fill: s.colour }, g);
        base.set(x, b + v);
      }
    }
  }
  for (const s of series.filter((q) => q.kind === "band")) {
    const pts = s.points || [];
    if (pts.length < 2) continue;
    const up = pts.map((p) => `${px(p[0]).toFixed(1)},${py(p[2]).toFixed(1)}`);
    const down = pts.slice().reverse().map((p) => `${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`);
    svgEl("polygon", { points: up.concat(down).join(" "), fill: s.colour, "fill-opacity": 0.18, class: "sk-series sk-band" }, svg);
  }
  for (const s of series.filter((q) => q.kind === "line")) {
    const pts = s.points || [];
    const g = svgEl("g", { class: "sk-series sk-line", "data-name": s.name }, svg);
    if (pts.length > 1) {
      svgEl("polyline", {
        points: pts.map((p) => `${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`).join(" "),
        fill: "none", stroke: s.colour, "stroke-width": 1.8, "stroke-dasharray": s.dash || "none",
      }, g);
    }
    if (s.markers || pts.length === 1) {
      const radius = pts.length > 150 ? 2 : 3;
      for (const [x, y] of pts) {
        const c = svgEl("circle", { cx: px(x), cy: py(y), r: radius, fill: s.colour, class: "sk-point", "data-step": x }, g);
        svgEl("title", {}, c).textContent = `step ${x}: ${s.name} ${nice(y)}`;
      }
    }
  }
  // a click anywhere in the plot picks the nearest point of a clickable series
  if (model.get("clickable")) {
    svg.classList.add("sk-clickable");
    svg.addEventListener("click", (ev) => {
      const ctm = svg.getScreenCTM();
      if (!ctm) return;
      const pt = new DOMPoint(ev.clientX, ev.clientY).matrixTransform(ctm.inverse());
      let best = null, bestD = Infinity;
      for (const s of series.filter((q) => q.clickable)) {
        for (const [x, y] of s.points || []) {
          const d = Math.hypot(px(x) - pt.x, (py(y) - pt.y) * 0.25);
          if (d < bestD) { bestD = d; best = x; }
        }
      }
      if (best !== null && bestD < 40) model.send({ event: "click", step: best });
    });
  }
  const legend = document.createElement("div");
  legend.className = "sk-chart-legend";
  for (const s of series) {
    const item = document.createElement("span");
    const key = document.createElement("i");
    key.style.background = s.colour;
    if (s.kind === "band") key.style.opacity = "0.3";
    item.append(key, document.createTextNode(`${s.name} (${(s.points || []).length})`));
    legend.appendChild(item);
  }
  host.appendChild(legend);
}

function render({ model, el }) {
  el.classList.add("skyrl-chart");
  const redraw = () => draw(model, el);
  const events = ["change:series", "change:title", "change:height", "change:selected_step", "change:y_floor"];
  for (const e of events) model.on(e, redraw);
  redraw();
  return () => { for (const e of events) model.off(e, redraw); };
}

export default { render };
