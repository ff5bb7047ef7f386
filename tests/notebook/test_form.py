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
