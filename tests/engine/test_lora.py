"""LoRA (issue 13): only the adapters train, a weight sync carries only them, checkpoints keep both the PEFT
adapter and the merged model, and a resumed run continues exactly.

One in-process run of the tiny untrained model (3 steps, a checkpoint after each) is shared by the tests here.
"""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest
import torch
from safetensors.torch import load_file
from small_models import llama_gqa, with_adapter

from skyrl_core.config import load_config
from skyrl_core.runs import RunReader
from skyrl_engine import lora, lora_forward
from skyrl_engine.build import build

RANK = 4
STEPS = 3


def _cfg(root: Path, model_dir: str, run_id: str, *extra: str):
    return load_config("quickstart", [
        f"trainer.policy.model.path={model_dir}", f"run.run_root={root}", f"run.run_id={run_id}",
        "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4", "trainer.micro_train_batch_size_per_gpu=8",
        "generator.n_samples_per_prompt=2", f"trainer.max_training_steps={STEPS}", "trainer.eval_interval=0",
        "trainer.eval_before_train=false", "trainer.ckpt_interval=1", "trainer.max_ckpts_to_keep=-1", "trainer.num_threads=1",
        "generator.sampling_params.max_generate_length=4", "trainer.policy.optimizer_config.lr=1e-2",
        "trainer.algorithm.use_entropy_loss=true",  # a gradient even when every reward ties
        f"trainer.policy.model.lora.rank={RANK}", "trainer.policy.model.lora.alpha=8", *extra,
    ])


def _train(cfg, model_dir: str):
    engine = build(cfg, model_path=model_dir, val_rows=[], in_process=True)
    workers = engine.workers
    try:
        engine.train()
        sampler = {k: v.clone() for k, v in workers.generator.worker.backend.model.state_dict().items()}
    finally:
        workers.shutdown()
    return workers, sampler


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("lora-runs")
    cfg = _cfg(root, tiny_model_dir, "lora")
    workers, sampler = _train(cfg, tiny_model_dir)
    return cfg, workers, sampler


def _policy_dir(cfg, step: int) -> Path:
    return Path(cfg.run_dir) / "checkpoints" / f"global_step_{step}" / "policy"


def test_only_adapters_train_and_a_sync_carries_only_them(lora_run, tiny_model_dir):
    cfg, workers, sampler = lora_run
    base = load_file(Path(tiny_model_dir) / "model.safetensors")
    reader = RunReader(cfg.run_dir)
    started = next(e for e in reader.events() if e["kind"] == "started")
    adapted = [name for name, layer in lora._lora_layers(workers.policy.worker.model).items()]
    assert adapted and all(".mlp." in n or ".self_attn." in n for n in adapted)  # all-linear: not the head
    counts = started["policy_parameters"]
    base_total = sum(v.numel() for k, v in base.items() if k != "lm_head.weight")
    assert counts["lora_rank"] == RANK and counts["total"] == base_total + counts["trainable"]
    assert 0 < counts["trainable"] < counts["total"] / 10
    # a sync sends the adapters alone: (rank × in + out × rank) float32 per adapted layer
    adapter_bytes = 4 * sum(RANK * base[f"{n}.weight"].shape[1] + base[f"{n}.weight"].shape[0] * RANK for n in adapted)
    assert adapter_bytes == 4 * counts["trainable"]
    rows = reader.metrics()
    assert [r["policy/sync_weights_bytes"] for r in rows] == [adapter_bytes] * STEPS
    assert all(r["timing/sync_weights"] >= 0 for r in rows)

    merged = load_file(_policy_dir(cfg, STEPS) / "model.safetensors")
    assert set(merged) == set(base) - {"lm_head.weight"} or set(merged) == set(base)
    for key, value in merged.items():  # the base stays frozen: only adapted layers' merged weights moved
        if key.removesuffix(".weight") in adapted:
            assert not torch.equal(value, base[key]), key
        else:
            assert torch.equal(value, base[key]), key
    # what the generator samples with is, bit for bit, the checkpoint's (and so the export's) merged model
    assert all(torch.equal(sampler[k], merged[k]) for k in merged)
    # the adapters themselves changed from step to step (B starts at zero)
    first, last = lora.read_adapter(str(_policy_dir(cfg, 1))), lora.read_adapter(str(_policy_dir(cfg, STEPS)))
    assert set(first) == set(last) and len(last) == 2 * len(adapted)
    assert all(not torch.equal(first[k], last[k]) for k in last if "lora_B" in k)


