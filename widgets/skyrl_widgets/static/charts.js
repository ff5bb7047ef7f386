// One SVG chart panel (skyrl_widgets.charts.MetricChart). No build step.
// Python sends everything drawn: the series, the axes' ranges and ticks, the colours (CSS variables).
// Drawn at the panel's real width (so text keeps its CSS size), shapes clipped to the frame, and a
// read-out of the step under the pointer.
const NS = "http://www.w3.org/2000/svg";
const M = { l: 48, r: 12, t: 8, b: 34 };  // room for the y ticks, the x ticks and the axis label
const PAD = 6;                            // inside the frame: markers and bars never touch it

// An id no other element on the page has. anywidget loads this module once per widget model, so a
// module-level counter starts again at 1 for every chart, and `url(#id)` resolves to the first element
// with that id in the whole page: another chart's clip rect.
function uniqueId(prefix) {
  const random = globalThis.crypto?.randomUUID?.() ||
    `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}-${Math.random().toString(36).slice(2)}`;
  return `${prefix}-${random}`;
}

function svgEl(tag, attrs, parent) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (parent) parent.appendChild(e);
  return e;
}

function fmt(v) {
  if (!Number.isFinite(v)) return "–";
  const a = Math.abs(v);
  if (a >= 1e6) return v.toExponential(2);
  if (a >= 100) return v.toFixed(0);
  return String(Number(v.toPrecision(3)));
}

// A range from the data, for a chart Python sent no axis for.
function dataRange(series, index) {
  let lo = Infinity, hi = -Infinity;
  const stacks = new Map();
  for (const s of series) {
    for (const p of s.points || []) {
      if (index === 0) { lo = Math.min(lo, p[0]); hi = Math.max(hi, p[0]); continue; }
      if (s.kind === "bar") {
        const top = (stacks.get(p[0]) || 0) + p[1];
        stacks.set(p[0], top);
        lo = Math.min(lo, 0); hi = Math.max(hi, top);
      } else {
        for (const y of p.slice(1)) { lo = Math.min(lo, y); hi = Math.max(hi, y); }
      }
    }
  }
  if (!Number.isFinite(lo)) { lo = 0; hi = 1; }
  if (hi === lo) { lo -= 0.5; hi += 0.5; }
  return [lo, hi];
}

function axisOf(given, series, index) {
  if (given && Array.isArray(given.range)) return given;
  const [lo, hi] = dataRange(series, index);
  return { range: [lo, hi], ticks: [[lo, fmt(lo)], [hi, fmt(hi)]] };
}

