"""``run.engine: skyrl`` on this side of the bridge, without SkyRL: the translation's command line and its
one-line refusals, the bridge's run-store writer and ``builtin://`` resolution, and ``python -m bench gpu_check
--skyrl`` where no GPU is. What SkyRL itself makes of the translation is test_skyrl_oracle.py (in SkyRL's own
environment); launching (``%skyrl launch --engine skyrl``, the cluster check) is
tests/notebook/test_skyrl_engine_launch.py."""

from __future__ import annotations

import importlib.util
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _cfg(tmp_path: Path, *overrides: str, preset: str = "quickstart") -> Any:
    from skyrl_core.config import check_config

    return check_config(preset, [f"run.run_root={tmp_path / 'runs'}", "run.run_id=r1", *overrides])


# ------------------------------------------------------------------------------------------ translation


def test_the_command_line_carries_every_key_and_reads_back(tmp_path: Path) -> None:
    from skyrl_core.config import PRESETS
    from skyrl_core.skyrl_translate import BRIDGE_MODULE, skyrl_value

    for preset in PRESETS:
        t = _cfg(tmp_path, preset=preset).to_skyrl()
        argv = t.command("python")
        assert argv[:5] == ["python", "-m", BRIDGE_MODULE, "--run-dir", str(tmp_path / "runs" / "r1")]
        assert shlex.split(t.command_line("python")) == argv
        words = argv[5:]
        assert len(words) == len(t.overrides) > 100
        for word, (key, value) in zip(words, t.overrides.items(), strict=True):
            assert word == f"{key}={skyrl_value(value)}" and yaml.safe_load(word.partition("=")[2]) == value, word
    assert "--no-token-data" in _cfg(tmp_path, "run.store_token_data=false").to_skyrl().command()


def test_a_run_without_an_id_has_no_bridge_command_but_translates(tmp_path: Path) -> None:
    from skyrl_core.config import ConfigError, load_config

    t = load_config("quickstart").to_skyrl()
    assert t.run_dir is None and "trainer.ckpt_path" in t.not_sent and "trainer.strategy" in t.overrides
    with pytest.raises(ConfigError) as info:
        t.command()
    assert info.value.problems == ["run.run_id: None has no run directory for the bridge; give run.run_id "
                                   "(launch makes one)"]


def test_an_object_store_run_keeps_checkpoints_there_and_exports_local(tmp_path: Path) -> None:
    from skyrl_core.config import check_config

    cfg = check_config("quickstart", ["run.run_root=s3://bucket/runs", "run.run_id=r1"], check_files=False)
    t = cfg.to_skyrl()
    assert t.overrides["trainer.ckpt_path"] == "s3://bucket/runs/r1/checkpoints"
    assert "trainer.export_path" not in t.overrides and t.run_dir == "s3://bucket/runs/r1"


REFUSED = [  # overrides -> the start of the one line (each only with run.engine=skyrl)
    (["trainer.strategy=ddp", "trainer.placement.policy_num_gpus_per_node=2", "generator.inference_engine.num_engines=2",
      "trainer.micro_train_batch_size_per_gpu=64"], "trainer.strategy: ddp is not allowed with run.engine=skyrl"),
    (["trainer.async_one_step=true", "trainer.placement.colocate_all=false"],
     "trainer.async_one_step: true is not allowed with run.engine=skyrl: SkyRL has no one-step"),
    (["trainer.fully_async.enabled=true", "trainer.placement.colocate_all=false"],
     "trainer.fully_async.enabled: true is not allowed with run.engine=skyrl: the bridge runs SkyRL's synchronous"),
    (["trainer.fully_async.enabled=true", "trainer.placement.colocate_all=false",
      "trainer.algorithm.policy_loss_type=rollout_is"],  # a loss SkyRL's fully async trainer takes: still not run
     "trainer.fully_async.enabled: true is not allowed with run.engine=skyrl: the bridge runs SkyRL's synchronous"),
    (["trainer.placement.policy_num_gpus_per_node=2", "trainer.micro_train_batch_size_per_gpu=64"],
     "trainer.placement.colocate_all: true is not allowed with run.engine=skyrl when the policy's 2 GPU(s)"),
    (["trainer.placement.colocate_all=false", "trainer.placement.policy_num_gpus_per_node=2"],
     "trainer.micro_train_batch_size_per_gpu: 128 does not divide one GPU's share of a policy mini-batch"),
    (["trainer.algorithm.loss_reduction=seq_mean_token_sum_norm"], "trainer.algorithm.max_seq_len: None is not allowed"),
]


