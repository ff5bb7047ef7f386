"""The tiny model's grid warm start (the quickstart's, ``sft_grid_bits``) is the same bytes under any of
torch's float kernels (issue 38).

A small spec is built in two fresh processes, one with torch's native vector kernels and one with
``ATEN_CPU_CAPABILITY=default`` (its portable ones), each into its own model cache; the two
``model.safetensors`` must be byte-identical. Before the float64-on-a-grid recipe they differed from the
init on (torch's ``normal_`` draws differently per kernel set) and through every float32 step. Two
subprocesses: ~16 s of CPU (2 min wall on this machine while 3 other agents loaded it).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BUILD = """
import json, sys
import torch
torch.set_num_threads(1)
from skyrl_engine.models import TinyModelSpec, build_tiny_model
from skyrl_engine.tasks import load_prompts
spec = TinyModelSpec(hidden_size=32, intermediate_size=64, sft_steps=12, sft_batch_size=16, sft_grid_bits=20)
path = build_tiny_model(load_prompts(["builtin://arithmetic/train"]), spec=spec)
print(json.dumps({"path": path, "capability": torch.backends.cpu.get_cpu_capability(),
                  "losses": json.load(open(path + "/warm_start.json"))["sft_losses"]}))
"""


def _build(cache: Path, capability: str | None) -> dict:
    env = {**os.environ, "SKYRL_NB_CACHE": str(cache)}
    env.pop("ATEN_CPU_CAPABILITY", None)
    if capability:
        env["ATEN_CPU_CAPABILITY"] = capability
    out = subprocess.run([sys.executable, "-c", BUILD], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    info = json.loads(out.stdout.strip().splitlines()[-1])
    info["sha256"] = hashlib.sha256((Path(info["path"]) / "model.safetensors").read_bytes()).hexdigest()
    return info


def test_warm_start_is_byte_identical_under_native_and_portable_kernels(tmp_path: Path) -> None:
    native = _build(tmp_path / "native", None)
    portable = _build(tmp_path / "portable", "default")
    assert portable["capability"] == "DEFAULT" and native["capability"] != "DEFAULT", (native, portable)
    assert native["losses"][-1] < native["losses"][0]  # it trained
    assert Path(native["path"]).name == Path(portable["path"]).name  # the same cache key
    assert native["sha256"] == portable["sha256"]
    # the losses are float64 sums taken by each kernel set: equal to their last bits, not in them
    assert native["losses"] == pytest.approx(portable["losses"], rel=1e-12)