function draw(model, el, state) {
  const series = model.get("series") || [];
  const H = model.get("height") || 200;
  const W = Math.max(240, Math.floor(state.plot.getBoundingClientRect().width || el.clientWidth || 460));
  state.drawnWidth = W;
  const xa = axisOf(model.get("x_axis"), series, 0);
  const ya = axisOf(model.get("y_axis"), series, 1);
  const [x0, x1] = xa.range, [y0, y1] = ya.range;
  const fx0 = M.l, fx1 = W - M.r, fy0 = M.t, fy1 = H - M.b;   // the frame
  const bars = series.filter((s) => s.kind === "bar");
  const slots = Math.max(1, x1 - x0 + 1);
  const barW = bars.length ? Math.max(1, ((fx1 - fx0 - 2 * PAD) / slots) * 0.8) : 0;
  const inX = Math.max(PAD, barW / 2 + 1);
  const clampX = (x) => Math.min(Math.max(x, x0), x1);
  const clampY = (y) => Math.min(Math.max(y, y0), y1);
  const px = (x) => fx0 + inX + ((clampX(x) - x0) / ((x1 - x0) || 1)) * (fx1 - fx0 - 2 * inX);
  const py = (y) => fy0 + PAD + (1 - (clampY(y) - y0) / ((y1 - y0) || 1)) * (fy1 - fy0 - 2 * PAD);

  state.title.textContent = model.get("title") || "";
  state.subtitle.textContent = model.get("subtitle") || "";
  state.subtitle.style.display = model.get("subtitle") ? "" : "none";
  state.plot.querySelector("svg")?.remove();
  const svg = svgEl("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "sk-chart-svg" });
  state.plot.prepend(svg);
  const clipId = `${state.id}-clip`;
  const clip = svgEl("clipPath", { id: clipId }, svgEl("defs", {}, svg));
  svgEl("rect", { x: fx0, y: fy0, width: fx1 - fx0, height: fy1 - fy0 }, clip);

  for (const [v, label] of ya.ticks || []) {
    if (v < y0 || v > y1) continue;
    svgEl("line", { x1: fx0, x2: fx1, y1: py(v), y2: py(v), class: "sk-chart-grid" }, svg);
    svgEl("text", { x: fx0 - 5, y: py(v) + 4, "text-anchor": "end", class: "sk-chart-tick sk-y-tick", "data-value": v },
      svg).textContent = label;
  }
  for (const [v, label] of xa.ticks || []) {
    if (v < x0 || v > x1) continue;
    svgEl("line", { x1: px(v), x2: px(v), y1: fy1, y2: fy1 + 4, class: "sk-chart-axis" }, svg);
    svgEl("text", { x: px(v), y: fy1 + 16, "text-anchor": "middle", class: "sk-chart-tick sk-x-tick", "data-value": v },
      svg).textContent = label;
  }
  if (xa.label) svgEl("text", { x: fx1, y: H - 3, "text-anchor": "end", class: "sk-chart-axis-label" }, svg).textContent = xa.label;
  svgEl("rect", { x: fx0, y: fy0, width: fx1 - fx0, height: fy1 - fy0, class: "sk-chart-frame" }, svg);

  const plot = svgEl("g", { "clip-path": `url(#${clipId})`, class: "sk-chart-data" }, svg);
  const selected = model.get("selected_step");
  if (selected !== null && selected !== undefined && selected >= x0 && selected <= x1) {
    svgEl("line", { x1: px(selected), x2: px(selected), y1: fy0, y2: fy1, class: "sk-chart-selected" }, plot);
  }
  // bars first (stacked in series order), then bands, then lines and markers on top
  const base = new Map();
  for (const s of bars) {
    const g = svgEl("g", { class: "sk-series sk-bars", "data-name": s.name }, plot);
    for (const [x, v] of s.points || []) {
      const b = base.get(x) || 0;
      const top = py(b + v), bottom = py(b);
      const r = svgEl("rect", { x: px(x) - barW / 2, y: top, width: barW, height: Math.max(0, bottom - top) }, g);
      r.style.fill = s.colour;
      base.set(x, b + v);
    }
  }
  for (const s of series.filter((q) => q.kind === "band")) {
    const pts = s.points || [];
    if (pts.length < 2) continue;
    const up = pts.map((p) => `${px(p[0]).toFixed(1)},${py(p[2]).toFixed(1)}`);
    const down = pts.slice().reverse().map((p) => `${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`);
    const g = svgEl("g", { class: "sk-series sk-band", "data-name": s.name }, plot);
    const poly = svgEl("polygon", { points: up.concat(down).join(" "), "fill-opacity": 0.16 }, g);
    poly.style.fill = s.colour;
  }
  for (const s of series.filter((q) => q.kind === "line")) {
    const pts = s.points || [];
    const g = svgEl("g", { class: "sk-series sk-line", "data-name": s.name }, plot);
    if (pts.length > 1) {
      const line = svgEl("polyline", {
        points: pts.map((p) => `${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`).join(" "),
        fill: "none", "stroke-width": s.width || 1.8, "stroke-dasharray": s.dash || "none", "stroke-linejoin": "round",
      }, g);
      line.style.stroke = s.colour;
    }
    if (s.markers || pts.length === 1) {
      const radius = pts.length > 150 ? 2 : 3;
      for (const [x, y] of pts) {
        const c = svgEl("circle", { cx: px(x), cy: py(y), r: radius, class: "sk-point", "data-step": x }, g);
        c.style.fill = s.colour;
      }
    }
  }
  if (!series.some((s) => (s.points || []).length)) {
    svgEl("text", { x: (fx0 + fx1) / 2, y: (fy0 + fy1) / 2, "text-anchor": "middle", class: "sk-chart-empty" }, svg)
      .textContent = "no points yet";
  }

  // what the read-out and clicks look up: every step with a value, and each series' value there
  const byStep = new Map();
  for (const s of series) {
    for (const p of s.points || []) {
      if (!byStep.has(p[0])) byStep.set(p[0], []);
      byStep.get(p[0]).push([s, p]);
    }
  }
  const steps = Array.from(byStep.keys()).sort((a, b) => a - b);
  state.hoverAt = (clientX) => {
    state.guide?.remove();
    // the pointer in this SVG's own units, from where the SVG is on screen now (after any resize or
    // scaling), then the step there by this chart's own x scale
    const box = svg.getBoundingClientRect();
    if (!box.width || !steps.length) { state.tip.style.display = "none"; return; }
    const x = (clientX - box.left) * (W / box.width);
    if (x < fx0 || x > fx1) { state.tip.style.display = "none"; return; }
    const at = x0 + ((x - fx0 - inX) / ((fx1 - fx0 - 2 * inX) || 1)) * (x1 - x0);
    let best = steps[0];
    for (const s of steps) if (Math.abs(s - at) < Math.abs(best - at)) best = s;
    state.guide = svgEl("line", { x1: px(best), x2: px(best), y1: fy0, y2: fy1, class: "sk-chart-guide" }, plot);
    state.tip.replaceChildren();
    const head = document.createElement("div");
    head.className = "sk-hover-step";
    head.textContent = `step ${best}`;
    state.tip.appendChild(head);
    let total = 0;
    for (const [s, p] of byStep.get(best)) {
      const row = document.createElement("div");
      const key = document.createElement("i");
      key.style.background = s.colour;
      const value = s.kind === "band" ? `±${fmt((p[2] - p[1]) / 2)}` : fmt(p[1]);  // a band: its half width
      if (s.kind === "bar") total += p[1];
      row.append(key, document.createTextNode(`${s.name} ${value}`));
      state.tip.appendChild(row);
    }
    if (bars.length > 1) {
      const row = document.createElement("div");
      row.textContent = `total ${fmt(total)}`;
      state.tip.appendChild(row);
    }
    state.tip.style.display = "block";
    const width = state.tip.offsetWidth;
    const left = px(best) + 12 + width > W ? px(best) - 12 - width : px(best) + 12;
    state.tip.style.left = `${Math.max(0, left)}px`;
    state.tip.style.top = `${fy0 + 4}px`;
  };
  svg.addEventListener("mousemove", (ev) => { state.pointer = ev.clientX; state.hoverAt(ev.clientX); });
  svg.addEventListener("mouseleave", () => { state.pointer = null; state.guide?.remove(); state.tip.style.display = "none"; });
  if (state.pointer !== null && state.pointer !== undefined) state.hoverAt(state.pointer);  // redrawn under the pointer

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

  state.legend.replaceChildren();
  for (const s of series) {
    const item = document.createElement("span");
    item.className = "sk-legend-item";
    const key = svgEl("svg", { width: 18, height: 10, class: "sk-legend-key" });
    if (s.kind === "line") {
      const l = svgEl("line", { x1: 1, x2: 17, y1: 5, y2: 5, "stroke-width": Math.min(3, s.width || 2),
        "stroke-dasharray": s.dash || "none" }, key);
      l.style.stroke = s.colour;
    } else {
      const r = svgEl("rect", { x: 3, y: 0, width: 12, height: 10, "fill-opacity": s.kind === "band" ? 0.3 : 1 }, key);
      r.style.fill = s.colour;
    }
    item.append(key, document.createTextNode(s.note ? `${s.name} ${s.note}` : s.name));
    state.legend.appendChild(item);
  }
}

function render({ model, el }) {
  el.classList.add("skyrl-chart");
  const state = { id: uniqueId("sk-chart"), pointer: null, guide: null, drawnWidth: 0 };
  el.dataset.chartId = state.id;
  state.title = document.createElement("div");
  state.title.className = "sk-chart-title";
  state.subtitle = document.createElement("div");
  state.subtitle.className = "sk-chart-subtitle";
  state.plot = document.createElement("div");
  state.plot.className = "sk-chart-plot";
  state.tip = document.createElement("div");
  state.tip.className = "sk-chart-hover";
  state.plot.appendChild(state.tip);
  state.legend = document.createElement("div");
  state.legend.className = "sk-chart-legend";
  el.replaceChildren(state.title, state.subtitle, state.plot, state.legend);
  let frame = null;
  const redraw = () => {
    if (frame !== null) return;
    frame = requestAnimationFrame(() => { frame = null; draw(model, el, state); });
  };
  const events = ["change:series", "change:title", "change:subtitle", "change:height", "change:selected_step",
                  "change:x_axis", "change:y_axis"];
  for (const e of events) model.on(e, redraw);
  // redraw whenever the panel's width differs from the width the SVG was drawn at (not from the last width
  // seen: a theme switch can pass through a transient width, and a draw made then must not stick)
  const resize = new ResizeObserver(() => {
    const w = Math.floor(state.plot.getBoundingClientRect().width);
    if (w && Math.max(240, w) !== state.drawnWidth) redraw();
  });
  resize.observe(state.plot);
  // and after a JupyterLab theme switch, once its stylesheet has applied
  const theme = new MutationObserver(() => { redraw(); setTimeout(redraw, 300); });
  theme.observe(document.body, { attributes: true, attributeFilter: ["data-jp-theme-name", "data-jp-theme-light"] });
  draw(model, el, state);
  return () => {
    for (const e of events) model.off(e, redraw);
    resize.disconnect();
    theme.disconnect();
    if (frame !== null) cancelAnimationFrame(frame);
  };
}

export default { render };