@pytest.mark.parametrize("overrides,start", REFUSED, ids=[f"{i}-{r[1].split(':')[0]}" for i, r in enumerate(REFUSED)])
def test_what_skyrl_cannot_take_is_one_line_before_submission(tmp_path: Path, overrides: list[str], start: str) -> None:
    from skyrl_core.config import MAX_PROBLEM_CHARS, ConfigError, check_config

    cfg = _cfg(tmp_path, *overrides)  # fine for skyrl-nb's own engine
    with pytest.raises(ConfigError) as info:
        check_config(cfg, ["run.engine=skyrl"])
    (line,) = [p for p in info.value.problems if p.startswith(start.split(":")[0])]
    assert line.startswith(start) and len(line) <= MAX_PROBLEM_CHARS and not line.endswith("..."), line
    with pytest.raises(ConfigError, match=start.split(":")[0]):
        cfg.to_skyrl()


def test_a_plugin_is_refused_for_skyrl_not_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from skyrl_core.config import ConfigError, check_config

    monkeypatch.syspath_prepend(str(ROOT / "tests" / "fixtures" / "plugins"))
    with pytest.raises(ConfigError) as info:
        check_config("quickstart", [f"run.run_root={tmp_path}", "run.engine=skyrl", "plugins=[my_skyrl_plugin]"])
    assert any(p.startswith("plugins: [my_skyrl_plugin] is not allowed with run.engine=skyrl: plug-ins register")
               for p in info.value.problems), info.value.problems


def test_run_engine_is_a_checked_choice(tmp_path: Path) -> None:
    from skyrl_core.config import ConfigError, check_config

    assert _cfg(tmp_path).run.engine == "skyrl_nb"
    assert check_config(_cfg(tmp_path), ["run.engine=skyrl"]).run.engine == "skyrl"
    with pytest.raises(ConfigError) as info:
        check_config("quickstart", ["run.engine=skyrll"])
    assert info.value.problems == ["run.engine: 'skyrll' is not allowed; allowed: skyrl_nb, skyrl (did you mean 'skyrl'?)"]


def test_the_translation_shows_itself(tmp_path: Path) -> None:
    t = _cfg(tmp_path).to_skyrl()
    assert repr(t).startswith("SkyrlTranslation(") and "ready" in repr(t) and "7 changed" in repr(t)
    html = t._repr_html_()
    assert "<table>" in html and "trainer.run_name" in html and "not sent" in html
    assert any(n.startswith("changed: trainer.strategy=fsdp  [skyrl-nb 'fsdp2'") for n in t.notes())
    bad = _cfg(tmp_path, "trainer.async_one_step=true", "trainer.placement.colocate_all=false")
    from skyrl_core.skyrl_translate import translate

    assert "1 problem(s)" in repr(translate(bad)) and "<li>trainer.async_one_step" in translate(bad)._repr_html_()


# ------------------------------------------------------------------------------------------ the bridge