def test_the_checkpoint_is_a_peft_adapter_and_a_plain_model(lora_run, tiny_model_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    cfg, _, _ = lora_run
    policy = _policy_dir(cfg, STEPS)
    names = {p.name for p in policy.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "adapter", "tokenizer.json",
            "tokenizer_config.json"} <= names and "adapter_config.json" not in names
    assert {p.name for p in (policy / "adapter").iterdir()} == {"adapter_model.safetensors", "adapter_config.json"}
    adapter_config = json.loads((policy / "adapter" / "adapter_config.json").read_text())
    assert (adapter_config["r"], adapter_config["lora_alpha"], adapter_config["peft_type"]) == (RANK, 8, "LORA")
    ids = torch.tensor([[7, 8, 9, 10, 11, 12]])
    plain = AutoModelForCausalLM.from_pretrained(policy).eval()
    with_adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                                             policy / "adapter").eval()
    with torch.no_grad():
        gap = (plain(ids).logits - with_adapter(ids).logits).abs().max().item()
    assert gap < 1e-5, gap


def test_merging_is_peft_s_and_adapters_never_stack(tiny_model_dir):
    from skyrl_core.config import LoraConfig
    from skyrl_engine.models import load_model

    peft_model = lora.wrap(load_model(tiny_model_dir), LoraConfig(rank=2, alpha=4, target_modules=["q_proj", "v_proj"]), 0)
    for name, p in peft_model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1)
    ours = lora.merged_state_dict(peft_model)
    reference = peft_model.merge_and_unload(safe_merge=True).state_dict()
    assert set(ours) == set(reference)
    assert max((ours[k] - reference[k]).abs().max().item() for k in ours) < 1e-6

    plain = load_model(tiny_model_dir)
    adapter = lora.LoraAdapter({n: (a, b) for n, (a, b) in lora.adapter_of(
        lora.wrap(load_model(tiny_model_dir), LoraConfig(rank=2, alpha=4, target_modules=["q_proj", "v_proj"]), 0)
    ).tensors.items()}, scaling=2.0)
    base_weights = lora.apply_adapter(plain, adapter, None)  # B = 0: the base model itself
    assert all(torch.equal(plain.state_dict()[f"{n}.weight"], w) for n, w in base_weights.items())
    doubled = lora.LoraAdapter({n: (a, torch.ones_like(b)) for n, (a, b) in adapter.tensors.items()}, 2.0)
    for _ in range(2):  # applied twice: still the base plus one delta
        lora.apply_adapter(plain, doubled, base_weights)
    name, (a, b) = next(iter(doubled.tensors.items()))
    assert torch.equal(plain.state_dict()[f"{name}.weight"], lora.merge_weight(base_weights[name], a, torch.ones_like(b), 2.0))
    assert "LoraAdapter(" in repr(adapter) and "MB" in repr(adapter)


def test_resume_continues_exactly_and_refuses_other_lora_settings(lora_run, tiny_model_dir, tmp_path):
    import shutil

    cfg, _, _ = lora_run
    # a copy of the run that stopped after step 2: its last checkpoint and metrics dropped
    copy = tmp_path / "runs" / "lora"
    shutil.copytree(cfg.run_dir, copy)
    shutil.rmtree(copy / "checkpoints" / f"global_step_{STEPS}")
    (copy / "checkpoints" / "latest_ckpt_global_step.txt").write_text(str(STEPS - 1))
    resumed_cfg = _cfg(tmp_path / "runs", tiny_model_dir, "lora", "trainer.resume_mode=latest")
    _train(resumed_cfg, tiny_model_dir)
    want = RunReader(cfg.run_dir).metrics()[-1]
    got = RunReader(copy).metrics()
    assert [r["step"] for r in got] == list(range(1, STEPS + 1))
    for key in ("reward/avg_raw_reward", "policy/policy_loss", "policy/grad_norm"):
        assert got[-1][key] == want[key], key
    final, again = (lora.read_adapter(str(d / "checkpoints" / f"global_step_{STEPS}" / "policy"))
                    for d in (Path(cfg.run_dir), copy))
    assert all(torch.equal(final[k], again[k]) for k in final)

    full_cfg = _cfg(tmp_path / "runs", tiny_model_dir, "lora", "trainer.resume_mode=latest",
                    "trainer.policy.model.lora.rank=0", f"trainer.max_training_steps={STEPS + 1}")
    with pytest.raises(ValueError) as err:
        _train(full_cfg, tiny_model_dir)
    line = str(err.value)
    assert line.startswith("trainer.policy.model.lora.rank:") and "holds a LoRA adapter" in line and "\n" not in line


