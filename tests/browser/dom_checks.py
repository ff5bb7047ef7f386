"""What the browser tests measure in the page: contrast, shapes inside their frames, axis ticks, font sizes.

Each function runs one script in the page (playwright's `page.evaluate`) and returns plain data, so a failed
assertion shows the numbers.
"""

from __future__ import annotations

from typing import Any

# WCAG 2 contrast of each matched element's text against what is really behind it: every background from the
# page down to the element, composited (a tinted chip over a dark notebook over the page), then the text's
# own colour (with its alpha, as JupyterLab's rgba(...) text colours have) over that.
_CONTRAST_JS = """(selector) => {
  function parse(c) {
    if (!c || c === "transparent") return [0, 0, 0, 0];
    let m = c.match(/^rgba?\\(([^)]+)\\)/);
    if (m) { const p = m[1].split(/[\\s,/]+/).filter(Boolean).map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; }
    m = c.match(/^color\\(srgb ([^)]+)\\)/);
    if (m) { const p = m[1].split(/[\\s/]+/).filter(Boolean).map(Number); return [p[0] * 255, p[1] * 255, p[2] * 255, p.length > 3 ? p[3] : 1]; }
    return null;
  }
  const over = (top, bottom) => [0, 1, 2].map((i) => top[i] * top[3] + bottom[i] * (1 - top[3])).concat([1]);
  function behind(el) {
    const chain = [];
    for (let e = el; e; e = e.parentElement) chain.push(getComputedStyle(e).backgroundColor);
    let bg = [255, 255, 255, 1];
    for (const c of chain.reverse()) { const p = parse(c); if (p && p[3] > 0) bg = over(p, bg); }
    return bg;
  }
  const lum = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  return Array.from(document.querySelectorAll(selector)).filter((el) => el.getClientRects().length).map((el) => {
    const cs = getComputedStyle(el), bg = behind(el);
    const raw = el instanceof SVGElement ? cs.fill : cs.color;
    const fg = over(parse(raw) || [0, 0, 0, 1], bg);
    const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
    return { text: (el.textContent || "").trim().slice(0, 50), colour: raw, background: bg.slice(0, 3).map(Math.round),
             ratio: Math.round(((a + 0.05) / (b + 0.05)) * 100) / 100 };
  });
}"""

# Every shape a chart draws (bars, bands, lines, markers, guides) against its chart's plot frame.
_SHAPES_JS = """() => Array.from(document.querySelectorAll(".skyrl-chart")).filter((c) => c.getClientRects().length)
  .flatMap((chart) => {
    const frame = chart.querySelector(".sk-chart-frame");
    if (!frame) return [];
    const f = frame.getBoundingClientRect();
    const title = chart.querySelector(".sk-chart-title")?.textContent || "";
    return Array.from(chart.querySelectorAll(".sk-chart-data rect, .sk-chart-data circle, .sk-chart-data polyline, "
                                             + ".sk-chart-data polygon, .sk-chart-data line")).map((e) => {
      const b = e.getBoundingClientRect();
      const inside = b.left >= f.left - 0.5 && b.right <= f.right + 0.5 && b.top >= f.top - 0.5 && b.bottom <= f.bottom + 0.5;
      return { chart: title, tag: e.tagName, inside, box: [b.left, b.top, b.right, b.bottom].map(Math.round),
               frame: [f.left, f.top, f.right, f.bottom].map(Math.round) };
    });
  })"""

_TICKS_JS = """(chart) => Array.from(document.querySelectorAll(chart + " .sk-y-tick")).map((t) =>
  ({ value: Number(t.dataset.value), label: t.textContent }))"""

_FONTS_JS = """() => Array.from(document.querySelectorAll(
    ".skyrl-chart .sk-chart-tick, .skyrl-chart .sk-chart-title, .skyrl-chart .sk-legend-item, .skyrl-run-header .sk-steps"))
  .filter((e) => e.getClientRects().length)
  .map((e) => ({ text: e.textContent.slice(0, 30), px: parseFloat(getComputedStyle(e).fontSize),
                 height: e.getBoundingClientRect().height }))"""


def contrast(page: Any, selector: str) -> list[dict[str, Any]]:
    """``[{text, colour, background, ratio}]`` for every visible element matching ``selector``."""
    return page.evaluate(_CONTRAST_JS, selector)


def shapes(page: Any) -> list[dict[str, Any]]:
    """Every visible chart's shapes with whether each lies inside its plot frame."""
    return page.evaluate(_SHAPES_JS)


def y_ticks(page: Any, chart: str) -> list[dict[str, Any]]:
    """The y ticks (value, label) of the chart(s) matching ``chart``."""
    return page.evaluate(_TICKS_JS, chart)


def fonts(page: Any) -> list[dict[str, Any]]:
    """Font size and drawn height of the charts' ticks, titles and legends and the header's step count."""
    return page.evaluate(_FONTS_JS)


def set_theme(page: Any, theme: str) -> None:
    """Switch JupyterLab to ``theme`` ("JupyterLab Light" / "JupyterLab Dark") and wait until it applied."""
    page.evaluate(f"() => window.jupyterapp.commands.execute('apputils:change-theme', {{theme: {theme!r}}})")
    page.wait_for_function(f"() => document.body.dataset.jpThemeName === {theme!r}", timeout=20_000)
    page.wait_for_timeout(800)  # the theme's stylesheet applies, the charts redraw