def test_the_tracker_writes_skyrls_calls_into_the_run_store(tmp_path: Path) -> None:
    from skyrl_core.runs import RunReader
    from skyrl_engine.skyrl_bridge import RunStoreTracker

    class Inner:
        calls: list[str] = []

        def log(self, data, step, commit=False):
            self.calls.append(f"log {step}")

        def finish(self):
            self.calls.append("finish")

        def log_exception(self, e, step=0):
            self.calls.append("exception")

    tracker = RunStoreTracker(tmp_path / "run", inner=Inner(), policy_gpus=2, heartbeat_s=0.05)
    tracker.pending()
    assert RunReader(tmp_path / "run").status()["state"] == "pending"
    tracker.started(total_steps=3)
    tracker.log({"eval/all/avg_score": 0.25}, step=0)
    tracker.log({"reward/avg_raw_reward": 0.5, "trainer/tokens_per_second_per_gpu": 10.0}, step=1)
    tracker.checkpoint_saved(1, str(tmp_path / "ckpt" / "global_step_1"))
    tracker.log_exception(RuntimeError("CUDA out of memory"), step=1)
    tracker.finish()  # SkyRL's tracker.finish after a failure must not turn it into a success
    reader = RunReader(tmp_path / "run")
    (row,) = reader.metrics()
    assert row["step"] == 1 and row["reward/avg_raw_reward"] == 0.5 and row["trainer/tokens_per_second"] == 20.0
    status = reader.status()
    assert (status["state"], status["step"], status["total_steps"]) == ("failed", 1, 3)
    assert status["error"] == "RuntimeError: CUDA out of memory"
    kinds = [e["kind"] for e in reader.events()]
    assert kinds == ["started", "eval", "checkpoint_saved", "error"]
    assert Inner.calls == ["log 0", "log 1", "exception", "finish"]
    stopped = RunStoreTracker(tmp_path / "stopped")
    stopped.started(total_steps=2)
    stopped.stopped()
    assert RunReader(tmp_path / "stopped").status()["state"] == "stopped"


def test_resume_step_reads_skyrls_checkpoint_files(tmp_path: Path) -> None:
    from skyrl_engine.skyrl_bridge import resume_step

    assert resume_step(str(tmp_path), "latest", None) == 0
    (tmp_path / "latest_ckpt_global_step.txt").write_text("7")
    assert resume_step(str(tmp_path), "latest", None) == 7
    assert resume_step(str(tmp_path), "none", None) == 0 and resume_step(str(tmp_path), None, None) == 0
    assert resume_step(str(tmp_path), "from_path", str(tmp_path / "global_step_3")) == 3


def test_builtin_inputs_become_files_skyrl_reads(tmp_path: Path, tiny_model_dir: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoTokenizer

    from skyrl_engine.skyrl_bridge import resolve_args
    from skyrl_engine.tasks import read_rows

    monkeypatch.setenv("SKYRL_NB_CACHE", str(tmp_path / "cache"))
    t = _cfg(tmp_path, f"trainer.policy.model.path={tiny_model_dir}", "generator.max_turns=2").to_skyrl()
    words, resolved = resolve_args(t.args())
    train, val = resolved["data.train_data"], resolved["data.val_data"]
    assert [Path(p).name for p in train + val] == ["arithmetic-train-max_turns2.parquet",
                                                   "arithmetic-test-max_turns2.parquet"]
    rows = read_rows(train[0])
    assert len(rows) == len(read_rows("builtin://arithmetic/train")) and rows[0]["max_turns"] == 2
    assert rows[0]["prompt"][0]["role"] == "user" and rows[0]["env_class"] == "arithmetic"
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    longest = max(len(tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True,
                                                    return_dict=False)) for r in rows + read_rows(val[0]))
    assert resolved["trainer.max_prompt_length"] == longest
    context = json.loads((Path(tiny_model_dir) / "config.json").read_text())["max_position_embeddings"]
    assert resolved["generator.max_input_length"] == context - 8  # quickstart's max_generate_length
    parsed = dict(w.split("=", 1) for w in words)
    assert parsed["data.train_data"] == f"[{train[0]}]" and parsed["trainer.max_prompt_length"] == str(longest)
    assert len(words) == len(t.args()) + 2  # the two limits are new keys; the rest replaced in place


