"""`skyrl_nb.configure()`: live validation beside fields, resources, YAML round trip, Launch."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def test_form_starts_valid_and_round_trips(tmp_path: Path) -> None:
    import skyrl_nb
    from skyrl_core.config import load_config

    form = skyrl_nb.configure("quickstart", overrides=[f"run.run_root={tmp_path}"])
    assert form.problems == [] and form.config is not None
    text = form.to_yaml()
    assert load_config("quickstart", overrides=[f"run.run_root={tmp_path}"]).to_yaml() == text
    assert form.view.yaml.value == text
    assert "CPU actors" in form.view.resources.value
    assert not form.view.launch.disabled
    # YAML -> form -> YAML is the identity, for keys the form shows and keys it does not.
    edited = text.replace("seed: 42", "seed: 5").replace("n_samples_per_prompt: 8", "n_samples_per_prompt: 16")
    assert form.from_yaml(edited) == []
    assert form.view.inputs["generator.n_samples_per_prompt"].value == "16"
    assert form.to_yaml() == edited
    assert "valid" in repr(form) and "<pre>" in form._repr_html_()


def test_bad_fields_get_messages_beside_them(tmp_path: Path) -> None:
    import skyrl_nb

    form = skyrl_nb.configure("quickstart", overrides=[f"run.run_root={tmp_path}"])
    form.set("trainer.policy.optimizer_config.lr", "fast")
    msgs = form.view.messages
    assert "lr" in form.problems[0] and msgs["trainer.policy.optimizer_config.lr"].value
    assert form.view.launch.disabled and form.config is None
    form.set("trainer.policy.optimizer_config.lr", "3e-4")
    assert form.problems == [] and msgs["trainer.policy.optimizer_config.lr"].value == ""
    assert form.config.trainer.policy.optimizer_config.lr == 3e-4
    # A cross-field problem lands beside the field it names.
    form.set("trainer.policy_mini_batch_size", "64")
    assert "larger than" in msgs["trainer.policy_mini_batch_size"].value
    form.set("trainer.policy_mini_batch_size", "16")
    form.set("generator.n_samples_per_prompt", "1")
    assert "no group" in msgs["generator.n_samples_per_prompt"].value
    form.set("generator.n_samples_per_prompt", "8")
    form.set("data.train_data", "/nope/train.parquet")
    assert "does not exist" in msgs["data.train_data"].value
    form.set("data.train_data", "builtin://arithmetic/train")
    assert form.problems == []


def test_vllm_resources_and_bad_yaml(tmp_path: Path) -> None:
    import skyrl_nb

    form = skyrl_nb.configure("quickstart", overrides=[f"run.run_root={tmp_path}"])
    form.set("generator.inference_engine.backend", "vllm")
    form.set("generator.inference_engine.num_engines", "2")
    form.set("trainer.placement.colocate_all", False)
    assert "3 GPU(s)" in form.view.resources.value
    assert form.from_yaml("trainer: [1") and "not valid YAML" in form.view.general.value


def test_launch_button_submits_to_the_cluster(tmp_path: Path, spy_cluster: Any) -> None:
    import skyrl_nb

    form = skyrl_nb.configure("quickstart", overrides=[f"run.run_root={tmp_path}", "run.run_id=form-run"],
                              cluster=spy_cluster)
    form.view.launch.click()
    (sub,) = spy_cluster.client.submitted
    assert sub["submission_id"] == "form-run" and form.job.run_id == "form-run"


QWEN2_1_5B = {"model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
              "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True}


def test_form_shows_each_ranks_memory_live(tmp_path: Path) -> None:
    import skyrl_nb

    form = skyrl_nb.configure("quickstart", overrides=[f"run.run_root={tmp_path}"])
    # the built-in model: 407,424 fp32 parameters x (4 + 4 + 8) bytes = 6.2 MiB on one worker
    assert "memory per rank:</i> policy 6.2 MiB per rank (one worker); activations not counted" in form.view.resources.value
    form.set("generator.inference_engine.num_engines", "2")  # colocated: as many engine slots as policy ranks
    form.set("trainer.placement.policy_num_gpus_per_node", "2")
    assert form.problems == [] and "policy 3.1 MiB per rank (fsdp2 over 2 ranks)" in form.view.resources.value
    form.set("trainer.strategy", "ddp")
    assert "policy 6.2 MiB per rank (ddp over 2 ranks)" in form.view.resources.value
    assert form.memory.role("policy").layout == "ddp over 2 ranks"


def test_form_refuses_ranks_its_cluster_cannot_hold(tmp_path: Path, spy_cluster: Any) -> None:
    import json

    import skyrl_nb

    model = tmp_path / "qwen2-1.5b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN2_1_5B))
    calls = []
    spy_cluster.node_resources = lambda: calls.append(1) or [
        {"CPU": 8.0, "GPU": 2.0, "memory": 64.0 * 2**30, "accelerator_type:T4": 2.0}]
    form = skyrl_nb.configure("quickstart", overrides=[f"run.run_root={tmp_path}", f"trainer.policy.model.path={model}"],
                              cluster=spy_cluster)
    (line,) = form.problems
    assert line.startswith("trainer.placement.policy_num_gpus_per_node, trainer.strategy: the policy needs 23.0 GiB")
    assert "a GPU (T4) has 16.0 GiB" in line
    # in the form's words, the keys in small print; Launch says why it is off
    shown = form.view.general.value.replace("&#x27;", "'")
    assert "policy GPUs / node, strategy: the policy needs 23.0 GiB" in shown
    assert "<small" in shown and "trainer.placement.policy_num_gpus_per_node, trainer.strategy</small>" in shown
    assert "Launch is off: policy GPUs / node, strategy: the policy needs 23.0 GiB" in form.view.launch_reason.value
    assert form.view.launch.disabled and form.config is None
    form.set("generator.inference_engine.num_engines", "2")  # colocated: as many engine slots as policy ranks
    form.set("trainer.placement.policy_num_gpus_per_node", "2")  # fsdp2: 11.5 GiB per rank
    assert form.problems == [] and not form.view.launch.disabled and form.view.launch_reason.value == ""
    assert "policy 11.5 GiB per rank (fsdp2 over 2 ranks)" in form.view.resources.value
    assert len(calls) == 1  # the cluster is asked once, not on every edit


def test_messages_use_the_labels_with_the_key_in_small_print(tmp_path: Path) -> None:
    import skyrl_nb

    form = skyrl_nb.configure("quickstart", overrides=[f"run.run_root={tmp_path}"])
    form.set("trainer.policy_mini_batch_size", "64")
    beside = form.view.messages["trainer.policy_mini_batch_size"].value.replace("&#x27;", "'")
    assert "'prompts / step'" in beside and "larger than" in beside  # another field named by its label
    assert "<small" in beside and ">trainer.policy_mini_batch_size</small>" in beside
    assert form.view.launch.disabled and form.view.launch_reason.value.startswith(
        "<span style='color:var(--jp-ui-font-color1, #222)'>Launch is off: prompts / update: ")


def test_gpus_are_checked_against_the_cluster(tmp_path: Path, spy_cluster: Any, monkeypatch: Any) -> None:
    """A vLLM plan asking for more GPUs than the cluster's nodes have keeps Launch off (vLLM itself is there:
    the probe is the slow test's, tests/notebook/test_local_cluster.py)."""
    import skyrl_nb
    import skyrl_nb.cluster.packages as packages

    asked = []  # the cluster's one package probe, answered here: vLLM is there
    monkeypatch.setattr(packages, "_ask_with_a_job", lambda cluster, timeout=0: asked.append(cluster) or {"vllm": None})
    spy_cluster.node_resources = lambda: [{"CPU": 8.0, "GPU": 2.0, "memory": 64.0 * 2**30}]
    form = skyrl_nb.configure("quickstart", overrides=[f"run.run_root={tmp_path}"], cluster=spy_cluster)
    assert form.problems == [] and asked == []  # torch: nothing to ask
    form.set("generator.inference_engine.backend", "vllm")
    form.set("generator.inference_engine.num_engines", "2")
    form.set("trainer.placement.colocate_all", False)  # 2 engines + 1 trainer = 3 GPUs
    assert any("needs 3 GPU but the cluster has 2 GPU in all" in p for p in form.problems), form.problems
    assert form.view.launch.disabled and "needs 3 GPU but the cluster has 2 GPU in all" in form.view.general.value
    form.set("generator.inference_engine.num_engines", "1")
    assert form.problems == [] and not form.view.launch.disabled
    assert asked == [spy_cluster]  # the cluster was asked about vLLM once


