// Trajectory inspector: the browser half of skyrl_widgets.TrajectoryInspector (anywidget, no build).
// The kernel sends one page of groups in `view`; everything here is drawing and sending choices back.
// `h` and `rewardColour` are dom.js's (skyrl_widgets._static.esm puts it before this file).

const ROLE_CLASS = {
  user: "user", system: "system", assistant: "assistant",
  tool_call: "tool-call", "tool-call": "tool-call", function_call: "tool-call", tool_calls: "tool-call",
  tool: "observation", observation: "observation", env: "observation", environment: "observation",
  function: "observation", ipython: "observation",
};
const SORT_LABELS = {
  group: "group order", reward_desc: "mean reward ↓", reward_asc: "mean reward ↑",
  std_desc: "reward spread ↓", length_desc: "length ↓", discarded_first: "discarded first",
};

const fmt = (x, d = 2) => (x === null || x === undefined || Number.isNaN(x) ? "–" : Number(x).toFixed(d));
const signed = (x, d = 2) => (x === null || x === undefined ? "–" : (x > 0 ? "+" : "") + Number(x).toFixed(d));

// Colours are JupyterLab's theme variables mixed over the page, so text keeps the theme's own colour
// (readable in light and dark); a reward's badge is dom.js's rewardColour.

// Every token gets a colour (at least a faint one), so a heatmap covers the whole completion:
// log-prob: likely tokens green, unlikely red; advantage: positive green, negative red, zero grey.
function tokenColour(mode, value) {
  if (value === null || value === undefined) return "var(--sk-muted-bg)";
  if (mode === "logprob") {
    const p = Math.exp(Math.min(0, value));
    const red = Math.round(100 * (1 - p));
    return `color-mix(in srgb, color-mix(in srgb, var(--jp-error-color1, #d32f2f) ${red}%, var(--jp-success-color1, #388e3c)) ${Math.round(22 + 40 * (1 - p))}%, transparent)`;
  }
  const a = Math.max(-1, Math.min(1, value));
  if (Math.abs(a) < 1e-6) return "var(--sk-muted-bg)";
  const c = a > 0 ? "var(--jp-success-color1, #388e3c)" : "var(--jp-error-color1, #d32f2f)";
  return `color-mix(in srgb, ${c} ${Math.round(22 + 45 * Math.abs(a))}%, transparent)`;
}

// [text, is_special] runs (Python's special_parts): the chat template's markup dimmed, the words as they are
function parts(list) {
  return (list || []).map(([text, special]) => (special ? h("span", { class: "sk-special" }, text) : text));
}

function tokenSpans(tokens, mode, start = 0, end = null) {
  const values = tokens[mode];
  const stop = end === null ? tokens.text.length : Math.min(end, tokens.text.length);
  const out = [];
  for (let i = Math.max(0, start); i < stop; i++) {
    const v = values ? values[i] : null;
    const lp = tokens.logprob ? tokens.logprob[i] : null;
    const adv = tokens.advantage ? tokens.advantage[i] : null;
    const special = tokens.special && tokens.special[i];
    out.push(h("span", {
      class: special ? "sk-tok sk-special" : "sk-tok", style: `background:${tokenColour(mode, v)}`, "data-value": v ?? "",
      title: `#${i}  logprob ${fmt(lp, 3)}  advantage ${fmt(adv, 3)}`,
    }, tokens.text[i]));
  }
  return out;
}

function renderTurns(sample, mode) {
  const useTokens = mode !== "off" && sample.tokens && sample.tokens[mode];
  return sample.turns.map((t) => {
    const role = String(t.role || "").toLowerCase();
    const cls = ROLE_CLASS[role] || "other";
    const hasRange = useTokens && Number.isInteger(t.token_start) && Number.isInteger(t.token_end);
    const body = hasRange ? tokenSpans(sample.tokens, mode, t.token_start, t.token_end) : parts(t.parts || [[t.content, false]]);
    return h("div", { class: `sk-turn sk-role-${cls}` },
      h("div", { class: "sk-role" }, role.replace("_", " ") || "turn"),
      h("div", { class: "sk-content" }, body));
  });
}

