"""``run.engine: skyrl`` against SkyRL itself, each release the translation takes (0.3.0 on Python 3.11, 0.4.0 on
3.12), in its own environment (the parity tests' oracle envs). Every test runs once per release.

One driver process per release (skyrl_bridge_driver.py, SkyRL's python) does the SkyRL side; this file, in our venv,
builds the inputs and reads what came back:

- config: every preset and a set of algorithm overrides (estimators, every policy loss with its keys, DAPO's filters
  and overlong
  penalty, async, LoRA, KL, off-policy correction, placement, FSDP) translated by
  ``skyrl_core.skyrl_translate`` for that release, loaded by SkyRL's ``from_cli_overrides`` and checked by its
  ``validate_cfg`` (and the bridge's words adapted to the release, as the bridge does, load there too);
  every translated key read back from SkyRL's config object must hold the value skyrl-nb had (or, for the
  keys the translation says it changed, the value it says it sent); SkyRL's defaults must differ from
  skyrl-nb's exactly where ``DEFAULT_DIFFERENCES`` says, and every skyrl-nb key SkyRL lacks must be
  classified (not sent, refused unless default, or the bridge's own).
- a job's own data and reward functions: a notebook in SkyRL's own Python gathers them (functions shipped by value
  load only in the Python that pickled them, which the check of the cluster's Python before submission enforces):
  this process for 0.3.0, the notebook side's Python 3.12 env (scripts/py312_env.sh) for 0.4.0. A DataFrame and
  reward functions written as in a notebook cell, shipped
  by ``JobInputs`` into the run folder and translated, go through the bridge's own config path in SkyRL's env
  (its inputs written as Parquet in SkyRL's layout, ``from_cli_overrides``, ``validate_cfg``); SkyRL's
  ``PromptDataset`` reads that Parquet and the generated environment (``skyrl_nb_reward``) scores responses there
  as SkyRL's generator makes and steps it, with the weighted functions' sum, their errors and their series.
- run store: the bridge's tracker and trajectory writer, driven by SkyRL's own trainer methods over SkyRL
  ``GeneratorOutput`` objects for two steps, must give a run store whose every metric, event, status field
  and trajectory field reads back through ``RunReader``, the dashboard's series and the inspector's data.

The oracle envs are built by ``scripts/skyrl_oracle_env.sh [0.4.0]`` (``make test`` starts them in the background;
``tests/conftest.py`` runs this file late, after them); the fixture waits for each as the parity tests do. Time here
with the envs built: 152 s for both (85 s 0.3.0 with the tiny model's build, 66 s 0.4.0) while three other agents
loaded the 2 cores.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
pytestmark = pytest.mark.slow
ABSENT = "<absent>"
VERSIONS = ("0.3.0", "0.4.0")  # the releases checked (skyrl_translate.SUPPORTED), oldest first
BASE = "quickstart"

# name -> (preset, overrides); every preset is added below
CASES: dict[str, tuple[str, list[str]]] = {
    **{f"estimator:{e}": (BASE, [f"trainer.algorithm.advantage_estimator={e}"])
       for e in ("grpo", "rloo", "reinforce++", "gae", "maxrl")},
    **{f"loss:{loss}": (BASE, [f"trainer.algorithm.policy_loss_type={loss}"])
       for loss in ("regular", "dual_clip", "gspo", "rollout_is", "cross_entropy", "importance_sampling")},
    "loss:sapo": (BASE, ["trainer.algorithm.policy_loss_type=sapo", "trainer.algorithm.sapo.tau_pos=1.5",
                         "trainer.algorithm.sapo.tau_neg=2.0", "trainer.algorithm.loss_reduction=sequence_mean"]),
    "loss:dppo": (BASE, ["trainer.algorithm.policy_loss_type=dppo", "trainer.algorithm.dppo.dppo_type=binary_kl",
                         "trainer.algorithm.dppo.delta_low=0.05", "trainer.algorithm.dppo.delta_high=0.1"]),
    "loss:clip_cov": (BASE, ["trainer.algorithm.policy_loss_type=clip_cov", "trainer.algorithm.clip_cov.clip_ratio=0.001",
                             "trainer.algorithm.clip_cov.clip_cov_lb=0.5", "trainer.algorithm.clip_cov.clip_cov_ub=4.0"]),
    "loss:kl_cov": (BASE, ["trainer.algorithm.policy_loss_type=kl_cov", "trainer.algorithm.kl_cov.kl_cov_frac=0.1",
                           "trainer.algorithm.kl_cov.ppo_kl_coef=0.5"]),
    "loss:cispo_rollout": (BASE, ["trainer.algorithm.policy_loss_type=cispo", "trainer.algorithm.cispo.cispo_anchor=rollout"]),
    "loss:cispo": (BASE, ["trainer.algorithm.policy_loss_type=cispo", "trainer.algorithm.cispo.cispo_eps_clip_low=0.1",
                          "trainer.algorithm.cispo.cispo_eps_clip_high=0.15"]),
    "reduction:sequence_mean": (BASE, ["trainer.algorithm.loss_reduction=sequence_mean"]),
    "reduction:seq_mean_token_sum_norm": (BASE, ["trainer.algorithm.loss_reduction=seq_mean_token_sum_norm",
                                                 "trainer.algorithm.max_seq_len=64"]),
    "gae:critic_path_given": (BASE, ["trainer.algorithm.advantage_estimator=gae", "trainer.algorithm.value_clip=0.3",
                                     "trainer.algorithm.gamma=0.99", "trainer.algorithm.lambd=0.95"]),
    "dapo:replace": ("dapo", ["trainer.algorithm.dynamic_sampling.type=replace",
                              "trainer.algorithm.dynamic_sampling.min_replace_ratio=0.5"]),
    "dapo:overlong_filtering_only": (BASE, ["generator.apply_overlong_filtering=true"]),
    "dapo:rloo_filter": (BASE, ["trainer.algorithm.advantage_estimator=rloo",
                                "trainer.algorithm.dynamic_sampling.type=filter",
                                "trainer.algorithm.dynamic_sampling.max_sample_batches=3"]),
    "async:fully_async": (BASE, ["trainer.fully_async.enabled=true", "trainer.fully_async.max_staleness_steps=2",
                                 "trainer.placement.colocate_all=false"]),
    "async:one_step": (BASE, ["trainer.async_one_step=true", "trainer.placement.colocate_all=false"]),
    "lora": (BASE, ["trainer.policy.model.lora.rank=8", "trainer.policy.model.lora.alpha=32",
                    "trainer.policy.model.lora.dropout=0.05", "trainer.policy.model.lora.target_modules=[q_proj,v_proj]",
                    "trainer.policy.model.lora.exclude_modules=lm_head", "trainer.policy.model.lora.init_method=gaussian"]),
    "kl:loss": (BASE, ["trainer.algorithm.use_kl_loss=true", "trainer.algorithm.kl_loss_coef=0.01",
                       "trainer.algorithm.kl_estimator_type=k1"]),
    "kl:in_reward": (BASE, ["trainer.algorithm.use_kl_in_reward=true", "trainer.algorithm.kl_ctrl.type=adaptive",
                            "trainer.algorithm.kl_ctrl.kl_target=0.2", "trainer.algorithm.kl_ctrl.horizon=500"]),
    "entropy": (BASE, ["trainer.algorithm.use_entropy_loss=true", "trainer.algorithm.entropy_loss_coef=0.02"]),
    "off_policy": (BASE, ["trainer.algorithm.off_policy_correction.tis_ratio_type=token",
                          "trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high=3.0",
                          "trainer.algorithm.off_policy_correction.sequence_mask_metric=geometric",
                          "trainer.algorithm.off_policy_correction.outlier_token_is_threshold_low=0.0001"]),
    "placement:disaggregated": (BASE, ["trainer.placement.colocate_all=false", "trainer.placement.policy_num_gpus_per_node=2",
                                       "generator.inference_engine.num_engines=2",
                                       "generator.inference_engine.tensor_parallel_size=2",
                                       "generator.inference_engine.gpu_memory_utilization=0.6",
                                       "trainer.micro_train_batch_size_per_gpu=32"]),
    "placement:micro_batch_per_gpu": (BASE, ["trainer.placement.colocate_all=false",
                                             "trainer.placement.policy_num_gpus_per_node=2"]),
    "placement:colocated_mismatch": (BASE, ["trainer.placement.policy_num_gpus_per_node=2",
                                            "trainer.micro_train_batch_size_per_gpu=64"]),
    "fsdp:two_ranks": (BASE, ["trainer.placement.policy_num_gpus_per_node=2", "generator.inference_engine.num_engines=2",
                              "trainer.micro_train_batch_size_per_gpu=16",
                              "trainer.policy.fsdp_config.cpu_offload=true",
                              "trainer.policy.fsdp_config.reshard_after_forward=false",
                              "trainer.policy.fsdp_config.mixed_precision.param_dtype=bf16"]),
    "optimizer_and_sampling": (BASE, ["trainer.policy.optimizer_config.scheduler=cosine",
                                      "trainer.policy.optimizer_config.num_warmup_steps=5",
                                      "trainer.policy.optimizer_config.adam_betas=[0.9,0.95]",
                                      "generator.sampling_params.top_p=0.9", "generator.sampling_params.top_k=20",
                                      "generator.sampling_params.min_p=0.05", "generator.eval_n_samples_per_prompt=4",
                                      "trainer.resume_mode=latest", "trainer.update_epochs_per_batch=2",
                                      "trainer.max_ckpts_to_keep=3", "trainer.epochs=3"]),
    "data_files": (BASE, ["data.train_data=[/data/a.parquet,/data/b.jsonl]", "data.val_data=[]",
                          "trainer.eval_interval=-1"]),
    "shipped_environment": (BASE, ["environment.shipped={cell_env: 'inputs://env-cell_env-0123456789abcdef.pkl'}",
                                   "environment.env_class=cell_env"]),
}
REFUSED = {  # translation refusals: name -> (the line's start, whether SkyRL's validate_cfg refuses it too)
    # SkyRL's config accepts fully_async with any loss; its fully async trainer refuses regular & co. at start
    "async:fully_async": ("trainer.fully_async.enabled: true is not allowed with run.engine=skyrl", False),
    "async:one_step": ("trainer.async_one_step: true is not allowed with run.engine=skyrl", False),
    "placement:micro_batch_per_gpu": ("trainer.micro_train_batch_size_per_gpu: 128 does not divide one GPU's share", True),
    "placement:colocated_mismatch": ("trainer.placement.colocate_all: true is not allowed with run.engine=skyrl", True),
}
RELEASE_REFUSED = {  # refusals for one release only: release -> name -> (the line's start, SkyRL refuses it too)
    # not sent to 0.3, which has no such key: our line before submission (the plan knows the cluster's release)
    "0.3.0": {"loss:cispo_rollout": ("trainer.algorithm.cispo.cispo_anchor: rollout is not allowed with run.engine=skyrl "
                                     "on SkyRL 0.3.0", False)},
}
STORE_OVERRIDES = ["trainer.train_batch_size=2", "trainer.policy_mini_batch_size=2", "trainer.critic_mini_batch_size=2",
                   "generator.n_samples_per_prompt=3", "trainer.micro_train_batch_size_per_gpu=3",
                   "generator.max_turns=2", "trainer.algorithm.overlong_buffer.len=2", "trainer.ckpt_interval=2"]
STEPS = 2


def _refused(version: str) -> dict[str, tuple[str, bool]]:
    return REFUSED | RELEASE_REFUSED.get(version, {})


def _translations(root: Path, version: str) -> dict[str, Any]:
    from skyrl_core.config import PRESETS, check_config
    from skyrl_core.skyrl_translate import translate

    cases = {f"preset:{name}": (name, []) for name in PRESETS} | CASES
    out = {}
    for i, (name, (preset, overrides)) in enumerate(cases.items()):
        cfg = check_config(preset, [f"run.run_id=case{i}", f"run.run_root={root}", *overrides],
                           check_files=name != "data_files")  # those files exist on the cluster, not here
        out[name] = (cfg, translate(cfg, version))
    return out


QUESTIONS = [("2+2?", "4", 1), ("3+4?", "7", 2), ("10-3?", "7", 3)]
RESPONSES = ["The answer is 4.", "It is 7", "The answer is 7?"]


def _cell_rewards() -> list[Any]:
    """Reward functions as a notebook cell defines them: per sample, TRL's batched shape closing over a local, and
    one that raises on some samples."""
    bonus = 0.5  # a local of the cell

    def exact(prompt, completion, ground_truth, **_):
        return float(completion.rstrip(".?").split()[-1] == str(ground_truth))

    def format_bonus(prompts, completions, question, **_):
        if prompts != question:  # a text prompt reaches the functions as the text the row gave
            raise AssertionError(f"prompts {prompts!r} are not the question column {question!r}")
        return [bonus if c.startswith("The answer is") else 0.0 for c in completions]

    def by_level(prompt, completion, level, **_):
        if completion.endswith("?"):
            raise ValueError("a question is no answer")
        return level / 3

    return [exact, (format_bonus, 0.2), (by_level, 0.5)]


def _expected_reward(question: str, answer: str, level: int, response: str) -> tuple[float, dict, str | None]:
    """The weighted reward of one sample computed here by calling the cell's functions themselves."""
    scores, errors = {}, []
    for item in _cell_rewards():
        fn, weight = item if isinstance(item, tuple) else (item, 1.0)
        columns = {"question": question, "answer": answer, "level": level, "ground_truth": answer}
        try:
            got = (fn([question], [response], **{k: [v] for k, v in columns.items()})[0]
                   if fn.__name__ == "format_bonus" else fn(question, response, **columns))
        except ValueError as err:  # skipped: scores 0, the error's line kept with the sample
            got = 0.0
            errors.append(f"{fn.__name__}: ValueError: {err}")
        scores[fn.__name__] = (got, weight)
    return (sum(v * w for v, w in scores.values()), {k: v for k, (v, _) in scores.items()},
            "; ".join(errors) or None)


