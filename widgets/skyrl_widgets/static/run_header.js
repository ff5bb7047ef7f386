// The run header (skyrl_widgets.run_header.RunHeader): draws its traits, reports button presses.
// `h` is dom.js's (skyrl_widgets._static.esm puts it before this file).

const ACTION_LABELS = { stop: "■ Stop", resume: "▶ Resume", new_run: "↻ New run", logs: "Logs" };
const ACTION_TITLES = {
  stop: "stop the job (Ray stops it; the run keeps what it wrote)",
  resume: "resubmit this run from its latest checkpoint",
  new_run: "launch this run's config again as a new run (this run's files stay as they are)",
  logs: "show the job's last log lines",
};

function draw(model, el) {
  const get = (k) => model.get(k);
  const state = get("state") || "pending";
  const total = get("total_steps");
  const step = get("step") || 0;
  const row = h("div", "sk-head-row");
  if (get("run_id")) row.append(h("span", "sk-run", get("run_id")));
  row.append(h("span", `sk-chip sk-state-${state}`, state));
  if (get("note")) row.append(h("span", "sk-note", get("note")));
  const bar = h("span", "sk-progress");
  const fill = h("span", `sk-progress-fill sk-state-${state}`);
  fill.style.width = `${total ? Math.min(100, (100 * step) / total) : 0}%`;
  bar.append(fill);
  row.append(bar, h("span", "sk-steps", `step ${step} / ${total ?? "?"}`));
  if (get("stage")) row.append(h("span", "sk-stage", get("stage")));
  if (get("times")) row.append(h("span", "sk-times", get("times")));
  row.append(h("span", "sk-spacer"));
  if (get("busy")) row.append(h("span", "sk-busy", get("busy")));
  for (const action of get("actions") || []) {
    const b = h("button", `sk-btn sk-action-${action}`, ACTION_LABELS[action] || action);
    b.title = ACTION_TITLES[action] || action;
    if (action === "logs" && get("logs_open")) b.classList.add("sk-on");
    b.disabled = Boolean(get("busy")) && action !== "logs";
    b.addEventListener("click", () => {
      if (action === "logs") { model.set("logs_open", !model.get("logs_open")); model.save_changes(); }
      model.send({ action });
    });
    row.append(b);
  }
  for (const link of get("links") || []) {
    const a = h("a", "sk-link", link.label);
    a.href = link.href;
    a.target = "_blank";
    a.rel = "noopener";
    if (link.title) a.title = link.title;
    row.append(a);
    // what the page behind the link will ask for, said before the click (e.g. a local head's token)
    if (link.hint) row.append(h("span", "sk-link-hint", link.hint));
  }
  const parts = [row];
  const sub = [get("reward"), get("parameters")].filter(Boolean);
  if (sub.length) parts.push(h("div", "sk-head-sub", sub.join(" · ")));
  if (get("error")) parts.push(h("div", "sk-head-error", get("error")));
  for (const line of (get("warnings") || []).slice(0, 5)) parts.push(h("div", "sk-head-warning", `skipped: ${line}`));
  if ((get("warnings") || []).length > 5) parts.push(h("div", "sk-head-warning", `… and ${get("warnings").length - 5} more`));
  const details = get("details") || [];
  if (details.length) {
    const table = h("table", "sk-details");
    for (const [k, v] of details) table.append(h("tr", "", h("th", "", k), h("td", "", v)));
    parts.push(table);
  }
  // the newest line is what a reader opens the box for: it opens at the bottom, and stays there as lines
  // arrive unless the reader has scrolled up to read older ones (read before the old box goes)
  const before = el.querySelector(".sk-logs");
  const kept = before && before.scrollHeight - before.scrollTop - before.clientHeight >= 4 ? before.scrollTop : null;
  const logs = get("logs_open") ? h("pre", "sk-logs", get("logs") || "(no log lines yet)") : null;
  if (logs) parts.push(logs);
  el.replaceChildren(...parts);
  if (logs) {
    const place = () => { logs.scrollTop = kept === null ? logs.scrollHeight : kept; };
    place();
    requestAnimationFrame(place);  // a view drawn before it is on the page has no height yet
  }
}

function render({ model, el }) {
  el.classList.add("skyrl-run-header");
  const redraw = () => {
    el.classList.toggle("sk-compact", Boolean(model.get("compact")));
    draw(model, el);
  };
  const names = ["run_id", "state", "note", "step", "total_steps", "stage", "times", "reward", "parameters", "error",
                 "warnings", "links", "actions", "busy", "logs", "logs_open", "details", "compact"];
  for (const n of names) model.on(`change:${n}`, redraw);
  redraw();
  return () => { for (const n of names) model.off(`change:${n}`, redraw); };
}

export default { render };