def test_the_dashboard_says_how_much_of_the_policy_trains(lora_run):
    from skyrl_nb.dashboard import Dashboard

    cfg, _, _ = lora_run
    dash = Dashboard(str(cfg.run_dir), static=True)
    dash.refresh()
    counts = dash.series.model
    assert counts["lora_rank"] == RANK and 0 < counts["trainable"] < counts["total"]
    assert f"trainable (LoRA rank {RANK})" in dash.header()
    from skyrl_widgets.dashboard import progress_html

    assert f"trainable (LoRA rank {RANK})" in progress_html(dash.state, dash.step, dash.total_steps, None, None,
                                                           model=counts)


@pytest.mark.parametrize("arch", ["llama-gqa", "tiny-qwen2"])  # tiny Qwen2: q/k/v carry a bias
def test_the_fused_lora_forward_is_peft_s_and_steps_aside_where_it_does_not_apply(arch, tiny_model_dir):
    import copy

    from skyrl_engine.models import load_model

    torch.set_num_threads(1)
    model = with_adapter(llama_gqa() if arch == "llama-gqa" else load_model(tiny_model_dir)).train()
    fused = [m for m in model.modules() if "forward" in vars(m) and vars(m)["forward"].__func__ is lora_forward._fused_forward]
    assert len(fused) == sum(1 for n, _ in model.named_modules() if n.endswith(".lora_A"))  # every adapted layer
    norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]  # frozen: the closed-form backward
    assert norms and all(vars(m)["forward"].__func__ is lora_forward._frozen_norm_forward for m in norms)
    assert len([m for m in model.modules() if "forward" in vars(m)]) == len(fused) + len(norms)
    assert any(m.base_layer.bias is not None for m in fused) == (arch == "tiny-qwen2")
    reference = copy.deepcopy(model)
    for m in reference.modules():
        vars(m).pop("forward", None)  # PEFT's own forward
    ids = torch.randint(0, 90, (3, 11), generator=torch.Generator().manual_seed(0))

    def run(m):
        m.zero_grad()
        logits = m(input_ids=ids).logits
        (logits.sin() * torch.linspace(-1, 1, logits.shape[-1])).sum().backward()
        return logits.detach(), {n: p.grad for n, p in m.named_parameters() if p.requires_grad}

    got, got_grads = run(model)
    want, want_grads = run(reference)
    assert next(iter(fused)).forward.__func__ is lora_forward._fused_forward
    assert (got - want).abs().max().item() < 1e-5
    assert set(got_grads) == set(want_grads) and len(got_grads) == 2 * len(fused)  # A and B of every layer
    for name, g in want_grads.items():
        assert (got_grads[name] - g).abs().max().item() <= 1e-5 * max(1.0, g.abs().max().item()), name
    x = torch.randn(2, 5, fused[0].in_features, requires_grad=True)
    assert type(fused[0](x).grad_fn).__name__ == "LoraLinearBackward"  # the fused node, not PEFT's four
    h = torch.randn(2, 5, norms[0].weight.shape[0], requires_grad=True)
    assert type(norms[0](h).grad_fn).__name__ == "FrozenNormBackward"
    assert torch.equal(norms[0](h), type(norms[0]).forward(norms[0], h))  # transformers' forward, op for op
    norms[0].weight.requires_grad_(True)  # a norm that trains: its own forward, which gives its weight a gradient
    assert type(norms[0](h).grad_fn).__name__ != "FrozenNormBackward"
    norms[0].weight.requires_grad_(False)
    with model.disable_adapter():  # disabled adapters: PEFT's path, the base model's output
        off = model(input_ids=ids).logits
        assert type(fused[0](x).grad_fn).__name__ != "LoraLinearBackward"
    with reference.disable_adapter():
        assert torch.equal(off, reference(input_ids=ids).logits)
    assert not torch.allclose(off, got, atol=1e-4)  # the adapter does change the output
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast: PEFT's path, whose ops autocast knows
        assert type(fused[0](x).grad_fn).__name__ != "LoraLinearBackward"
    fused[0].base_layer.weight.requires_grad_(True)  # a base weight that trains: PEFT's path, which gives it its grad
    assert type(fused[0](x).grad_fn).__name__ != "LoraLinearBackward"