def _cell_job(root: Path, model_dir: str) -> tuple[Any, Any]:
    """A DataFrame (its own column names) and the cell's reward functions through what ``launch`` does: gathered
    and tried (``JobInputs``), the config with its overrides, the run folder staged, the translation."""
    import pandas as pd

    from skyrl_core.config import check_config
    from skyrl_core.skyrl_translate import translate
    from skyrl_core.user_inputs import JobInputs

    df = pd.DataFrame(QUESTIONS, columns=["question", "answer", "level"])
    inputs = JobInputs.gather(data=df, val_data=df.iloc[:1], columns={"prompt": "question", "ground_truth": "answer"},
                              reward=_cell_rewards())
    cfg = check_config(BASE, ["run.run_id=inputs", f"run.run_root={root}", "run.engine=skyrl",
                              f"trainer.policy.model.path={model_dir}", *inputs.overrides()])
    inputs.try_rewards(cfg)
    inputs.stage(str(cfg.run_dir))
    return cfg, translate(cfg).check()


@pytest.fixture(scope="module", params=VERSIONS)
def skyrl_side(request: pytest.FixtureRequest, tiny_model_dir: str,
               tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Translations (ours) for one SkyRL release and what SkyRL's environment made of them, from one driver process
    (the release's oracle env, shared with the parity tests; built or waited for here)."""
    from algorithms.parity_cases import build_oracle

    from skyrl_core.config import check_config, load_config
    from skyrl_core.skyrl_translate import translate

    version = request.param
    try:
        oracle_python = build_oracle(version)
    except RuntimeError as e:
        pytest.fail(str(e))
    root = tmp_path_factory.mktemp("skyrl-runs")
    work = tmp_path_factory.mktemp("skyrl-driver")
    translations = _translations(root, version)
    store_cfg = check_config(BASE, ["run.run_id=store", f"run.run_root={root}", *STORE_OVERRIDES])
    store = translate(store_cfg).check()  # the words launch sends, for the newest release: the driver adapts them
    spec = {"cases": {name: t.args() for name, (_, t) in translations.items()},
            "bridge_cases": {name: translate(cfg).args() for name, (cfg, _) in translations.items()},
            "nb_keys": list(load_config(None).to_dotted()),
            "store": {"run_dir": store.run_dir, "args": store.args(), "steps": STEPS}}
    # functions shipped by value load only in the Python that pickled them: a notebook in SkyRL's Python ships them
    there = _python_of(oracle_python)
    cell_cfg, cell = (_cell_job(root, tiny_model_dir) if there == sys.version_info[:2]
                      else _cell_job_in(_notebook_python(there), root, tiny_model_dir, work))
    spec["inputs"] = {"argv": cell.command()[3:], "cache": str(work / "cache"), "responses": RESPONSES}
    (work / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'backend'}", "OMP_NUM_THREADS": "1",
           "RAY_AUTH_MODE": "disabled", "HF_DATASETS_CACHE": str(work / "hf-datasets")}
    done = subprocess.run([oracle_python, str(HERE / "skyrl_bridge_driver.py"), str(work / "spec.json"),
                           str(work / "result.json")], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, f"SkyRL driver failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    result = json.loads((work / "result.json").read_text())
    print(f"SkyRL {version} side: config cases {result['config_s']:.1f} s, a job's own inputs "
          f"{result.get('inputs', {}).get('total_s', 0):.1f} s, whole driver {result['total_s']:.1f} s", file=sys.stderr)
    return {"version": version, "translations": translations, "result": result, "store_dir": Path(store.run_dir),
            "store_cfg": store_cfg, "cell": (cell_cfg, cell)}


def _python_of(python: str) -> tuple[int, int]:
    done = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True,
                          check=True)
    major, minor = done.stdout.split()
    return int(major), int(minor)


def _notebook_python(version: tuple[int, int]) -> str:
    """A notebook-side env in Python ``version`` (3.12: scripts/py312_env.sh's, which ``make test`` builds)."""
    if version != (3, 12):
        pytest.fail(f"no notebook-side env for Python {version}")
    done = subprocess.run(["bash", str(REPO / "scripts" / "py312_env.sh")], capture_output=True, text=True)
    if done.returncode:
        pytest.fail(f"scripts/py312_env.sh failed: {done.stderr[-1500:]}")
    return done.stdout.strip().splitlines()[-1]


def _cell_job_in(python: str, root: Path, model_dir: str, work: Path) -> tuple[Any, Any]:
    """:func:`_cell_job` run by a notebook in another Python (``python``: the cell's functions pickled there), its
    config read back here from the YAML it wrote."""
    from skyrl_core.config import load_config
    from skyrl_core.skyrl_translate import translate

    script = ("import sys, json; from pathlib import Path; import test_skyrl_oracle as t; "
              f"cfg, _ = t._cell_job(Path({str(root)!r}), {model_dir!r}); "
              f"Path({str(work / 'cell.yaml')!r}).write_text(cfg.to_yaml())")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE)])}
    done = subprocess.run([python, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    cfg = load_config(str(work / "cell.yaml"))
    return cfg, translate(cfg).check()


def _cell(skyrl_side: dict) -> tuple[Any, Any]:
    return skyrl_side["cell"]


# ------------------------------------------------------------------------------------------ config


def test_the_oracle_is_a_release_the_translation_takes(skyrl_side: dict) -> None:
    from skyrl_core.skyrl_translate import SKYRL_VERSION, SUPPORTED, release

    assert skyrl_side["result"]["skyrl_version"] == skyrl_side["version"]
    assert release(skyrl_side["version"]) in SUPPORTED and SKYRL_VERSION == VERSIONS[-1]
    for name, (_, t) in skyrl_side["translations"].items():
        assert t.version == skyrl_side["version"], name


def test_the_words_launch_sends_load_in_each_release_as_the_bridge_adapts_them(skyrl_side: dict) -> None:
    """``launch`` translates for the newest release; the bridge adapts the words to the one installed
    (``adapt_to_release``): every case SkyRL took as translated for its release, it takes so too."""
    got, refused = skyrl_side["result"]["bridge_cases"], _refused(skyrl_side["version"])
    assert set(got) == set(skyrl_side["translations"])
    for name, error in ((name, got[name]["error"]) for name in got):
        if name in RELEASE_REFUSED.get(skyrl_side["version"], {}):  # the bridge's one line, the translation's own
            assert error is not None and error.startswith(refused[name][0]), (name, error)
        elif name in refused and refused[name][1]:
            assert error is not None, name  # SkyRL refuses it too
        else:
            assert error is None, (name, error)


def test_every_preset_and_override_translates_into_a_config_skyrl_loads_and_validates(skyrl_side: dict) -> None:
    from skyrl_core.config import PRESETS

    translations, cases = skyrl_side["translations"], skyrl_side["result"]["cases"]
    refused = _refused(skyrl_side["version"])
    assert {f"preset:{p}" for p in PRESETS} <= set(cases)
    for name, (_, t) in translations.items():
        assert t.problems == [] or name in refused, (name, t.problems)
        if name in refused and refused[name][1]:  # our one line before submission, SkyRL's own refusal after
            assert cases[name]["error"] is not None, name
            continue
        assert cases[name]["error"] is None, (name, cases[name]["error"])
        # SkyRL's own class takes everything but the keys the bridge's subclass adds: the overlong penalty's, the
        # environment classes from a cell
        if any(k.startswith("trainer.algorithm.overlong_buffer.") for k in t.overrides):
            assert "Invalid fields {'overlong_buffer'}" in cases[name]["base_error"], name
        elif any(k.startswith("environment.shipped.") for k in t.overrides):
            assert "Invalid fields {'shipped'}" in cases[name]["base_error"], name
        else:
            assert cases[name]["base_error"] is None, (name, cases[name]["base_error"])
    assert "trainer.algorithm.overlong_buffer.len" in translations["preset:dapo"][1].overrides  # the check above bit
    assert "environment.shipped.cell_env" in translations["shipped_environment"][1].overrides


def test_every_translated_key_reads_back_from_skyrls_config_with_skyrl_nbs_value(skyrl_side: dict) -> None:
    checked = 0
    refused = _refused(skyrl_side["version"])
    for name, (cfg, t) in skyrl_side["translations"].items():
        if name in refused and refused[name][1]:
            continue  # SkyRL refused it too: nothing to read back
        readback = skyrl_side["result"]["cases"][name]["readback"]
        changed = {c.key: c for c in t.changed}
        flat = cfg.to_dotted()  # a mapping's keys too (environment.shipped.<name>)
        for key, sent in t.overrides.items():
            if key in changed:
                assert changed[key].sent == sent
                if not changed[key].only_skyrl:
                    assert changed[key].ours == flat[key]
            else:  # passed through: the very value skyrl-nb holds
                assert sent == flat[key], (name, key)
            assert readback[key] == sent, f"{name}: {key} reads back {readback[key]!r} from SkyRL, sent {sent!r}"
            checked += 1
    assert checked > 25 * 120  # every key of every case that SkyRL accepted


def test_the_changes_are_the_stated_ones(skyrl_side: dict) -> None:
    cfg, t = skyrl_side["translations"]["preset:quickstart"]
    changed = {c.key: (c.ours, c.sent) for c in t.changed}
    assert changed["trainer.strategy"] == ("fsdp2", "fsdp")
    assert changed["generator.inference_engine.backend"] == ("torch", "vllm")
    assert changed["trainer.ckpt_path"] == (None, f"{cfg.run_dir}/checkpoints")
    assert "trainer.logger" not in changed and t.overrides["trainer.logger"] == "console"  # the same key and names
    from skyrl_core.skyrl_translate import LACKING, release

    assert {"trainer.num_threads", "trainer.share_prompt_prefix", "run.run_root", "run.run_id", "run.store_token_data",
            "run.engine"} <= set(t.not_sent)
    lacking = set(LACKING.get(release(skyrl_side["version"]), {}))
    assert all(k.startswith(("run.", "reward.", "trainer.alerts.")) or k in lacking
               or k in ("trainer.num_threads", "trainer.share_prompt_prefix", "trainer.lora_base_precision", "data.columns",
                        "environment.shipped")
               for k in t.not_sent)
    assert lacking <= set(t.not_sent)  # 0.3: cispo_anchor at 'old' is not sent
    gae_cfg, gae = skyrl_side["translations"]["estimator:gae"]
    assert {c.key: c.sent for c in gae.changed}["trainer.critic.model.path"] == gae_cfg.trainer.policy.model.path


def test_refusals_are_one_line_each_and_block_validation(skyrl_side: dict) -> None:
    from skyrl_core.config import ConfigError, check_config

    for name, (start, _) in _refused(skyrl_side["version"]).items():
        cfg, t = skyrl_side["translations"][name]
        (line,) = t.problems
        assert line.startswith(start) and "\n" not in line and "allowed:" in line, line
        with pytest.raises(ConfigError):
            t.command()
        if name in RELEASE_REFUSED.get(skyrl_side["version"], {}):
            check_config(cfg, ["run.engine=skyrl"])  # fine for the newest release: the plan refuses it on this one
            continue
        with pytest.raises(ConfigError) as info:  # with run.engine=skyrl the one validation refuses it
            check_config(cfg, ["run.engine=skyrl"])
        assert line in info.value.problems


def test_skyrls_defaults_differ_from_skyrl_nbs_exactly_where_stated(skyrl_side: dict) -> None:
    from skyrl_core.config import load_config
    from skyrl_core.skyrl_translate import default_differences

    ours = load_config(None).to_dotted()
    theirs = skyrl_side["result"]["defaults"]

    def expand(v: Any) -> Any:  # SkyRL's path defaults are ~-expanded when its config is built
        if isinstance(v, list):
            return [expand(x) for x in v]
        return os.path.expanduser(v) if isinstance(v, str) else v

    stated = {d.key: d for d in default_differences(skyrl_side["version"])}
    differ = {k for k, v in ours.items() if theirs[k] != ABSENT and theirs[k] != v}
    assert differ == set(stated), f"not stated: {differ - set(stated)}; stated but equal: {set(stated) - differ}"
    for key, d in stated.items():
        assert d.skyrl_nb == ours[key] and expand(d.skyrl) == theirs[key], key


def test_every_key_skyrl_lacks_is_classified(skyrl_side: dict) -> None:
    from skyrl_core import skyrl_translate as st

    lacking = {k for k, v in skyrl_side["result"]["defaults"].items() if v == ABSENT}
    classified = set(st._NOT_SENT) | set(st._REFUSED_UNLESS_DEFAULT) | set(st.OVERLONG_KEYS)
    classified |= set(st.LACKING.get(st.release(skyrl_side["version"]), {}))
    classified |= {k for k in lacking if k.startswith(st.SKYRL_NB_SECTIONS)}
    assert lacking <= classified, f"skyrl-nb keys SkyRL lacks with no rule in skyrl_translate: {lacking - classified}"
    assert "trainer.async_one_step" in lacking and "trainer.num_threads" in lacking


# ------------------------------------------------------------------------------------------ a job's own inputs


def test_a_dataframe_and_cell_rewards_translate_and_pass_skyrls_validate_cfg(skyrl_side: dict) -> None:
    from skyrl_core.skyrl_translate import REWARD_ENV, REWARD_ENV_KEY

    cfg, t = _cell(skyrl_side)
    got = skyrl_side["result"]["inputs"]
    assert got["error"] is None, got["error"]  # resolved, loaded by from_cli_overrides, validate_cfg passed
    changed = {c.key: c for c in t.changed}
    assert changed["environment.env_class"].sent == REWARD_ENV == got["env_class"] and got["registered"]
    sent = {k[len(REWARD_ENV_KEY) + 1:]: v for k, v in t.overrides.items() if k.startswith(REWARD_ENV_KEY)}
    assert got["env_config"] == sent == {
        "functions": [{"name": f.name, "file": f.file, "weight": f.weight} for f in cfg.reward.functions],
        "timeout_s": cfg.reward.timeout_s, "errors": "skip", "max_workers": cfg.reward.max_workers,
        "run_dir": str(cfg.run_dir)}
    assert [f["weight"] for f in sent["functions"]] == [1.0, 0.2, 0.5]
    assert all(f["file"].startswith("inputs://reward-") for f in sent["functions"])
    assert {"data.columns.prompt", "data.columns.ground_truth", "reward.functions"} <= set(t.not_sent)
    assert not any(k.startswith(("data.columns", "reward.")) for k in t.overrides)
    assert json.loads(t.command()[t.command().index("--columns") + 1]) == {"prompt": "question",
                                                                            "ground_truth": "answer"}
    # the shipped inputs:// files became local Parquet files SkyRL read with its own PromptDataset, every row
    resolved = got["resolved"]
    assert [Path(p).name.split("-")[0] for p in resolved["data.train_data"] + resolved["data.val_data"]] == [
        "train", "val"]
    assert cfg.data.train_data[0].startswith("inputs://train-") and got["rows"] == len(QUESTIONS)


def test_the_generated_environment_scores_responses_in_skyrls_process(skyrl_side: dict) -> None:
    _cell(skyrl_side)
    got = skyrl_side["result"]["inputs"]
    samples = got["samples"]
    assert len(samples) == len(QUESTIONS) * len(RESPONSES)
    errors = 0
    for sample in samples:
        question, answer, level = QUESTIONS[sample["row"]]
        assert sample["messages"] == [{"role": "user", "content": question}]
        reward, scores, error = _expected_reward(question, answer, level, sample["response"])
        assert sample["reward"] == pytest.approx(reward) and sample["done"] is True, sample
        assert sample["metadata"]["scores"] == pytest.approx(scores)
        assert sample["metadata"]["reward_error"] == error, sample
        errors += error is not None
    assert errors == len(QUESTIONS)  # by_level raised on every "?" answer, and only there
    assert any(s["reward"] > 1 for s in samples) and any(s["reward"] < 0.5 for s in samples)
    # SkyRL's rollout metrics name the functions' series after the environment; the tracker adds skyrl-nb's names
    metrics, aliases = got["metrics"], got["aliases"]
    for name in ("exact", "format_bonus", "by_level"):
        mean = statistics.mean(s["metadata"]["scores"][name] for s in samples)
        assert metrics[f"environment/reward/{name}"] == pytest.approx(mean) == aliases[f"reward/{name}"]
    assert metrics["environment/reward/errors"] == errors == aliases["reward/errors"]


# ------------------------------------------------------------------------------------------ run store


def _steps(skyrl_side: dict) -> list[dict]:
    store = skyrl_side["result"]["store"]
    return [{"output": store["generator_outputs"][i], "advantages": store["advantages"][i],
             "payload": store["payloads"][i]} for i in range(STEPS)]


def _decode(store: dict, ids: list[int], skip: bool) -> str:
    return "".join(store["vocab"][i] for i in ids if not (skip and i in store["special"]))


def _penalised(reward: float, length: int, max_len: int, buffer: int, factor: float) -> float:
    start = max_len - buffer
    return reward - (length - start) / buffer * factor if start < length <= max_len else reward


def _expected_rows(skyrl_side: dict, step: int) -> list[dict]:
    """Every trajectory field, from SkyRL's generator output and advantages (the reward and advantage also
    recomputed here: DAPO's soft penalty, then GRPO over each prompt's samples)."""
    store = skyrl_side["result"]["store"]
    s = _steps(skyrl_side)[step - 1]
    out, adv = s["output"], s["advantages"]
    ob, max_len = store["overlong_buffer"], store["max_generate_length"]
    rewards = [_penalised(r, len(ids), max_len, ob["len"], ob["penalty_factor"])
               for r, ids in zip(out["rewards"], out["response_ids"], strict=True)]
    assert rewards == pytest.approx(out["rewards_after_generate"])
    assert rewards != out["rewards"]  # the penalty bit
    groups: dict[str, list[float]] = {}
    for (instance, _), r in zip(out["trajectory_ids"], rewards, strict=True):
        groups.setdefault(instance, []).append(r)
    rows = []
    for b, ids in enumerate(out["response_ids"]):
        instance, rep = out["trajectory_ids"][b]
        g = groups[instance]
        grpo = (rewards[b] - statistics.mean(g)) / (statistics.stdev(g) + 1e-6)
        width = len(adv[b])
        token_adv = adv[b][width - len(ids):]
        assert token_adv == pytest.approx([grpo] * len(ids), abs=1e-5)  # right-aligned, as SkyRL lays it out
        assert all(v == 0 for v in adv[b][:width - len(ids)])
        mask = out["loss_masks"][b]
        turns, start = [], 0
        for i in range(1, len(mask) + 1):
            if i == len(mask) or mask[i] != mask[start]:
                turns.append({"role": "assistant" if mask[start] else "user",
                              "content": _decode(store, ids[start:i], True), "token_start": start, "token_end": i})
                start = i
        rows.append({
            "step": step, "uid": f"{step}-{instance}-{rep}", "group": int(instance),
            "prompt": _decode(store, out["prompt_token_ids"][b], False), "response": _decode(store, ids, True),
            "reward": rewards[b], "advantage": token_adv[0], "num_tokens": len(ids),
            "finish_reason": out["stop_reasons"][b], "env_class": "arithmetic",
            "data_source": f"source{int(instance) % 2}", "discarded_reason": None, "token_ids": ids,
            "token_logprobs": out["rollout_logprobs"][b], "token_advantages": token_adv,
            "turns": turns, "num_turns": sum(1 for t in turns if t["role"] == "assistant"),
        })
    assert any(r["num_turns"] == 2 for r in rows) and any(r["finish_reason"] == "length" for r in rows)
    return rows


def _same(a: Any, b: Any) -> bool:
    if hasattr(a, "tolist"):
        a = a.tolist()
    if isinstance(b, float) or isinstance(a, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)
    if isinstance(b, list):
        return isinstance(a, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_metrics_events_and_status_read_back_through_run_reader(skyrl_side: dict) -> None:
    from skyrl_core.runs import RunReader

    store, reader = skyrl_side["result"]["store"], RunReader(skyrl_side["store_dir"])
    rows = reader.metrics()
    assert [r["step"] for r in rows] == [1, 2] and reader.warnings == []
    for row, step in zip(rows, _steps(skyrl_side), strict=True):
        payload = step["payload"]
        expected = {**payload, "trainer/tokens_per_second": payload["trainer/tokens_per_second_per_gpu"]}
        assert set(row) - {"step", "time"} == set(expected)
        for key, value in expected.items():
            assert _same(row[key], value), key
        # SkyRL's own names for what the dashboard draws
        assert {"reward/avg_raw_reward", "reward/avg_pass_at_3", "timing/generate", "timing/policy_train",
                "timing/sync_weights", "policy/policy_loss", "policy/loss_metrics/clip_ratio"} <= set(row)
    assert "timing/save_checkpoints" in rows[1] and "eval/all/avg_score" in rows[1]
    status = reader.status()
    assert (status["state"], status["step"], status["total_steps"], status["error"]) == ("succeeded", 2, 2, None)
    assert status["pid"] and status["ended_at"] >= status["started_at"] and status["heartbeat"]
    kinds = [(e["kind"], e["step"]) for e in reader.events()]
    assert kinds == [("started", 0), ("eval", 0), ("checkpoint_saved", 2), ("eval", 2), ("finished", 2)]
    events = reader.events()
    assert events[0]["engine"] == "skyrl" and events[0]["resolved"] == {"x": "y"}
    assert events[1]["eval/all/avg_score"] == store["eval_metrics"]["0"]["eval/all/avg_score"]
    assert events[2]["path"] == store["checkpoints"][0]
    assert (skyrl_side["store_dir"] / "checkpoints" / "latest_ckpt_global_step.txt").read_text() == "2"
    assert store["get_tracker_is_run_store"] and store["inner_tracker"] == "skyrl.train.utils.tracking.Tracking:console"
    config = reader.config()  # a run started by hand: SkyRL's own config, keyed as skyrl-nb's
    assert config["trainer"]["logger"] == "console" and config["generator"]["max_turns"] == 2
    assert config["trainer"]["algorithm"]["overlong_buffer"] == {"len": 2, "penalty_factor": 1.0}


def test_the_heartbeat_refreshes_the_status_between_steps(skyrl_side: dict) -> None:
    first, later = skyrl_side["result"]["store"]["heartbeats"]
    assert first["state"] == later["state"] == "running" and first["step"] == later["step"] == 1
    assert later["heartbeat"] > first["heartbeat"]


def test_every_trajectory_field_reads_back_through_run_reader(skyrl_side: dict) -> None:
    from skyrl_core.runs import RunReader

    reader = RunReader(skyrl_side["store_dir"])
    assert reader.trajectory_steps() == [1, 2]
    for step in (1, 2):
        frame = reader.trajectories(step)
        expected = _expected_rows(skyrl_side, step)
        got = frame.to_dict("records")
        assert len(got) == len(expected) == 6
        for row, want in zip(got, expected, strict=True):
            want = {**want, "turns": json.dumps(want["turns"])}
            assert set(row) == set(want)
            for key, value in want.items():
                assert _same(row[key], value), (step, key, row[key], value)


def test_the_dashboard_and_the_inspector_read_the_run(skyrl_side: dict) -> None:
    from skyrl_nb.dashboard import Dashboard
    from skyrl_widgets.inspector_data import TrajectoryData

    dash = Dashboard(skyrl_side["store_dir"], static=True)
    assert dash.refresh() == 2
    d, payloads = dash.series.data, [s["payload"] for s in _steps(skyrl_side)]
    assert d["step"] == [1, 2] and dash.state == "succeeded" and dash.total_steps == 2
    assert d["reward_mean"] == pytest.approx([p["reward/avg_raw_reward"] for p in payloads])
    assert d["pass_n"] == 3 and d["pass_at"] == pytest.approx([p["reward/avg_pass_at_3"] for p in payloads])
    assert d["tokens_per_s"] == pytest.approx([p["trainer/tokens_per_second_per_gpu"] for p in payloads])
    for lane in ("generate", "policy_train", "sync_weights"):
        assert d["timing"][lane] == pytest.approx([p[f"timing/{lane}"] for p in payloads]), lane
    assert d["eval_step"] == [0, 2] and d["eval_score"] == pytest.approx([0.75, 0.75])
    assert "store: succeeded, step 2/2" in dash.header() and dash.warnings == []

    data = TrajectoryData(skyrl_side["store_dir"])
    assert data.steps == [1, 2] and data.has_token_data()
    for step in (1, 2):
        expected = {r["uid"]: r for r in _expected_rows(skyrl_side, step)}
        view = data.view(step, page_size=10)
        assert view["samples"] == 6 and view["all_groups"] == 2 and view["discarded"] == 0
        assert view["facets"]["env_class"] == ["arithmetic"]
        for group in view["groups"]:
            rewards = [expected[s["uid"]]["reward"] for s in group["samples"]]
            assert group["n"] == 3 and group["mean_reward"] == pytest.approx(statistics.mean(rewards))
            for sample in group["samples"]:
                want = expected[sample["uid"]]
                assert sample["reward"] == pytest.approx(want["reward"])
                assert sample["advantage"] == pytest.approx(want["advantage"])
                assert (sample["num_tokens"], sample["finish_reason"], sample["response"]) == (
                    want["num_tokens"], want["finish_reason"], want["response"])
                assert sample["tokens"]["logprob"] == pytest.approx([round(v, 4) for v in want["token_logprobs"]],
                                                                    abs=1e-4)
                assert sample["tokens"]["advantage"] == pytest.approx(want["token_advantages"], abs=1e-4)
                assert [(t["role"], t["token_start"], t["token_end"]) for t in sample["turns"]] == [
                    (t["role"], t["token_start"], t["token_end"]) for t in want["turns"]]
