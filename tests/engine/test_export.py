"""Export (issue 13): a checkpoint as a Hugging Face model directory that plain transformers loads.

One in-process run of the tiny model (two steps, a checkpoint after each) is shared by every test here;
plain transformers reloads the export in a subprocess that never imports skyrl_nb, skyrl_core or skyrl_engine.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from engine_runs import distinct_prompts, train_in_process
from fake_aws import use_fake_credentials

from skyrl_engine.export import ExportError, export_model

STEPS = 2
ARTIFACTS = {"optim_world_size_1_rank_0.pt", "extra_state_world_size_1_rank_0.pt", "fsdp_config.json"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_model_dir) -> Path:
    """A finished two-step run of the tiny model with checkpoints at steps 1 and 2 (~5 s)."""
    # the entropy loss: a gradient even when every reward ties, so the two steps' weights differ
    return train_in_process(tmp_path_factory.mktemp("runs"), "unit", tiny_model_dir, STEPS,
                            "trainer.policy.optimizer_config.lr=1e-2", "trainer.algorithm.use_entropy_loss=true")


def _policy(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"global_step_{step}" / "policy"


RELOAD = r"""
import json, sys
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

dest, weights, prompts = json.loads(sys.argv[1])
model = AutoModelForCausalLM.from_pretrained(dest)
saved = load_file(weights)
state = model.state_dict()
tokenizer = AutoTokenizer.from_pretrained(dest)
rendered, generated = [], []
for messages in prompts:
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    rendered.append(text)
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=12)
    generated.append(out[0, len(ids):].tolist())