function renderSample(sample, mode) {
  const useTokens = mode !== "off" && sample.tokens && sample.tokens[mode];
  let body;
  if (sample.turns && sample.turns.length) body = renderTurns(sample, mode);
  else if (useTokens) body = h("div", { class: "sk-content sk-completion sk-heat" }, tokenSpans(sample.tokens, mode));
  else body = h("div", { class: "sk-content sk-completion" }, parts(sample.response_parts || [[sample.response, false]]),
    sample.truncated ? " …" : "");
  const classes = ["sk-sample"];
  if (!sample.match) classes.push("sk-dim");
  if (sample.discarded_reason) classes.push("sk-discarded");
  const tag = (label, value, cls = "", style = "") => h("span", { class: `sk-badge ${cls}`, style, title: label },
    h("span", { class: "sk-tag-label" }, label), " ", value);
  return h("div", { class: classes.join(" "), "data-uid": sample.uid },
    h("div", { class: "sk-badges" },
      tag("reward", fmt(sample.reward), "sk-reward", `background:${rewardColour(sample.reward)}`),
      tag("advantage", signed(sample.advantage)),
      tag("length", `${sample.num_tokens} tok`),
      tag("finish", sample.finish_reason || "?", `sk-finish-${sample.finish_reason || "unknown"}`),
      ...Object.entries(sample.reward_parts || {}).map(([name, v]) => tag(name, fmt(v), "sk-reward-part"))),
    sample.discarded_reason ? h("div", { class: "sk-discard-reason" }, `discarded: ${sample.discarded_reason}`) : null,
    sample.reward_error ? h("div", { class: "sk-reward-error" }, `reward error: ${sample.reward_error}`) : null,
    body);
}

// The prompt as chat turns (Python's chat_turns), or its raw text with the template's markup dimmed.
function renderPrompt(g, raw) {
  if (raw || !g.prompt_turns) return h("div", { class: "sk-prompt-raw" }, parts(g.prompt_parts || [[g.prompt, false]]));
  return g.prompt_turns.map((t) => {
    const role = String(t.role || "").toLowerCase();
    return h("div", { class: `sk-turn sk-role-${ROLE_CLASS[role] || "other"}${t.open ? " sk-open-turn" : ""}` },
      h("div", { class: "sk-role" }, role.replace("_", " ") || "turn"),
      h("div", { class: "sk-prompt-text" }, t.open ? h("span", { class: "sk-hint" }, "▸ the completions below") : t.content));
  });
}

function sparkline(points, current) {
  const W = 520, H = 90, P = 22;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("class", "sk-spark");
  const pts = points.filter((p) => p[1] !== null);
  if (!pts.length) return svg;
  const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs);
  const y0 = Math.min(0, ...ys), y1 = Math.max(1, ...ys);
  const X = (x) => P + (x1 === x0 ? 0.5 : (x - x0) / (x1 - x0)) * (W - 2 * P);
  const Y = (y) => H - P + ((y - y0) / (y1 - y0 || 1)) * -(H - 2 * P);
  const add = (tag, attrs, text) => {
    const n = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
    if (text !== undefined) n.textContent = text;
    svg.append(n);
    return n;
  };
  add("line", { x1: P, x2: W - P, y1: Y(y0), y2: Y(y0), class: "sk-axis" });
  add("polyline", { points: pts.map((p) => `${X(p[0])},${Y(p[1])}`).join(" "), class: "sk-line" });
  for (const p of pts) {
    const c = add("circle", { cx: X(p[0]), cy: Y(p[1]), r: p[0] === current ? 4.5 : 2.5,
      class: p[0] === current ? "sk-dot sk-dot-now" : "sk-dot" });
    const t = document.createElementNS(ns, "title");
    t.textContent = `step ${p[0]}: mean reward ${fmt(p[1])} (n=${p[2]})`;
    c.append(t);
  }
  add("text", { x: P, y: H - 4, class: "sk-tick" }, `step ${x0}`);
  add("text", { x: W - P, y: H - 4, class: "sk-tick", "text-anchor": "end" }, `step ${x1}`);
  add("text", { x: 2, y: Y(y1) + 4, class: "sk-tick" }, fmt(y1, 1));
  add("text", { x: 2, y: Y(y0), class: "sk-tick" }, fmt(y0, 1));
  return svg;
}

