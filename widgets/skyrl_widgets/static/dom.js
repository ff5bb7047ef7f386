// Helpers every view's module shares: skyrl_widgets._static.esm(name) puts this file before the view's own
// (anywidget loads each view as one standalone ES module, so they cannot import each other).

// An element. `cls` is its class name, or an object of attributes: "class", "style" (CSS text), "on<event>" (a
// listener), anything else set as an attribute (true as ""). Children are nodes or text; arrays are flattened
// and null, undefined and false are skipped, as are such attribute values.
function h(tag, cls, ...children) {
  const node = document.createElement(tag);
  if (typeof cls === "string") {
    if (cls) node.className = cls;
  } else {
    for (const [k, v] of Object.entries(cls || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "style") node.style.cssText = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : v);
    }
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// A reward's badge colour: red at 0, green at 1 (JupyterLab's error and success colours), a tint mixed over the
// page so the text keeps the theme's own, readable colour in light and dark; no reward is the muted tint.
function rewardColour(r) {
  if (r === null || r === undefined || Number.isNaN(r)) return "var(--sk-muted-bg)";
  const t = Math.round(100 * Math.max(0, Math.min(1, r)));
  return `color-mix(in srgb, color-mix(in srgb, var(--jp-success-color1, #388e3c) ${t}%, var(--jp-error-color1, #d32f2f)) 30%, transparent)`;
}
