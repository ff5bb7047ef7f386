"""A stand-in for `python -m skyrl_engine train`: writes a run store with a rising reward.

Used by the cluster/jobs tests so they exercise the real Jobs API without training a model.
`FAKE_ENGINE_STEP_S` sets the seconds per step; `FAKE_ENGINE_FAIL=1` raises at step 2;
`FAKE_ENGINE_CKPT_INTERVAL` (default 1) is how often it writes a checkpoint (0: never);
`FAKE_ENGINE_STOP_DELAY_S` how long a SIGTERM takes to be recorded (a driver busy or starved of CPU when it comes).
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time

from skyrl_core.config import load_config
from skyrl_core.runs import RunWriter
from skyrl_core.submission import config_source


def main(argv: list[str]) -> int:
    """`train --config FILE_OR_ENV:NAME`."""
    assert argv[0] == "train" and argv[1] == "--config", argv
    cfg = load_config(config_source(argv[2]))
    writer = RunWriter(cfg.run_dir)
    writer.write_config(cfg)
    total = cfg.trainer.max_training_steps or 10
    step_s = float(os.environ.get("FAKE_ENGINE_STEP_S", "0.2"))
    ckpt_every = int(os.environ.get("FAKE_ENGINE_CKPT_INTERVAL", "1"))
    ckpt = writer.run_dir / "checkpoints" / "latest_ckpt_global_step.txt"
    start = 0
    if cfg.trainer.resume_mode == "latest" and ckpt.exists():
        start = int(ckpt.read_text())
        writer.truncate_after(start)
        attempt = os.environ.get("SKYRL_NB_ATTEMPT")  # set by Job.resume(); None when it did not say
        writer.log_event("resumed", step=start, from_step=start, attempt=int(attempt) if attempt else None)

    def on_term(signum, frame):
        time.sleep(float(os.environ.get("FAKE_ENGINE_STOP_DELAY_S", "0")))
        writer.set_status("stopped")
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
    writer.set_status("running", step=start, total_steps=total, pid=os.getpid())
    writer.log_event("started")
    writer.log_event("eval", step=0, **{"eval/all/avg_score": 0.1})
    n = cfg.generator.n_samples_per_prompt
    for step in range(start + 1, total + 1):
        time.sleep(step_s)
        if os.environ.get("FAKE_ENGINE_FAIL") and step == 2:
            writer.set_status("failed", error="ValueError: fake failure at step 2")
            raise ValueError("fake failure at step 2")
        reward = 0.2 + 0.7 * (1 - math.exp(-step / 4))
        writer.log_metrics(step, {
            "reward/avg_raw_reward": reward, "reward/std_raw_reward": 0.1,
            f"reward/avg_pass_at_{n}": min(1.0, reward + 0.2), "trainer/tokens_per_second": 1000 + step,
            "timing/step": step_s, "timing/generate": step_s * 0.5, "timing/policy_train": step_s * 0.4,
            "timing/sync_weights": step_s * 0.05, "timing/save_checkpoints": 0.0,
            **({"eval/all/avg_score": reward} if step % 5 == 0 else {}),
        })
        if ckpt_every and step % ckpt_every == 0:  # SkyRL's layout: the step's folder, then the latest file
            (ckpt.parent / f"global_step_{step}").mkdir(exist_ok=True)
            ckpt.write_text(str(step))
        writer.set_status(step=step)
        print(f"step {step} reward {reward:.3f}", flush=True)
    writer.set_status("succeeded", step=total)
    writer.log_event("finished")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