function render({ model, el }) {
  el.classList.add("skyrl-inspector");
  const rawPrompts = new Set();  // groups whose prompt the user switched to raw, kept across redraws
  // `steps` arrives as [first, last] runs; expand once per change
  let stepCache = null;
  model.on("change:step_ranges", () => { stepCache = null; });
  const allSteps = () => {
    if (stepCache === null) {
      stepCache = [];
      for (const [a, b] of model.get("step_ranges") || []) for (let s = a; s <= b; s++) stepCache.push(s);
    }
    return stepCache;
  };
  const get = (k) => (k === "steps" ? allSteps() : model.get(k));
  const setFilters = (patch) => {
    model.set("filters", { ...get("filters"), ...patch });
    model.set("page", 0);
    model.save_changes();
  };

  // ---- header: run, state, step selector
  const title = h("span", { class: "sk-title" });
  const state = h("span", { class: "sk-state" });
  const stepInput = h("input", { type: "number", class: "sk-step-input", title: "step" });
  const slider = h("input", { type: "range", class: "sk-step-slider", min: 0, step: 1 });
  const stepTo = (step) => {
    model.set("follow", false);
    model.set("step", step);
    model.save_changes();
  };
  const neighbour = (delta) => {
    const steps = get("steps"), i = steps.indexOf(get("step"));
    const j = Math.max(0, Math.min(steps.length - 1, (i < 0 ? steps.length - 1 : i) + delta));
    if (steps.length) stepTo(steps[j]);
  };
  stepInput.addEventListener("change", () => {
    const steps = get("steps"), want = Number(stepInput.value);
    if (!steps.length) return;
    // the nearest step that has a part
    let best = steps[0];
    for (const s of steps) if (Math.abs(s - want) < Math.abs(best - want)) best = s;
    stepTo(best);
  });
  stepInput.addEventListener("keydown", (e) => { if (e.key === "Enter") stepInput.blur(); });  // blur commits
  slider.addEventListener("input", () => { stepInput.value = get("steps")[Number(slider.value)] ?? ""; });
  slider.addEventListener("change", () => stepTo(get("steps")[Number(slider.value)]));
  const follow = h("input", { type: "checkbox", class: "sk-follow" });
  follow.addEventListener("change", () => {
    model.set("follow", follow.checked);
    const steps = get("steps");
    if (follow.checked && steps.length) model.set("step", steps[steps.length - 1]);
    model.save_changes();
  });
  const refresh = h("button", { class: "sk-btn", title: "pick up new steps", onclick: () => model.send({ type: "refresh" }) }, "↻");
  const header = h("div", { class: "sk-header" },
    h("span", { class: "sk-name" }, "Trajectories"), title, state,
    h("span", { class: "sk-stepnav" },
      h("button", { class: "sk-btn", title: "previous step", onclick: () => neighbour(-1) }, "◀"),
      "step ", stepInput,
      h("button", { class: "sk-btn", title: "next step", onclick: () => neighbour(1) }, "▶"),
      slider, h("label", { class: "sk-check" }, follow, "newest"), refresh));

  // ---- filters and sort
  const num = (key, placeholder) => {
    const i = h("input", { type: "number", step: "any", placeholder, class: `sk-num sk-f-${key}` });
    i.addEventListener("change", () => setFilters({ [key]: i.value === "" ? null : Number(i.value) }));
    return i;
  };
  const select = (key, cls) => {
    const s = h("select", { class: cls });
    s.addEventListener("change", () => setFilters({ [key]: s.value }));
    return s;
  };
  const rMin = num("reward_min", "min"), rMax = num("reward_max", "max");
  const finish = select("finish_reason", "sk-f-finish"), env = select("env_class", "sk-f-env");
  const source = select("data_source", "sk-f-source"), zeroVar = select("zero_variance", "sk-f-zero");
  for (const [v, label] of [["any", "all groups"], ["hide", "hide zero-variance"], ["only", "only zero-variance"]])
    zeroVar.append(h("option", { value: v }, label));
  const sort = select("sort", "sk-f-sort");
  const search = h("input", { type: "search", placeholder: "search prompt / response", class: "sk-search" });
  let searchTimer = null;
  search.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => setFilters({ search: search.value }), 250);
  });
  const discarded = h("input", { type: "checkbox", class: "sk-f-discarded" });
  discarded.addEventListener("change", () => setFilters({ show_discarded: discarded.checked }));
  const heat = h("select", { class: "sk-heatmap-select" },
    h("option", { value: "off" }, "text"), h("option", { value: "logprob" }, "log-prob heatmap"),
    h("option", { value: "advantage" }, "advantage heatmap"));
  heat.addEventListener("change", () => { model.set("heatmap", heat.value); model.save_changes(); });
  const bar = h("div", { class: "sk-filters" },
    h("span", { class: "sk-field" }, "reward ", rMin, "–", rMax),
    finish, env, source, zeroVar, search,
    h("label", { class: "sk-check" }, discarded, "discarded"),
    h("span", { class: "sk-field" }, "sort ", sort), heat);

  // ---- body
  const summary = h("div", { class: "sk-summary" });
  const error = h("div", { class: "sk-error" });
  const warnings = h("div", { class: "sk-warnings" });
  const drift = h("div", { class: "sk-drift" });
  const groups = h("div", { class: "sk-groups" });
  const pager = h("div", { class: "sk-pager" });
  const legend = h("div", { class: "sk-legend" });
  el.append(header, bar, error, warnings, drift, summary, legend, groups, pager);

  const fillSelect = (s, values, current, anyLabel) => {
    const want = [""].concat(values);
    const have = Array.from(s.options).map((o) => o.value);
    if (want.join("\u0000") !== have.join("\u0000")) {
      s.replaceChildren(...want.map((v) => h("option", { value: v }, v === "" ? anyLabel : v)));
    }
    s.value = current || "";
  };

  function drawHeader() {
    title.textContent = get("run_id");
    const st = get("state") || "?";
    state.textContent = st;
    state.className = `sk-state sk-state-${st}`;
    const steps = get("steps"), step = get("step");
    stepInput.value = step;
    slider.max = Math.max(0, steps.length - 1);
    slider.value = Math.max(0, steps.indexOf(step));
    slider.disabled = steps.length < 2;
    follow.checked = get("follow");
  }

  function drawFilters() {
    const f = get("filters") || {}, facets = (get("view") || {}).facets || {};
    rMin.value = f.reward_min ?? ""; rMax.value = f.reward_max ?? "";
    fillSelect(finish, facets.finish_reason || [], f.finish_reason, "any finish");
    fillSelect(env, facets.env_class || [], f.env_class, "any env");
    fillSelect(source, facets.data_source || [], f.data_source, "any data source");
    zeroVar.value = f.zero_variance || "any";
    const sorts = get("sorts") || Object.keys(SORT_LABELS);
    if (sort.options.length !== sorts.length)
      sort.replaceChildren(...sorts.map((v) => h("option", { value: v }, SORT_LABELS[v] || v)));
    sort.value = f.sort || "group";
    if (document.activeElement !== search) search.value = f.search || "";
    discarded.checked = f.show_discarded !== false;
    heat.value = get("heatmap");
    heat.disabled = !get("has_token_data");
    heat.title = get("has_token_data") ? "colour tokens" : "this run stored no per-token data (run.store_token_data)";
  }

  function drawGroups() {
    const v = get("view") || {}, mode = get("heatmap");
    summary.textContent = v.step === undefined ? "" :
      `step ${v.step} · ${v.total_groups}/${v.all_groups} groups · ${v.samples} samples` +
      (v.discarded ? ` · ${v.discarded} discarded` : "");
    legend.replaceChildren();
    if (mode === "logprob") legend.append("log-prob: ", h("span", { class: "sk-tok", style: `background:${tokenColour("logprob", -0.01)}` }, "likely"),
      " ", h("span", { class: "sk-tok", style: `background:${tokenColour("logprob", -3)}` }, "unlikely"));
    if (mode === "advantage") legend.append("advantage: ", h("span", { class: "sk-tok", style: `background:${tokenColour("advantage", 1)}` }, "positive"),
      " ", h("span", { class: "sk-tok", style: `background:${tokenColour("advantage", -1)}` }, "negative"));
    if (!(v.groups || []).length) {
      groups.replaceChildren(h("div", { class: "sk-empty" },
        get("steps").length ? "No group matches these filters." : "No trajectories yet; they appear as the job writes steps."));
    } else {
      const tag = (label, value, cls = "", style = "") => h("span", { class: `sk-badge ${cls}`, style, title: label },
        h("span", { class: "sk-tag-label" }, label), " ", value);
      groups.replaceChildren(...v.groups.map((g) => {
        const prompt = h("div", { class: "sk-prompt" });
        const rawToggle = h("button", { class: "sk-btn sk-raw-toggle", title: "the prompt as the model saw it, chat template and all" }, "raw");
        let raw = rawPrompts.has(g.key);
        const drawPrompt = () => {
          prompt.replaceChildren(...[renderPrompt(g, raw)].flat());
          rawToggle.textContent = raw ? "as chat" : "raw";
        };
        rawToggle.addEventListener("click", () => { raw = !raw; if (raw) rawPrompts.add(g.key); else rawPrompts.delete(g.key); drawPrompt(); });
        rawToggle.style.display = g.prompt_turns ? "" : "none";
        drawPrompt();
        return h("div", { class: "sk-group", "data-group": g.key },
          h("div", { class: "sk-ghead" },
            h("span", { class: "sk-gkey" }, `group ${g.key}`),
            tag("mean reward", `${fmt(g.mean_reward)} ± ${fmt(g.std_reward)}`, "sk-reward", `background:${rewardColour(g.mean_reward)}`),
            g.ground_truth !== null && g.ground_truth !== undefined ? tag("expected", g.ground_truth, "sk-truth") : null,
            tag("samples", g.n),
            tag("mean length", `${fmt(g.mean_length, 0)} tok`),
            g.zero_variance ? h("span", { class: "sk-badge sk-zero", title: "every sample got the same reward: no learning signal" }, "zero variance") : null,
            g.discarded ? h("span", { class: "sk-badge sk-discard-badge" }, `${g.discarded} discarded`) : null,
            g.env_class ? tag("env", g.env_class, "sk-meta-tag") : null,
            g.data_source ? tag("data", g.data_source, "sk-meta-tag") : null,
            h("span", { class: "sk-ghead-actions" }, rawToggle,
              h("button", { class: "sk-btn sk-drift-btn", title: "this prompt across steps",
                onclick: () => model.send({ type: "drift", prompt: g.prompt }) }, "across steps ↗"))),
          prompt,
          h("div", { class: "sk-samples" }, g.samples.map((s) => renderSample(s, mode))));
      }));
    }
    const page = v.page || 0, pages = v.pages || 1;
    const go = (p) => { model.set("page", p); model.save_changes(); };
    pager.replaceChildren(
      h("button", { class: "sk-btn", disabled: page <= 0, onclick: () => go(page - 1) }, "◀"),
      ` page ${page + 1} / ${pages} `,
      h("button", { class: "sk-btn", disabled: page >= pages - 1, onclick: () => go(page + 1) }, "▶"));
    pager.style.display = pages > 1 ? "" : "none";
  }

  function drawDrift() {
    const d = get("drift_view") || {};
    if (!d.prompt) { drift.replaceChildren(); drift.style.display = "none"; return; }
    drift.style.display = "";
    drift.replaceChildren(
      h("div", { class: "sk-drift-head" },
        h("b", {}, "This prompt across steps"),
        h("span", { class: "sk-meta" }, ` sampled at ${d.points.length} step(s); scanned ${d.scanned}/${d.total} parts`),
        d.done ? null : h("button", { class: "sk-btn", onclick: () => model.send({ type: "drift_more" }) }, "scan more"),
        h("button", { class: "sk-btn", onclick: () => model.send({ type: "drift_close" }) }, "✕")),
      h("div", { class: "sk-prompt" }, d.prompt),
      sparkline(d.points, get("step")),
      h("div", { class: "sk-drift-rows" }, d.details.map((row) => h("div", { class: "sk-drift-row" },
        h("button", { class: "sk-btn sk-drift-step", onclick: () => stepTo(row.step) }, `step ${row.step}`),
        h("div", { class: "sk-drift-samples" }, row.samples.map((s) => h("div", {
          class: "sk-drift-sample" + (s.discarded_reason ? " sk-discarded" : ""),
          title: s.discarded_reason ? `discarded: ${s.discarded_reason}` : `${s.num_tokens} tok, ${s.finish_reason}`,
        }, h("span", { class: "sk-badge sk-reward", style: `background:${rewardColour(s.reward)}` }, fmt(s.reward)),
        " ", s.response)))))));
  }

  function drawError() {
    error.textContent = get("error") || "";
    error.style.display = get("error") ? "" : "none";
  }

  function drawWarnings() {
    const lines = get("warnings") || [];
    warnings.replaceChildren(...lines.map((line) => h("div", {}, `skipped: ${line}`)));
    warnings.style.display = lines.length ? "" : "none";
  }

  drawHeader(); drawFilters(); drawGroups(); drawDrift(); drawError(); drawWarnings();
  const on = (names, fn) => names.forEach((n) => model.on(`change:${n}`, fn));
  on(["run_id", "state", "step_ranges", "step", "follow"], drawHeader);
  on(["filters", "has_token_data", "heatmap", "sorts"], drawFilters);
  on(["view"], () => { drawFilters(); drawGroups(); });
  on(["heatmap"], drawGroups);
  on(["drift_view"], drawDrift);
  on(["error"], drawError);
  on(["warnings"], drawWarnings);
  return () => clearTimeout(searchTimer);
}

export default { render };
