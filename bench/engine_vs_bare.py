"""Engine step time vs a bare hand-written torch GRPO loop, same model, same batch, one run.

Each repetition times, back to back (interleaved, so load changes hit all alike):

- ``bare``: prompts → a minimal KV-cache sampling loop → exact-match reward → group-normalised
  advantages → clipped token-mean loss → AdamW step; no framework, no run store;
- ``engine_local``: one ``RLTrainer.train_one_step`` with the generator and trainer in this process
  (sampling, skyrl-gym envs, registries, weight sync by state dict, trajectories Parquet, metrics);
- ``engine_ray``: the same step with the generator and trainer as Ray actors (what
  ``python -m skyrl_engine train`` runs), including the weight sync through the object store.

``engine_over_bare`` is the Ray engine's median step over the bare loop's (falls back to the
in-process engine, and says so, if a local Ray cluster cannot start). Prints one JSON line and
writes it to ``bench/results/engine_vs_bare.json``.

    .venv/bin/python -m bench engine_vs_bare [--reps 20] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from bench import RESULTS


def bare_grpo_step(model, optimizer, tokenizer, rows, n: int, max_len: int, generator) -> float:
    """One hand-written GRPO step; returns the mean reward."""
    import torch

    from skyrl_engine.models import encode_prompt

    prompts = [encode_prompt(tokenizer, row.prompt) for row in rows for _ in range(n)]
    truths = [str(row.ground_truth) for row in rows for _ in range(n)]
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, width - len(p) :] = torch.tensor(p)
        mask[b, width - len(p) :] = 1
    from transformers import DynamicCache

    model.eval()
    with torch.no_grad():
        cache = DynamicCache()
        out = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0), cache=cache, logits_to_keep=1)
        pos = mask.sum(-1)
        alive = torch.ones(len(prompts), dtype=torch.bool)
        tokens = []
        for _ in range(max_len):
            probs = torch.softmax(out.logits[:, -1].float(), -1)
            tok = torch.multinomial(probs, 1, generator=generator)[:, 0]
            tok = torch.where(alive, tok, torch.full_like(tok, pad))
            tokens.append(tok)
            mask = torch.cat([mask, alive.long()[:, None]], 1)
            alive = alive & (tok != eos)
            if not alive.any():
                break
            out = model(input_ids=tok[:, None], attention_mask=mask, position_ids=pos[:, None], cache=cache)
            pos = pos + 1
    resp = torch.stack(tokens, 1)
    resp_mask = mask[:, width:]
    texts = [tokenizer.decode(r[m.bool()].tolist(), skip_special_tokens=True) for r, m in zip(resp, resp_mask, strict=True)]
    rewards = torch.tensor([1.0 if t.strip() == g else 0.0 for t, g in zip(texts, truths, strict=True)])
    grouped = rewards.view(-1, n)
    adv = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-6)).view(-1, 1)
    model.train()
    seq = torch.cat([ids, resp], 1)
    logits = model(input_ids=seq, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
    logp = torch.log_softmax(logits[:, width - 1 : -1].float(), -1).gather(-1, resp[..., None])[..., 0]
    ratio = torch.exp(logp - logp.detach())
    per_token = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
    loss = (per_token * resp_mask).sum() / resp_mask.sum()
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return float(rewards.mean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args(argv)

    import torch

    from skyrl_core.config import load_config
    from skyrl_engine.build import build
    from skyrl_engine.models import load_model, load_tokenizer, resolve_model_path
    from skyrl_engine.policy import set_torch_threads
    from skyrl_engine.tasks import load_prompts

    set_torch_threads(args.threads)
    tmp = tempfile.mkdtemp(prefix="bench-engine-")
    cfg = load_config("quickstart", [
        f"run.run_root={tmp}", "run.run_id=local", "trainer.eval_interval=0", "trainer.eval_before_train=false",
        "trainer.ckpt_interval=0", f"trainer.num_threads={args.threads}", f"trainer.max_training_steps={args.reps + 1}",
    ])
    train = load_prompts(cfg.data.train_data, "arithmetic")
    model_path = resolve_model_path(cfg.trainer.policy.model.path, train, cfg.trainer.seed)
    total = cfg.total_steps(len(train))
    g, t = cfg.generator, cfg.trainer

    # trainer.num_threads=args.threads: every role in this process, each on that many torch threads
    local = build(cfg, model_path=model_path, train_rows=train, val_rows=[], total_steps=total, in_process=True).trainer
    bare_model, tokenizer = load_model(model_path), load_tokenizer(model_path)
    oc = t.policy.optimizer_config
    bare_opt = torch.optim.AdamW(bare_model.parameters(), lr=oc.lr, weight_decay=oc.weight_decay)
    bare_gen = torch.Generator().manual_seed(0)

    ray_trainer, connection, ray_note = None, None, None
    if not args.no_ray:
        try:
            from skyrl_engine.ray_runtime import connect

            connection = connect(num_cpus=2)
            # disaggregated: the generator and the policy as Ray actors, one CPU bundle each
            cfg_ray = cfg.with_overrides(["run.run_id=ray", "trainer.placement.colocate_all=false"])
            ray_trainer = build(cfg_ray, model_path=model_path, train_rows=train, val_rows=[], total_steps=total,
                                in_process=False).trainer
        except Exception as err:  # report, and fall back to the in-process engine
            ray_note = f"ray engine unavailable: {type(err).__name__}: {err}"

    times: dict[str, list[float]] = {"bare": [], "engine_local": [], "engine_ray": []}
    parts: dict[str, dict[str, list[float]]] = {"engine_local": {}, "engine_ray": {}}

    def keep_parts(side: str, metrics: dict) -> None:
        for key, value in metrics.items():
            if key.startswith("timing/"):
                parts[side].setdefault(key[len("timing/"):], []).append(float(value))

    for step in range(1, args.reps + 2):
        rows = local.loader.batch(step)
        start = time.perf_counter()
        bare_grpo_step(bare_model, bare_opt, tokenizer, rows, g.n_samples_per_prompt, g.sampling_params.max_generate_length, bare_gen)
        bare_s = time.perf_counter() - start
        start = time.perf_counter()
        local_metrics = local.train_one_step(step)
        local_s = time.perf_counter() - start
        ray_s = None
        if ray_trainer is not None:
            start = time.perf_counter()
            ray_metrics = ray_trainer.train_one_step(step)
            ray_s = time.perf_counter() - start
        if step == 1:
            continue  # warm-up: first calls allocate caches, import lazily
        times["bare"].append(bare_s)
        times["engine_local"].append(local_s)
        keep_parts("engine_local", local_metrics)
        if ray_s is not None:
            times["engine_ray"].append(ray_s)
            keep_parts("engine_ray", ray_metrics)

    med = {k: statistics.median(v) for k, v in times.items() if v}
    engine_key = "engine_ray" if "engine_ray" in med else "engine_local"
    result = {
        "bench": "engine_vs_bare",
        "reps": args.reps,
        "threads": args.threads,
        "batch": f"{t.train_batch_size} prompts x {g.n_samples_per_prompt} samples, max {g.sampling_params.max_generate_length} tokens",
        "bare_step_s": round(med["bare"], 4),
        "engine_local_step_s": round(med["engine_local"], 4),
        "engine_ray_step_s": round(med["engine_ray"], 4) if "engine_ray" in med else None,
        "engine_over_bare": round(med[engine_key] / med["bare"], 3),
        "engine_over_bare_measured_on": engine_key,
        "engine_local_over_bare": round(med["engine_local"] / med["bare"], 3),
        "goal": 1.15,
        # the engine's own step timings (median seconds), where the two engine paths differ
        "timing_median_s": {side: {k: round(statistics.median(v), 4) for k, v in p.items()} for side, p in parts.items() if p},
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "note": ray_note,
    }
    if ray_trainer is not None:
        ray_trainer.workers.shutdown()
    if connection is not None:
        connection.close()
    out = RESULTS / "engine_vs_bare.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
