"""A real pretrained model end to end (issue 13): the ``smollm2`` preset with LoRA (rank 8) as a real job through
``cluster.launch`` on the session's real local Ray head, then exported and served by plain ``transformers``.

One 2-step job (batch cut down for CI) checks: the adapter changed while the base stayed frozen, a weight sync
carried the adapter alone, the dashboard's header says how much of the model trains; then ``job.export(...)``
writes a Hugging Face directory that a fresh interpreter which never imports skyrl-nb loads with
``AutoModelForCausalLM`` / ``AutoTokenizer`` and greedy-decodes 5 word problems to the same tokens as the
engine's policy: the torch generator on the checkpoint's merged weights and the trainer's PEFT model.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from engine_runs import distinct_prompts

STEPS = 2
# the job trains on two threads (2 cores here; this process only waits meanwhile); after it, the fresh interpreter that
# reloads the export and this process's greedy decoding run side by side, one thread each
THREADS = 2
SMALL = [f"trainer.max_training_steps={STEPS}", "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4",
         "generator.n_samples_per_prompt=2", "trainer.micro_train_batch_size_per_gpu=8",
         "generator.sampling_params.max_generate_length=24", "trainer.eval_before_train=false",
         "trainer.eval_interval=0", f"trainer.ckpt_interval={STEPS}", f"trainer.num_threads={THREADS}",
         # 8 samples of this model may all score 0 (no advantage, no gradient): the entropy term still moves it
         "trainer.algorithm.use_entropy_loss=true"]
NEW_TOKENS = 16

RELOAD = r"""
import json, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

dest, prompts, new_tokens, threads = json.loads(sys.argv[1])
torch.set_num_threads(threads)
model = AutoModelForCausalLM.from_pretrained(dest).eval()
tokenizer = AutoTokenizer.from_pretrained(dest)
generated = []
for messages in prompts:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.inference_mode():
        out = model.generate(**ids, do_sample=False, max_new_tokens=new_tokens)
    generated.append(out[0, ids["input_ids"].shape[1]:].tolist())
print(json.dumps({
    "leaked": sorted(m for m in sys.modules if m.split(".")[0] in ("skyrl_nb", "skyrl_core", "skyrl_engine", "peft")),
    "class": type(model).__name__, "eos": tokenizer.eos_token_id, "generated": generated,
}))
"""


def _greedy(model: Any, tokenizer: Any, prompts: list[list[dict[str, str]]]) -> list[list[int]]:
    """The engine's sampler, greedy, up to NEW_TOKENS tokens (the EOS kept, as generate keeps it)."""
    import torch

    from skyrl_core.config import SamplingParams
    from skyrl_engine.models import encode_prompt
    from skyrl_engine.sampler import sample

    batch = sample(model, [encode_prompt(tokenizer, p) for p in prompts],
                   SamplingParams(temperature=0.0, max_generate_length=NEW_TOKENS),
                   eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, generator=torch.Generator())
    return [batch.response_ids_BT[b, :n].tolist() for b, n in enumerate(batch.response_lengths_B.tolist())]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_smollm2_with_lora_through_launch_exports_a_model_plain_transformers_serves(
        ray_cluster: Any, smollm2_dir: str, private_model_cache: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from safetensors.torch import load_file

    from skyrl_core.config import load_config
    from skyrl_engine import lora
    from skyrl_engine.models import load_model, load_tokenizer
    from skyrl_nb.dashboard import Dashboard

    monkeypatch.setattr(ray_cluster, "engine_module", "skyrl_engine")  # the real engine, not fake_engine
    job = ray_cluster.launch("smollm2", overrides=[*SMALL, f"run.run_root={tmp_path / 'runs'}"], run_id="smollm2-lora",
                             runtime_env={"env_vars": {"SKYRL_NB_CACHE": private_model_cache}})
    assert job.wait(timeout=480, poll_s=1.0) == "succeeded", job.logs(tail=60)
    rows = job.run.metrics()
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))

    started = next(e for e in job.run.events() if e["kind"] == "started")
    counts = started["policy_parameters"]
    assert counts["lora_rank"] == 8 and 134_000_000 < counts["total"] - counts["trainable"] < 135_000_000
    assert 1_000_000 < counts["trainable"] < 5_000_000  # rank 8 on every linear layer but the head
    assert all(r["policy/sync_weights_bytes"] == 4 * counts["trainable"] for r in rows)  # the adapter alone
    dash = Dashboard(job.run, static=True)
    dash.refresh()
    assert "trainable (LoRA rank 8)" in dash.header()

    policy = Path(job.run_dir) / "checkpoints" / f"global_step_{STEPS}" / "policy"
    adapter = lora.read_adapter(str(policy))
    assert any(torch.count_nonzero(v) for k, v in adapter.items() if "lora_B" in k)  # B starts at zero: it trained
    merged, base = load_file(policy / "model.safetensors"), load_file(Path(smollm2_dir) / "model.safetensors")
    moved = {k for k in merged if not torch.equal(merged[k], base[k])}
    assert moved and all(k.endswith("_proj.weight") for k in moved)  # only adapted layers; norms, embedding frozen

    result = job.export(tmp_path / "model")
    dest = tmp_path / "model"
    assert result.step == STEPS and result.adapter and (dest / "adapter" / "adapter_config.json").is_file()
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= set(result.files)

    prompts = distinct_prompts("builtin://word_problems/test", 5)
    reload = subprocess.Popen([sys.executable, "-c", RELOAD, json.dumps([str(dest), prompts, NEW_TOKENS, 1])],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tokenizer = load_tokenizer(str(policy))
        generator_side = _greedy(load_model(str(policy)), tokenizer, prompts)  # what the engine samples with
        trainer_side = lora.wrap(load_model(smollm2_dir), load_config(job.run.config()).trainer.policy.model.lora, 0)
        lora.install_adapter(trainer_side, adapter, str(policy))
        trainer_side.eval()
        trainer_greedy = _greedy(trainer_side, tokenizer, prompts)
        out, err = reload.communicate(timeout=300)
    finally:
        torch.set_num_threads(threads)  # the tests after this one in this process keep theirs
        if reload.poll() is None:
            reload.kill()
            reload.wait()
    assert reload.returncode == 0, err[-3000:]
    got = json.loads(out.strip().splitlines()[-1])
    assert got["leaked"] == [] and got["class"] == "LlamaForCausalLM" and got["eos"] == 2
    assert got["generated"] == generator_side
    assert trainer_greedy == generator_side
    assert any(len(g) > 3 for g in got["generated"])  # it answered something, not just EOS
