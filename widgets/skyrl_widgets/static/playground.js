// The playground (skyrl_widgets.playground.PlaygroundView): the boxes and Run are made once (typing is never
// interrupted by a redraw); the status line and the answer panes are redrawn from the traits.
// `h` and `rewardColour` are dom.js's (skyrl_widgets._static.esm puts it before this file).

const fmt = (r) => Number(r).toFixed(3).replace(/\.?0+$/, "") || "0";

function pane(name, answer, running) {
  const head = h("div", "sk-pane-head", h("span", "sk-model", name));
  const body = [];
  if (answer) {
    const scored = answer.reward !== null && answer.reward !== undefined;
    const badge = h("span", "sk-badge sk-reward", scored ? `reward ${fmt(answer.reward)}` : "no reward");
    badge.style.background = rewardColour(answer.reward);
    badge.title = "the reward function's score of this answer";
    head.append(badge);
    if (answer.reward_error) body.push(h("div", "sk-reward-error", `reward error: ${answer.reward_error}`));
    body.push(h("div", "sk-answer", answer.response === "" ? h("span", "sk-empty", "(an empty answer)") : answer.response));
  } else {
    body.push(h("div", "sk-answer sk-empty", running ? "generating…" : "no answer yet"));
  }
  const p = h("div", "sk-pane", head, ...body);
  p.dataset.model = name;
  return p;
}

function render({ model, el }) {
  el.classList.add("skyrl-playground");
  const title = h("div", "sk-title");
  const picker = h("select", "sk-examples");
  picker.title = "an evaluation's worst prompts: the ones the trained model lost first, then the lowest rewards";
  const prompt = h("textarea", "sk-prompt");
  prompt.rows = 3;
  prompt.placeholder = "a prompt (Ctrl+Enter runs it)";
  const truth = h("input", "sk-truth");
  truth.type = "text";
  truth.placeholder = "ground truth (optional)";
  truth.title = "what the reward function compares each answer to";
  const run = h("button", "sk-btn sk-run", "▶ Run");
  run.title = "generate one answer per model on the cluster and score each with the reward function";
  const status = h("span", "sk-status");
  const panes = h("div", "sk-panes");
  el.replaceChildren(
    h("div", "sk-row", title, picker),
    prompt,
    h("div", "sk-row", truth, run, status),
    panes);

  let startedAt = null;
  let ticker = null;
  const elapsed = () => (startedAt === null ? "" : ` ${Math.floor((Date.now() - startedAt) / 1000)} s`);
  const drawStatus = () => {
    status.textContent = (model.get("status") || "") + (model.get("running") ? elapsed() : "");
    status.classList.toggle("sk-failed", Boolean(model.get("error")));
    status.title = status.textContent;
  };
  const send = () => {
    if (model.get("running") || run.disabled) return;
    model.set("prompt", prompt.value);
    model.set("ground_truth", truth.value);
    model.save_changes();
    model.send({ action: "run", prompt: prompt.value, ground_truth: truth.value, example: model.get("example") });
  };
  run.addEventListener("click", send);
  prompt.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); e.stopPropagation(); send(); }
  });
  prompt.addEventListener("input", () => {
    model.set("prompt", prompt.value);
    const ex = (model.get("examples") || [])[model.get("example")];
    if (ex && ex.prompt !== prompt.value) model.set("example", -1);  // edited: no longer that example
    model.save_changes();
  });
  truth.addEventListener("input", () => { model.set("ground_truth", truth.value); model.save_changes(); });
  picker.addEventListener("change", () => {
    const i = Number(picker.value);
    const ex = (model.get("examples") || [])[i];
    if (!ex) return;
    model.set("example", i);
    model.set("prompt", ex.prompt || "");
    model.set("ground_truth", ex.ground_truth ?? "");
    model.save_changes();
    prompt.value = ex.prompt || "";
    truth.value = ex.ground_truth ?? "";
  });

  // what Python put in the boxes (an example picked, `Playground.run` called from a cell)
  const syncBoxes = () => {
    if (prompt.value !== model.get("prompt")) prompt.value = model.get("prompt") || "";
    if (truth.value !== model.get("ground_truth")) truth.value = model.get("ground_truth") || "";
  };
  const redraw = () => {
    const running = Boolean(model.get("running"));
    title.textContent = model.get("title") || "Playground";
    syncBoxes();
    run.disabled = running;
    run.textContent = running ? "… Running" : "▶ Run";
    const examples = model.get("examples") || [];
    picker.hidden = examples.length === 0;
    picker.disabled = running;
    picker.replaceChildren(h("option", "", `${examples.length} worst prompts of the evaluation…`),
      ...examples.map((ex, i) => { const o = h("option", "", ex.label || ex.prompt); o.value = String(i); return o; }));
    picker.firstChild.value = "";
    picker.firstChild.disabled = true;
    picker.value = examples[model.get("example")] ? String(model.get("example")) : "";
    const answers = model.get("answers") || [];
    const names = [...(model.get("models") || [])];
    for (const a of answers) if (!names.includes(a.model)) names.push(a.model);
    panes.replaceChildren(...names.map((n) => pane(n, running ? null : answers.find((a) => a.model === n), running)));
    if (running && startedAt === null) {
      startedAt = Date.now();
      ticker = setInterval(drawStatus, 1000);
    } else if (!running && startedAt !== null) {
      startedAt = null;
      clearInterval(ticker);
      ticker = null;
    }
    drawStatus();
  };
  const names = ["title", "models", "examples", "example", "running", "status", "error", "answers"];
  for (const n of names) model.on(`change:${n}`, redraw);
  model.on("change:prompt", syncBoxes);
  model.on("change:ground_truth", syncBoxes);
  redraw();
  return () => {
    for (const n of names) model.off(`change:${n}`, redraw);
    model.off("change:prompt", syncBoxes);
    model.off("change:ground_truth", syncBoxes);
    if (ticker !== null) clearInterval(ticker);
  };
}

export default { render };