def test_the_bridge_without_skyrl_fails_in_one_line_and_says_so_in_the_run_store(tmp_path: Path) -> None:
    from skyrl_core.runs import RunReader

    run_dir = tmp_path / "runs" / "nos"
    env = {"PYTHONPATH": str(ROOT / "backend"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "skyrl_engine.skyrl_bridge", "--run-dir", str(run_dir),
                           "trainer.seed=3"], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("SkyRL's trainer does not import in this Python") and "skyrl[fsdp]==0.4.0" in line
    status = RunReader(run_dir).status()
    assert status["state"] == "failed" and status["error"] == line
    probe = subprocess.run([sys.executable, "-m", "skyrl_engine.skyrl_bridge", "--probe"], capture_output=True,
                           text=True, timeout=120, env=env, cwd=ROOT)
    assert probe.returncode == 3
    assert json.loads(probe.stdout)["error"] == "the skyrl package is not installed"


def test_gpu_check_skyrl_mode_says_why_it_cannot_run_here(monkeypatch: pytest.MonkeyPatch) -> None:
    done = subprocess.run([sys.executable, "-m", "bench", "gpu_check", "--skyrl"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"skipped": "no CUDA device visible: SkyRL's trainer runs on GPUs only (vLLM "
                                                  "engines, FSDP workers, flash-attn)"}
    # with a GPU but without SkyRL's packages it says that instead
    monkeypatch.syspath_prepend(str(ROOT))
    gpu_check = importlib.import_module("bench.gpu_check")
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert gpu_check.skyrl_missing() == ("SkyRL's trainer does not import in this Python "
                                         f"({sys.version.split()[0]}): the skyrl package is not installed")


def test_a_jobs_own_data_becomes_skyrl_rows_and_its_reward_functions_an_environment(
        tmp_path: Path, tiny_model_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without SkyRL (our venv has skyrl-gym): the bridge's resolution of shipped data in any shape and the reward
    functions' environment; test_skyrl_oracle.py does the same through SkyRL's own config and dataset."""
    import skyrl_gym

    from skyrl_core.reward_functions import RewardFunctionError
    from skyrl_core.skyrl_translate import REWARD_ENV, REWARD_ENV_KEY, TEXT_PROMPT_COLUMN
    from skyrl_core.user_inputs import JobInputs
    from skyrl_engine import skyrl_reward_env  # registers the environment, as skyrl_classes' import does
    from skyrl_engine.skyrl_bridge import _parser, resolve_args
    from skyrl_engine.tasks import read_rows, write_rows

    monkeypatch.setenv("SKYRL_NB_CACHE", str(tmp_path / "cache"))
    assert skyrl_reward_env.REWARD_ENV in skyrl_gym.envs.registration.registry

    def exact(prompt, completion, ground_truth, **_):
        if completion == "boom":
            raise RuntimeError("boom")
        return float(completion.strip() == ground_truth)

    rows = [{"q": "2+2", "a": "4", "env_class": "arithmetic"}, {"q": "3+3", "a": "6", "env_class": "arithmetic"}]
    inputs = JobInputs.gather(data=rows, columns={"prompt": "q", "ground_truth": "a"}, reward=exact,
                              reward_errors="fail")
    cfg = _cfg(tmp_path, "run.engine=skyrl", f"trainer.policy.model.path={tiny_model_dir}", "data.val_data=[]",
               "trainer.eval_interval=-1", *inputs.overrides())
    inputs.stage(str(cfg.run_dir))
    args = _parser().parse_args(cfg.to_skyrl().command()[3:])
    assert args.columns == {"prompt": "q", "ground_truth": "a"}
    _, resolved = resolve_args(args.overrides, run_dir=args.run_dir, columns=args.columns)
    (written,) = resolved["data.train_data"]
    got = read_rows(written)
    assert got[0] == {"q": "2+2", "a": "4", "env_class": REWARD_ENV, "prompt": [{"role": "user", "content": "2+2"}],
                      "reward_spec": {"ground_truth": "4"}, TEXT_PROMPT_COLUMN: True}
    settings = {k[len(REWARD_ENV_KEY) + 1:]: v for k, v in cfg.to_skyrl().overrides.items()
                if k.startswith(REWARD_ENV_KEY)}
    extras = {k: v for k, v in got[1].items() if k not in ("prompt", "env_class")}
    env = skyrl_gym.make(REWARD_ENV, env_config=settings, extras={**extras, "max_turns": 1})
    env.init(got[1]["prompt"])
    assert env.step("6")["reward"] == 1.0 and env.get_metrics() == {"reward/exact": 1.0, "reward/errors": 0.0}
    with pytest.raises(RewardFunctionError, match="exact: RuntimeError: boom .reward.errors=fail."):
        env.step("boom")

    # veRL's rows in a local file, no reward functions: each row keeps its own environment
    verl = write_rows(str(tmp_path / "verl.jsonl"), [{"prompt": [{"role": "user", "content": "1+1"}],
                                                      "env_class": "arithmetic", "reward_model": {"ground_truth": "2"}}])
    _, resolved = resolve_args([f"data.train_data=[{verl}]", "data.val_data=[]"])
    (row,) = read_rows(resolved["data.train_data"][0])
    assert row["env_class"] == "arithmetic" and row["reward_spec"] == {"method": "rule", "ground_truth": "2"}
    assert TEXT_PROMPT_COLUMN not in row
    with pytest.raises(FileNotFoundError, match="missing.parquet"):
        resolve_args(["data.train_data=[inputs://missing.parquet]"], run_dir=str(cfg.run_dir))


def test_the_bridge_sends_skyrl_nb_alerts_for_a_refusal_and_a_reward_collapse(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``trainer.alerts`` of the config ``launch`` wrote reach the webhook from the bridge as from skyrl-nb's engine:
    a job refused before training (here: no SkyRL in this Python) sends one ``failed`` message with its line, and
    SkyRL's reward falling under ``reward_below`` one ``reward_collapse`` (a local HTTP server is the webhook; ~2 s)."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from skyrl_core.config import load_config
    from skyrl_core.runs import RunWriter
    from skyrl_engine import skyrl_bridge

    got: list[dict[str, Any]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("SKYRL_TEST_BRIDGE_HOOK", f"http://127.0.0.1:{server.server_port}/hook")

    def run_dir(run_id: str) -> str:
        cfg = load_config("quickstart", [f"run.run_root={tmp_path}", f"run.run_id={run_id}",
                                         "trainer.alerts.webhook=env:SKYRL_TEST_BRIDGE_HOOK",
                                         "trainer.alerts.reward_below=0.5", "trainer.alerts.reward_window=2"])
        RunWriter(cfg.run_dir).write_config(cfg)
        return str(cfg.run_dir)

    try:
        if importlib.util.find_spec("skyrl") is None:  # .venv has no SkyRL: the bridge refuses at once
            assert skyrl_bridge.main(["--run-dir", run_dir("refused")]) == skyrl_bridge.EXIT_REFUSED
            assert len(got) == 1 and "refused" in got[0]["text"] and "failed" in got[0]["text"].lower(), got
            assert "SkyRL's trainer does not import" in got[0]["text"]
            got.clear()
        tracker = skyrl_bridge.RunStoreTracker(run_dir("collapse"))
        tracker.start_alerts()
        assert tracker.alerts is not None
        for step, reward in ((1, 0.9), (2, 0.8), (3, 0.2), (4, 0.1), (5, 0.1)):
            tracker.log({"reward/avg_raw_reward": reward}, step=step)
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            time.sleep(0.1)
        tracker.finish()
    finally:
        server.shutdown()
    assert len(got) == 1 and "collapse" in got[0]["text"] and "steps 3-4" in got[0]["text"], got