def test_bf16_base_products_round_only_the_frozen_matmuls_and_follow_the_weight(tiny_model_dir, tmp_path):
    """``trainer.lora_base_precision=bf16``: the frozen ``x W0ᵀ`` and ``g W0`` from bfloat16 copies, accumulated in
    float32; the adapters' products and every gradient of ``A`` and ``B`` stay float32. ``auto`` resolves to bf16
    exactly where the CPU multiplies bfloat16 in hardware (AMX tiles or AVX512-BF16)."""
    from skyrl_engine.models import load_model
    from skyrl_engine.policy import PolicyWorker

    torch.set_num_threads(1)
    model = with_adapter(load_model(tiny_model_dir)).train()
    layer = next(m for m in model.modules() if "forward" in vars(m) and vars(m)["forward"].__func__ is lora_forward._fused_forward)
    base, a, b, s = layer.base_layer, layer.lora_A["default"].weight, layer.lora_B["default"].weight, layer.scaling["default"]
    assert base.bias is not None and b.abs().sum() > 0  # tiny Qwen2's q_proj: a bias, and an adapter that acts
    x = torch.randn(2, 5, base.in_features, generator=torch.Generator().manual_seed(1), requires_grad=True)
    g = torch.randn(2, 5, base.out_features, generator=torch.Generator().manual_seed(2))

    def run():
        x.grad = a.grad = b.grad = None
        y = layer(x)
        y.backward(g)
        return y.detach(), x.grad, a.grad, b.grad

    fp32 = run()
    lora_forward.set_base_precision(model, "bf16")
    bf16 = run()
    x_NI, g_NO, wb = x.detach().reshape(-1, base.in_features), g.reshape(-1, base.out_features), base.weight.bfloat16()

    def product(rows, w):  # bfloat16 inputs, rows zero-padded to the bucket oneDNN sees (lora_forward._BF16_ROWS)
        padded = torch.zeros(lora_forward._BF16_ROWS, rows.shape[1], dtype=torch.bfloat16)
        padded[:len(rows)] = rows
        return (padded @ w)[:len(rows)].float()

    want_y = product(x_NI, wb.t()) + base.bias
    want_y.addmm_(x_NI @ a.t(), b.t(), alpha=s)
    assert torch.equal(bf16[0], want_y.view_as(bf16[0]))
    want_dx = product(g_NO, wb).addmm_((g_NO @ b).mul_(s), a)
    assert torch.equal(bf16[1], want_dx.view_as(bf16[1]))
    assert torch.equal(bf16[2], fp32[2]) and torch.equal(bf16[3], fp32[3])  # the adapters' own products: float32
    assert 0 < (bf16[0] - fp32[0]).abs().max() <= 2e-2 * fp32[0].abs().max()  # bfloat16 rounding, no more
    with torch.no_grad():
        base.weight.mul_(2)  # written in place: the bfloat16 copy is remade
    assert torch.allclose(run()[0] - bf16[0], product(x_NI, wb.t()).view_as(bf16[0]), atol=1e-5)
    with torch.no_grad():
        base.weight.div_(2)
    lora_forward.set_base_precision(model, "fp32")
    assert torch.equal(run()[0], fp32[0])

    assert lora_forward.base_precision("fp32") == "fp32" and lora_forward.base_precision("bf16") == "bf16"
    native = torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported()
    want = "bf16" if native else "fp32"
    assert lora_forward.base_precision("auto") == want and lora_forward.base_precision("auto", "cuda") == "fp32"
    with mock.patch.object(torch.cpu, "_is_amx_tile_supported", return_value=False):
        with mock.patch.object(torch.cpu, "_is_avx512_bf16_supported", return_value=True):  # a 4th-generation EPYC
            assert lora_forward.base_precision("auto") == "bf16"
        with mock.patch.object(torch.cpu, "_is_avx512_bf16_supported", return_value=False):  # AVX2, AVX-512 alone
            assert lora_forward.base_precision("auto") == "fp32"
    cfg = _cfg(tmp_path, tiny_model_dir, "bf16", "trainer.lora_base_precision=auto")
    worker = PolicyWorker(tiny_model_dir, cfg.trainer, 1.0, 1, num_threads=1)
    flags = {getattr(m, lora_forward._BF16_FLAG) for m in worker.model.modules() if hasattr(m, lora_forward._BF16_FLAG)}
    assert worker.base_precision == want and flags == {want == "bf16"}
