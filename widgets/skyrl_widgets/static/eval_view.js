// One prompt of an evaluation (skyrl_widgets.eval_view.EvalPromptView): the prompt, its ground truth and one column
// per model with each answer and its reward. Previous / Next ask the kernel for another prompt of the chosen list.
// `h` and `rewardColour` are dom.js's (skyrl_widgets._static.esm puts it before this file).

const num = (v, d = 3) => (v === null || v === undefined ? "–" : Number(v).toFixed(d));
const FILTERS = { changed: ["gained", "lost"], gained: ["gained"], lost: ["lost"], all: null };

function sample(s) {
  const badge = h("span", "sk-badge sk-reward", `reward ${num(s.reward)}`);
  badge.style.background = rewardColour(s.reward);
  badge.title = s.correct ? "counted correct (reward at least the threshold)" : "counted wrong";
  const head = h("div", "sk-sample-head", badge, h("span", s.correct ? "sk-ok" : "sk-bad", s.correct ? "✓" : "✗"),
    s.response_length === null || s.response_length === undefined ? null : h("span", "sk-muted", `${s.response_length} tokens`),
    ...Object.entries(s.scores || {}).map(([k, v]) => h("span", "sk-muted", `${k} ${num(v)}`)));
  return h("div", "sk-sample", head,
    s.reward_error ? h("div", "sk-reward-error", `reward error: ${s.reward_error}`) : null,
    h("div", "sk-answer", s.response === "" ? h("span", "sk-muted", "(an empty answer)") : s.response));
}

function column(m) {
  const verdict = h("span", "sk-badge", m.solved ? "solved" : "not solved");
  verdict.style.background = rewardColour(m.solved ? 1 : 0);
  const c = h("div", "sk-model",
    h("div", "sk-model-head", h("span", "sk-name", m.name), verdict,
      h("span", "sk-muted", `pass@1 ${num(m["pass@1"], 2)} · mean reward ${num(m.mean_reward)}`)),
    ...(m.samples || []).map(sample));
  c.dataset.model = m.name;
  return c;
}

function render({ model, el }) {
  el.classList.add("skyrl-eval-view");
  const title = h("span", "sk-title");
  const filter = h("select", "sk-filter");
  const prev = h("button", "sk-btn", "◀ Previous");
  const next = h("button", "sk-btn", "Next ▶");
  const where = h("span", "sk-muted sk-where");
  const error = h("div", "sk-error");
  const body = h("div", "sk-body");
  el.replaceChildren(h("div", "sk-row", title, filter, prev, next, where), error, body);

  const list = () => {
    const want = FILTERS[model.get("filter")] || null;
    return (model.get("prompts") || []).filter((p) => !want || want.includes(p.change));
  };
  const go = (delta) => {
    const items = list();
    if (!items.length) return;
    const at = items.findIndex((p) => p.prompt_index === (model.get("current") || {}).prompt_index);
    const i = at < 0 ? 0 : (at + delta + items.length) % items.length;
    model.send({ type: "show", prompt_index: items[i].prompt_index });
  };
  prev.addEventListener("click", () => go(-1));
  next.addEventListener("click", () => go(1));
  filter.addEventListener("change", () => {
    model.set("filter", filter.value);
    model.save_changes();
    const items = list();
    const cur = (model.get("current") || {}).prompt_index;
    if (items.length && !items.some((p) => p.prompt_index === cur)) model.send({ type: "show", prompt_index: items[0].prompt_index });
  });

  const redraw = () => {
    title.textContent = model.get("title") || "Evaluation";
    const prompts = model.get("prompts") || [];
    const count = (k) => (FILTERS[k] ? prompts.filter((p) => FILTERS[k].includes(p.change)).length : prompts.length);
    filter.replaceChildren(...Object.keys(FILTERS).map((k) => { const o = h("option", "", `${k} (${count(k)})`); o.value = k; return o; }));
    filter.value = model.get("filter");
    const cur = model.get("current") || {};
    const items = list();
    const at = items.findIndex((p) => p.prompt_index === cur.prompt_index);
    const change = (prompts.find((p) => p.prompt_index === cur.prompt_index) || {}).change;
    where.textContent = `prompt ${cur.prompt_index ?? "–"}${change ? ` (${change})` : ""}` +
      (items.length ? ` · ${at < 0 ? "–" : at + 1} of ${items.length}` : " · none in this list");
    prev.disabled = next.disabled = items.length === 0;
    error.textContent = model.get("error") || "";
    error.hidden = !model.get("error");
    const turns = cur.turns || [{ role: "prompt", content: cur.prompt || "" }];
    const prompt = h("div", "sk-prompt", ...turns.filter((t) => t.content || !t.open).map((t) =>
      h("div", "sk-turn", h("span", "sk-role", t.role), h("span", "sk-content", t.content))));
    body.replaceChildren(prompt,
      cur.ground_truth === null || cur.ground_truth === undefined ? null : h("div", "sk-truth", h("span", "sk-role", "ground truth"), String(cur.ground_truth)),
      h("div", "sk-models", ...(cur.models || []).map(column)));
  };
  const names = ["title", "prompts", "filter", "current", "error"];
  for (const n of names) model.on(`change:${n}`, redraw);
  redraw();
  return () => { for (const n of names) model.off(`change:${n}`, redraw); };
}

export default { render };