print(json.dumps({
    "leaked": sorted(m for m in sys.modules if m.split(".")[0] in ("skyrl_nb", "skyrl_core", "skyrl_engine")),
    "weights_equal": sorted(saved) == sorted(k for k in state if k in saved)
                     and all(torch.equal(saved[k], state[k]) for k in saved),
    "rendered": rendered, "generated": generated,
    "spaces": PreTrainedTokenizerFast.from_pretrained(dest).encode("12 + 30"),
}))
"""


def test_export_loads_in_plain_transformers_and_generates_like_the_sampler(run_dir, tmp_path, tiny_model_dir):
    import torch

    from skyrl_core.config import SamplingParams
    from skyrl_engine.models import encode_prompt, load_model, load_tokenizer
    from skyrl_engine.sampler import sample

    result = export_model(run_dir, tmp_path / "model")  # the latest checkpoint
    dest = tmp_path / "model"
    assert result.step == STEPS and result.path == str(dest) and result.run_id == "unit"
    assert set(result.files) == {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                                 "chat_template.jinja", "generation_config.json", "README.md", "skyrl_export.json"}
    assert not ARTIFACTS & {p.name for p in dest.iterdir()} and not list(tmp_path.glob(".model.tmp-*"))
    assert "\n" not in str(result) and str(result).startswith(f"exported step {STEPS} of run 'unit' to {dest}")
    assert "ExportResult(" in repr(result) and "<table>" in result._repr_html_()
    meta = json.loads((dest / "skyrl_export.json").read_text())
    assert (meta["step"], meta["run_id"], meta["base_model"]) == (STEPS, "unit", tiny_model_dir)
    assert meta["tokenizer_from"] == "checkpoint"  # the policy saves its tokenizer with each checkpoint
    # transformers 5 maps model_type qwen2 to Qwen2Tokenizer, which drops the char tokenizer's spaces: said once
    assert any("PreTrainedTokenizerFast" in w for w in result.warnings)
    tokenizer = load_tokenizer(tiny_model_dir)
    gen = json.loads((dest / "generation_config.json").read_text())
    assert (gen["eos_token_id"], gen["pad_token_id"]) == (tokenizer.eos_token_id, tokenizer.pad_token_id)

    prompts = distinct_prompts("builtin://arithmetic/test", 5)
    weights = _policy(run_dir, STEPS) / "model.safetensors"
    done = subprocess.run([sys.executable, "-c", RELOAD, json.dumps([str(dest), str(weights), prompts])],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["leaked"] == [] and got["weights_equal"]
    assert got["rendered"] == [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False)
                               for p in prompts]
    assert got["rendered"][0].startswith("<|user|>") and got["rendered"][0].endswith("<|assistant|>")
    assert got["spaces"] == tokenizer.encode("12 + 30", add_special_tokens=False)

    model = load_model(str(_policy(run_dir, STEPS)))  # the engine's sampler on the checkpoint's weights
    batch = sample(model, [encode_prompt(tokenizer, p) for p in prompts],
                   SamplingParams(temperature=0.0, max_generate_length=12),
                   eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, generator=torch.Generator())
    want = [batch.response_ids_BT[b, :n].tolist() for b, n in enumerate(batch.response_lengths_B.tolist())]
    assert got["generated"] == want


def test_cli_job_and_magic_export(run_dir, tmp_path, capsys, monkeypatch):
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell
    from safetensors.torch import load_file

    from skyrl_engine.__main__ import main
    from skyrl_nb.jobs import Job

    assert main(["export", str(run_dir), str(tmp_path / "cli"), "--step", "1"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"exported step 1 of run 'unit' to {tmp_path / 'cli'}")
    step1 = load_file(tmp_path / "cli" / "model.safetensors")
    assert all(step1[k].equal(v) for k, v in load_file(_policy(run_dir, 1) / "model.safetensors").items())
    assert any(not step1[k].equal(v) for k, v in load_file(_policy(run_dir, 2) / "model.safetensors").items())
    assert main(["export", str(run_dir), str(tmp_path / "cli")]) == 2  # not empty now
    assert main(["export", str(run_dir), str(tmp_path / "other"), "--step", "9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and f"dest: {tmp_path / 'cli'} already exists and is not empty" in err[0]
    assert err[1].startswith("step: 9 has no checkpoint in") and err[1].endswith("steps there: 1, 2")

    job = Job(None, submission_id="unit", run_id="unit", run_dir=str(run_dir))
    assert job.export(tmp_path / "job", step=1).step == 1

    monkeypatch.setenv("SKYRL_NB_CACHE_DIR", str(tmp_path / "nb-cache"))  # no local Ray head to ask
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "skyrl_nb")
    shell.run_line_magic("config", f"SkyrlMagics.run_root = {str(run_dir.parent)!r}")
    result = shell.run_line_magic("skyrl", f"export unit {tmp_path / 'magic'} --step 2")
    assert result.step == 2 and (tmp_path / "magic" / "model.safetensors").exists()
    for line, expected in ((f"export unit {tmp_path / 'magic'}", "already exists and is not empty"),
                           (f"export unit {tmp_path / 'm2'} --step 5", "step: 5 has no checkpoint"),
                           ("export unit", "needs a run id and a path"),
                           ("status unit --step 1", "--step takes a checkpoint step >= 0 and only goes with export"),
                           (f"export nope {tmp_path / 'm3'}", "no run 'nope'")):
        with pytest.raises(UsageError) as info:
            shell.run_line_magic("skyrl", line)
        assert expected in str(info.value) and "\n" not in str(info.value), line


def test_a_checkpoint_with_its_own_tokenizer_and_a_lora_adapter(run_dir, tmp_path, tiny_model_dir):
    """A checkpoint with its tokenizer, generation config and PEFT adapter (in policy/adapter/) saved with it;
    the base model is then not needed (its path here no longer exists)."""
    step_dir = tmp_path / "ckpts" / "global_step_7"
    shutil.copytree(_policy(run_dir, 1), step_dir / "policy")
    state = json.loads((run_dir / "checkpoints" / "global_step_1" / "trainer_state.json").read_text())
    state["config"]["trainer"]["policy"]["model"]["path"] = str(tmp_path / "gone")
    (step_dir / "trainer_state.json").write_text(json.dumps(state))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copyfile(Path(tiny_model_dir) / name, step_dir / "policy" / name)
    (step_dir / "policy" / "generation_config.json").write_text(json.dumps({"eos_token_id": [5, 1], "pad_token_id": 9,
                                                                           "_from_model_config": True}))
    (step_dir / "policy" / "adapter").mkdir()
    (step_dir / "policy" / "adapter" / "adapter_model.safetensors").write_bytes(b"adapter weights")
    (step_dir / "policy" / "adapter" / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 4}')

    result = export_model(step_dir / "policy", tmp_path / "out")
    out = tmp_path / "out"
    assert result.step == 7 and result.adapter and result.base_model == str(tmp_path / "gone")
    assert (out / "adapter" / "adapter_model.safetensors").read_bytes() == b"adapter weights"
    assert {"adapter/adapter_model.safetensors", "adapter/adapter_config.json"} <= set(result.files)
    assert not ARTIFACTS & {p.name for p in out.iterdir()} and "adapter_config.json" not in {p.name for p in out.iterdir()}
    assert json.loads((out / "skyrl_export.json").read_text())["tokenizer_from"] == "checkpoint"
    # the tokenizer's EOS first, the other stop id kept; pad is the tokenizer's
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen.pop("transformers_version") and gen == {"eos_token_id": [1, 5], "pad_token_id": 0}
    with pytest.raises(ExportError, match=r"^step: 3 does not match the source .*, which is step 7"):
        export_model(step_dir, tmp_path / "out2", step=3)
    # the same checkpoint without its tokenizer: the base model is needed, and gone
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (step_dir / "policy" / name).unlink()
    with pytest.raises(ExportError, match=r"^trainer.policy.model.path: .*gone.* has no tokenizer files"):
        export_model(step_dir, tmp_path / "out3")
    assert not (tmp_path / "out3").exists() and not list(tmp_path.glob(".out3.tmp-*"))


def test_the_builtin_tiny_model_is_resolved_with_the_runs_train_rows(monkeypatch):
    from skyrl_engine import export, models

    seen = {}

    def fake_resolve(path, rows, seed):
        seen.update(path=path, rows=len(rows), seed=seed)
        return "/built/tiny"

    monkeypatch.setattr(export, "resolve_model_path", fake_resolve)
    cfg = {"trainer": {"policy": {"model": {"path": models.TINY_MODEL}}, "seed": 42},
           "data": {"train_data": ["builtin://arithmetic/train"]}, "environment": {"env_class": "arithmetic"}}
    assert export._base_model_dir(cfg, "/ckpt/policy") == "/built/tiny"
    assert seen["path"] == models.TINY_MODEL and seen["seed"] == 42 and seen["rows"] > 100


def test_bad_sources_and_destinations_are_one_line_errors(run_dir, tmp_path):
    (tmp_path / "fresh").mkdir()
    (tmp_path / "fresh" / "config.yaml").write_text("trainer: {seed: 1}\n")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    cases = [
        ((tmp_path / "fresh", tmp_path / "a"), {}, f"source: no checkpoint in {tmp_path / 'fresh' / 'checkpoints'}"),
        ((tmp_path / "nowhere", tmp_path / "a"), {}, "is not a directory; give a run directory"),
        ((tmp_path / "full", tmp_path / "a"), {}, "holds no checkpoint; give a run directory"),
        ((run_dir, tmp_path / "a"), {"step": 9}, "steps there: 1, 2"),
        ((run_dir, tmp_path / "a"), {"step": -1}, "step: -1 is not a checkpoint step"),
        ((run_dir, tmp_path / "full"), {}, f"dest: {tmp_path / 'full'} already exists and is not empty"),
        ((run_dir, "s3://Bad_Bucket/m"), {}, "dest: 's3://Bad_Bucket/m' does not name an S3 bucket"),
        ((run_dir, "s3://models"), {}, "has no prefix; give s3://models/<prefix>"),
        ((run_dir, "gs://models/m"), {}, "only a local directory or s3://bucket/prefix"),
    ]
    for args, kwargs, expected in cases:
        with pytest.raises(ExportError) as info:
            export_model(*args, **kwargs)
        assert expected in str(info.value) and "\n" not in str(info.value), (args, str(info.value))
    assert not (tmp_path / "a").exists() and [p.name for p in (tmp_path / "full").iterdir()] == ["x"]


def test_s3_upload_lands_every_file_and_loads_back(run_dir, tmp_path, monkeypatch):
    import boto3
    from moto import mock_aws
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    secret = "fake-secret-key-for-moto-0123456789"
    use_fake_credentials(monkeypatch, "FAKEEXPORTKEYMOTO", secret)
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="models")
        with pytest.raises(ExportError, match=r"^dest: s3://missing/m: bucket 'missing' does not exist$"):
            export_model(run_dir, "s3://missing/m")
        result = export_model(run_dir, "s3://models/runs/unit/")
        assert result.path == "s3://models/runs/unit" and secret not in str(result) + repr(result)
        keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="models")["Contents"])
        assert keys == sorted(f"runs/unit/{f}" for f in result.files)
        for key in keys:
            target = tmp_path / "down" / key.removeprefix("runs/unit/")
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file("models", key, str(target))
        with pytest.raises(ExportError, match=r"already holds objects; give a new prefix$"):
            export_model(run_dir, "s3://models/runs/unit")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "down")
    state = model.state_dict()
    assert all(state[k].equal(v) for k, v in load_file(_policy(run_dir, STEPS) / "model.safetensors").items())


def test_a_run_on_s3_exports_from_its_checkpoints_there(run_dir, tmp_path, s3):
    """A run whose store (and so its checkpoints) is on an object store: the policy's files come down, not the
    optimizer shards, and the export names where they came from."""
    import uuid

    from safetensors.torch import load_file

    from skyrl_core.runs import RunReader
    from skyrl_core.store import open_store

    url = f"s3://{s3.bucket}/runs-{uuid.uuid4().hex[:8]}/unit"
    open_store(url.rpartition("/")[0]).upload_folder(run_dir, "unit")
    result = RunReader(url).export(tmp_path / "from-s3")
    assert result.step == STEPS and result.run_id == "unit" and result.run_dir == url
    assert result.checkpoint == f"{url}/checkpoints/global_step_{STEPS}/policy"
    want = load_file(_policy(run_dir, STEPS) / "model.safetensors")
    got = load_file(tmp_path / "from-s3" / "model.safetensors")
    assert set(got) == set(want) and all(got[k].equal(want[k]) for k in want)
    from skyrl_engine.export import fetch_checkpoint

    fetched = fetch_checkpoint(url, None, str(tmp_path / "download"))
    down = {p.relative_to(tmp_path / "download").as_posix() for p in (tmp_path / "download").rglob("*") if p.is_file()}
    policy_files = {p.name for p in _policy(run_dir, STEPS).iterdir() if p.is_file()}
    assert fetched.step == STEPS and any(n.endswith(".pt") for n in policy_files)
    assert down == {f"global_step_{STEPS}/trainer_state.json"} | {
        f"global_step_{STEPS}/policy/{n}" for n in policy_files if not n.endswith(".pt")}  # no optimizer shards
    assert export_model(f"{url}/checkpoints/global_step_1", tmp_path / "one").step == 1
    with pytest.raises(ExportError, match=r"^step: 9 has no checkpoint in s3://.*; steps there: 1, 2$"):
        export_model(url, tmp_path / "nine", step=9)
    with pytest.raises(ExportError, match=r"^source: s3://.*/nothing holds no checkpoint"):
        export_model(f"{url}/nothing", tmp_path / "none")