def test_the_form_previews_your_own_data_and_rewards_and_refuses_a_bad_one() -> None:
    """configure(data=..., reward=...): rows, columns and one example of the data, each reward's name above the
    form; the form's data field is the shipped file; a function that cannot be used is one line, no form."""
    import pandas as pd

    from skyrl_core.config import ConfigError
    from skyrl_nb.form import configure

    def exact(prompt, completion, ground_truth, **_):
        return float(completion.strip() == ground_truth)

    df = pd.DataFrame({"question": ["1+1", "2+2"], "answer": ["2", "4"]})
    form = configure("quickstart", data=df, columns={"prompt": "question", "ground_truth": "answer"},
                     reward=[(exact, 0.5)])
    assert form.problems == []
    preview = form.view.preview.value
    assert "a pandas.DataFrame, 2 rows, columns question, answer" in preview
    assert "&quot;question&quot;: &quot;1+1&quot;" in preview and "<b>reward</b> exact &times;0.5 (per sample)" in preview
    assert form.view.raw_values()["data.train_data"][0].startswith("inputs://train-")
    assert form.config.reward.functions[0].name == "exact"
    try:
        configure("quickstart", data=df, columns={"prompt": "question"}, reward=[(exact, "x")])
    except ConfigError as err:
        assert err.problems == ["reward 'exact': weight 'x' is not a number; give (fn, 0.5)"]
    else:
        raise AssertionError("a weight that is no number was taken")
