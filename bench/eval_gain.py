"""A trained model's gain over its base on held-out prompts, with an interval: the evaluation job of issue 36.

The run's checkpoint is exported (``RunReader.export``, the engine in its own process), then one evaluation job on
a local Ray head (``skyrl_nb.evaluate``, the same code path as training's own eval) samples the base model and the
export on the same held-out prompts, greedy by default. Reported per model: mean reward and pass@1 with 95%
bootstrap intervals over prompts; the paired gain (trained - base) with its interval; the prompts gained and lost;
the evaluation's wall time.

    .venv/bin/python -m bench eval_gain --run /path/to/smollm2-run \\
        --data builtin://word_problems/heldout --out bench/results/eval_gain_smollm2.json

The run is one the ``smollm2`` preset trained (``python -m skyrl_engine train --config smollm2 ...`` with a
checkpoint at its last step); its base is its own ``trainer.policy.model.path``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from bench import RESULTS


def _round(value: object) -> object:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, list):
        return [_round(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench eval_gain", description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a finished run's folder (its latest checkpoint is evaluated)")
    parser.add_argument("--step", type=int, default=None, help="the checkpoint's step (default: the latest)")
    parser.add_argument("--data", default="builtin://word_problems/heldout", help="the held-out prompts")
    parser.add_argument("--n", type=int, default=1, help="samples per prompt")
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    parser.add_argument("--out", default=str(RESULTS / "eval_gain_smollm2.json"))
    args = parser.parse_args(argv)

    import skyrl_nb
    from skyrl_core.runs import RunReader

    run = RunReader(args.run)
    config = run.config()
    base = config["trainer"]["policy"]["model"]["path"]
    work = Path(tempfile.mkdtemp(prefix="eval-gain-"))
    started = time.perf_counter()
    export = run.export(work / "export", step=args.step)
    export_s = time.perf_counter() - started
    ours = skyrl_nb.cluster.local(start=False) is None  # a head this bench starts, it stops
    cluster = skyrl_nb.cluster.local()
    started = time.perf_counter()
    try:
        res = skyrl_nb.evaluate({"base": base, "trained": export.path}, data=args.data, cluster=cluster,
                                config=config, n=args.n, pass_at=(1,),
                                sampling={"temperature": args.temperature}, run_root=str(work / "evals"))
    finally:
        if ours:
            cluster.shutdown()
    eval_s = time.perf_counter() - started
    summary = res.reader.summary()
    models = summary["models"]
    trained = models["trained"]
    result = {
        "bench": "eval_gain", "run": run.run_id, "step": export.step, "base": base, "data": args.data,
        "n_prompts": trained["n_prompts"], "n": args.n, "temperature": args.temperature,
        "models": {name: {key: _round(value) for key, value in m.items()
                          if key.split("/")[0] in ("mean_reward", "mean_reward_ci", "pass@1", "pass@1_ci",
                                                   "response_length", "delta", "prompts_gained", "prompts_lost")}
                   for name, m in models.items()},
        "gain_pass@1": _round(trained.get("delta/pass@1")), "gain_pass@1_ci": _round(trained.get("delta/pass@1_ci")),
        "run_evals": {int(e["step"]): round(e["eval/all/avg_score"], 4) for e in run.events() if e.get("kind") == "eval"},
        "export_s": round(export_s, 1), "eval_s": round(eval_s, 1), "cpus": os.cpu_count(),
        "goal": "the trained export's pass@1 gain over its base on held-out prompts, with an interval above 0",
        "goal_met": bool(trained.get("delta/pass@1_ci") and trained["delta/pass@1_ci"][0] > 0),
        "when": time.strftime("%Y-%m-%d %H:%M"),
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
