"""The per-rank memory estimate (skyrl_core.memory): parameter counts without torch, the bytes per rank for
each strategy, and the one-line refusal when a rank cannot fit."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from skyrl_core.config import MAX_PROBLEM_CHARS, load_config
from skyrl_core.memory import (
    TINY_QWEN2,
    RankCapacity,
    capacity_from_nodes,
    decoder_params,
    model_shape,
    rank_memory,
)

GiB = 2**30

# Hugging Face config.json files of published models, with the parameter counts their model cards give.
QWEN2_1_5B = {"model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
              "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True}
QWEN2_1_5B_PARAMS = 1_543_714_304
QWEN2_5_0_5B = {**QWEN2_1_5B, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                "num_attention_heads": 14}
LLAMA_3_2_1B = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256,
                "tie_word_embeddings": True, "attention_bias": False}


def _model_dir(tmp_path: Path, config: dict, name: str = "model") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _config(path: Path | str, *overrides: str):
    return load_config("quickstart", [f"trainer.policy.model.path={path}", *overrides])


def test_config_json_arithmetic_matches_published_counts() -> None:
    assert decoder_params(QWEN2_1_5B).params == QWEN2_1_5B_PARAMS
    assert decoder_params(QWEN2_5_0_5B).params == 494_032_768
    assert decoder_params(LLAMA_3_2_1B).params == 1_235_814_400
    # Untied: an LM head of vocab x hidden more, which a value model drops for a hidden -> 1 head.
    untied = decoder_params({**QWEN2_1_5B, "tie_word_embeddings": False})
    assert untied.params == QWEN2_1_5B_PARAMS + 151936 * 1536 and untied.lm_head == 151936 * 1536
    assert untied.value_model().params == QWEN2_1_5B_PARAMS + 1536
    assert decoder_params({"model_type": "gpt2", "n_embd": 768}) is None


def test_builtin_tiny_model_matches_the_engine() -> None:
    from skyrl_engine.models import EOS, PAD, ROLE_TOKENS, TINY_MODEL, UNK, TinyModelSpec

    spec = TinyModelSpec()
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size"):
        assert TINY_QWEN2[key] == getattr(spec, key), key
    # build_char_tokenizer: the special tokens, "\n" and the 95 printable ASCII characters
    assert TINY_QWEN2["vocab_size"] == len([PAD, EOS, UNK, *ROLE_TOKENS]) + 1 + 95
    # Qwen2ForCausalLM(Qwen2Config(**TINY_QWEN2)) counts 407,424 parameters
    assert model_shape(TINY_MODEL).params == 407_424


def test_safetensors_header_is_read_without_torch(tmp_path: Path) -> None:
    folder = _model_dir(tmp_path, {"model_type": "unknown-arch", "hidden_size": 8})
    tensors = {"model.embed.weight": [10, 8], "model.norm.weight": [8], "lm_head.weight": [10, 8]}
    header = {"__metadata__": {"format": "pt"}, **{
        name: {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]} for name, shape in tensors.items()}}
    raw = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 16)
    shape = model_shape(str(folder))
    assert (shape.params, shape.lm_head, shape.hidden_size) == (80 + 8 + 80, 80, 8)
    assert "safetensors" in shape.source
    # no weights and an architecture config.json arithmetic does not know: unknown
    assert model_shape(str(_model_dir(tmp_path, {"model_type": "unknown-arch"}, "bare"))) is None
    assert model_shape(str(tmp_path / "missing")) is None


def test_fsdp2_shards_what_ddp_replicates(tmp_path: Path) -> None:
    path = _model_dir(tmp_path, QWEN2_1_5B)
    P = QWEN2_1_5B_PARAMS
    one = rank_memory(_config(path)).role("policy")
    assert (one.parameters, one.gradients, one.optimizer, one.layout) == (4 * P, 4 * P, 8 * P, "one worker")
    assert one.total == 16 * P == 24_699_428_864
    ddp = rank_memory(_config(path, "trainer.placement.policy_num_gpus_per_node=4", "trainer.strategy=ddp"))
    fsdp2 = rank_memory(_config(path, "trainer.placement.policy_num_gpus_per_node=4"))
    assert ddp.role("policy").total == 16 * P and ddp.role("policy").layout == "ddp over 4 ranks"
    assert fsdp2.role("policy").total == 4 * P == ddp.role("policy").total // 4
    assert fsdp2.role("policy").optimizer == 2 * P and fsdp2.role("policy").layout == "fsdp2 over 4 ranks"
    # 2 nodes x 2 GPUs is 4 ranks too
    nodes = rank_memory(_config(path, "trainer.placement.policy_num_nodes=2", "trainer.placement.policy_num_gpus_per_node=2"))
    assert nodes.role("policy") == fsdp2.role("policy")
    # model_params overrides the model's size
    assert rank_memory(_config(path), model_params=1000).role("policy").total == 16_000


def test_critic_reference_and_offload(tmp_path: Path) -> None:
    path = _model_dir(tmp_path, {**QWEN2_1_5B, "tie_word_embeddings": False})
    P = QWEN2_1_5B_PARAMS + 151936 * 1536
    est = rank_memory(_config(path, "trainer.algorithm.advantage_estimator=gae", "trainer.algorithm.use_kl_loss=true",
                              "trainer.placement.policy_num_gpus_per_node=2", "trainer.placement.critic_num_gpus_per_node=2"))
    assert [r.role for r in est.roles] == ["policy", "critic", "reference"]
    critic_params = QWEN2_1_5B_PARAMS + 1536  # the body, and a value head instead of the LM head
    assert est.role("critic").params == critic_params and est.role("critic").total == 16 * critic_params // 2
    ref = est.role("reference")  # frozen, whole, one worker: parameters only
    assert (ref.parameters, ref.gradients, ref.optimizer, ref.layout) == (4 * P, None, None, "frozen, one worker")
    assert est.device_bytes == 8 * P + 8 * critic_params + 4 * P and est.host_bytes == 0
    offload = rank_memory(_config(path, "trainer.placement.policy_num_gpus_per_node=2",
                                  "trainer.policy.fsdp_config.cpu_offload=true"))
    assert offload.role("policy").offloaded and offload.device_bytes == 0 and offload.host_bytes == 8 * P
    with pytest.raises(KeyError, match="no 'critic' role"):
        offload.role("critic")


def test_a_rank_that_cannot_fit_is_refused_in_one_line(tmp_path: Path) -> None:
    path = _model_dir(tmp_path, QWEN2_1_5B)
    est = rank_memory(_config(path))
    t4 = RankCapacity("GPU", 16 * GiB, 64 * GiB, "T4")
    assert est.problems(t4) == [
        "trainer.placement.policy_num_gpus_per_node, trainer.strategy: the policy needs 23.0 GiB per rank "
        "(parameters 5.8 + gradients 5.8 + AdamW 11.5, one worker) but a GPU (T4) has 16.0 GiB; allowed: fsdp2 "
        "over at least 2 ranks (nodes × GPUs per node), or "
        "trainer.policy.fsdp_config.cpu_offload=true"]
    assert est.problems(RankCapacity("GPU", 141 * GiB, 1000 * GiB, "H200")) == []
    assert rank_memory(_config(path, "trainer.placement.policy_num_gpus_per_node=2")).problems(t4) == []
    # unknown device memory or unknown model size: shown, never refused
    assert est.problems(RankCapacity("GPU", None, 64 * GiB)) == [] and est.problems(None) == []
    unknown = rank_memory(_config(_model_dir(tmp_path, {"model_type": "gpt2"}, "gpt2")))
    assert not unknown.known and unknown.problems(t4) == [] and "size unknown" in repr(unknown)
    # a CPU rank: the node's memory over its ranks holds everything
    (cpu,) = est.problems(RankCapacity("CPU", 8 * GiB, 8 * GiB, "node memory 16.0 GiB / 2 rank(s)"))
    assert cpu.startswith("trainer.placement.policy_num_nodes, trainer.strategy: the policy needs 23.0 GiB per rank")
    assert "a CPU rank has 8.0 GiB (node memory 16.0 GiB / 2 rank(s))" in cpu
    # offloaded to a host that is too small
    offload = rank_memory(_config(path, "trainer.placement.policy_num_gpus_per_node=2",
                                  "trainer.policy.fsdp_config.cpu_offload=true"))
    (host,) = offload.problems(RankCapacity("GPU", 16 * GiB, 4 * GiB, "T4"))
    assert host.startswith("trainer.placement.policy_num_nodes, trainer.policy.fsdp_config.cpu_offload: the policy "
                           "needs 11.5 GiB per rank") and "host memory has 4.0 GiB per rank" in host


def test_every_role_on_rank_0_stays_one_short_line(tmp_path: Path) -> None:
    path = _model_dir(tmp_path, QWEN2_1_5B)
    est = rank_memory(_config(path, "trainer.algorithm.advantage_estimator=gae", "trainer.algorithm.use_kl_loss=true"))
    (line,) = est.problems(RankCapacity("GPU", 16 * GiB, 64 * GiB, "T4"))
    assert line.startswith("trainer.placement.policy_num_gpus_per_node, trainer.strategy, trainer.algorithm.use_kl_loss: "
                           "rank 0 needs 51.8 GiB (policy 23.0, critic 23.0, reference 5.8)")
    # policy and critic shard (32P over 5 ranks = 9.2 GiB), the reference (5.8 GiB) does not: 15.0 < 16
    assert "fsdp2 over at least 5 ranks" in line and line.endswith("use_kl_loss=false")
    assert "\n" not in line and len(line) <= MAX_PROBLEM_CHARS


def test_capacity_from_ray_nodes() -> None:
    h100 = {"CPU": 96, "GPU": 8, "memory": 800 * GiB, "accelerator_type:H100": 8}
    cap = capacity_from_nodes([{"CPU": 8, "memory": 16 * GiB}, h100], ranks_per_node=8)
    assert (cap.device, cap.device_bytes, cap.host_bytes, cap.source) == ("GPU", 80 * GiB, 100 * GiB, "H100")
    cpu = capacity_from_nodes([{"CPU": 2, "memory": 6 * GiB}, {"CPU": 2, "memory": 10 * GiB}], ranks_per_node=2)
    assert (cpu.device, cpu.device_bytes) == ("CPU", 5 * GiB) and "10.0 GiB / 2 rank(s)" in cpu.source
    odd = capacity_from_nodes([{"GPU": 1, "memory": 8 * GiB, "accelerator_type:XYZ": 1}], ranks_per_node=1)
    assert odd.device_bytes is None and "unknown" in repr(odd)
    assert capacity_from_nodes([], 1) is None


def test_estimate_shows_itself(tmp_path: Path) -> None:
    est = rank_memory(_config(_model_dir(tmp_path, QWEN2_1_5B), "trainer.placement.policy_num_gpus_per_node=4",
                              "trainer.algorithm.use_kl_loss=true"))
    text = repr(est)
    assert "policy fsdp2 over 4 ranks" in text and "activations not counted" in text
    assert "1,543,714,304 params" in text and "parameters 1.4 + gradients 1.4 + AdamW 2.9 = 5.8 GiB" in text
    assert "rank 0's device: 11.5 GiB" in text
    assert est.summary() == ("policy 5.8 GiB per rank (fsdp2 over 4 ranks), reference 5.8 GiB (frozen, one worker); "
                             "activations not counted")
    page = est._repr_html_()
    assert "<table>" in page and "<td>fsdp2 over 4 ranks</td>" in page and "<td>2.9 GiB</td>" in page
    assert "H100" in repr(RankCapacity("GPU", 80 * GiB, None, "H100")) and "<code>" in RankCapacity("CPU", 1)._repr_html_()
