"""Your own task's inputs (issue 35): every kind of data a notebook holds, read in every row shape, shipped into a run
folder and read back by the engine's own loader; and every input that cannot be used refused in one line naming it.

Real files (Parquet, JSONL, a ``datasets`` folder saved with ``save_to_disk``), a real S3 API (moto's server on
127.0.0.1) for ``s3://``, and the engine's loader (``skyrl_engine.tasks.load_prompts``) on the staged run folder.
"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

QA = [{"question": f"{a}+{b}", "answer": str(a + b)} for a in range(3) for b in range(3)]
MAPPED = {"prompt": "question", "ground_truth": "answer"}


def _shipped_rows(tmp_path: Path, name: str, **given: Any) -> list[Any]:
    """``given`` (launch's keywords) gathered, staged into a run folder and read back by the engine."""
    from skyrl_core.config import load_config
    from skyrl_core.user_inputs import JobInputs
    from skyrl_engine.tasks import load_prompts

    inputs = JobInputs.gather(**given, ship_file=lambda _path: True)
    cfg = load_config("quickstart", [*inputs.overrides(), f"run.run_root={tmp_path}", f"run.run_id={name}"])
    assert cfg.problems() == [], cfg.problems()
    inputs.stage(str(cfg.run_dir))
    # what the run records: each source with its row count and hash
    manifest = json.loads((Path(cfg.run_dir) / "inputs" / "manifest.json").read_text())
    assert [e["rows"] for e in manifest["data"]["train"]] == [d.rows for d in inputs.train]
    return load_prompts(cfg.data.train_data, "arithmetic", columns=cfg.data.columns, run_dir=str(cfg.run_dir))


def _facts(rows: list[Any]) -> list[tuple[Any, ...]]:
    return [(r.prompt, str(r.ground_truth), r.raw_prompt) for r in rows]


EXPECTED = [([{"role": "user", "content": r["question"]}], r["answer"], r["question"]) for r in QA]


def test_every_kind_of_data_reaches_the_engine_as_the_same_rows(tmp_path: Path, s3: Any) -> None:
    import datasets
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from skyrl_core.datarows import reward_columns
    from skyrl_engine.tasks import load_prompts

    df = pd.DataFrame(QA)
    parquet = tmp_path / "qa.parquet"
    pq.write_table(pa.Table.from_pylist(QA), parquet)
    jsonl = tmp_path / "qa.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in QA))
    ds = datasets.Dataset.from_list(QA)
    splits = datasets.DatasetDict({"train": ds, "test": datasets.Dataset.from_list(QA[:2])})
    saved = tmp_path / "saved"
    splits.save_to_disk(str(saved))
    cases: dict[str, Any] = {"DataFrame": df, "list": QA, "Dataset": ds, "DatasetDict": splits,
                             "save_to_disk": str(saved), "Parquet": str(parquet), "JSONL": str(jsonl)}
    for name, data in cases.items():
        rows = _shipped_rows(tmp_path, name.lower().replace("_", "-"), data=data, columns=MAPPED)
        assert _facts(rows) == EXPECTED, name
        # every column but the prompt reaches a reward function, with the ground truth
        assert reward_columns(rows[0].extras, rows[0].ground_truth) == {"question": "0+0", "answer": "0",
                                                                          "ground_truth": "0"}, name

    # a DatasetDict's test split becomes the eval data
    from skyrl_core.user_inputs import JobInputs

    both = JobInputs.gather(data=splits, columns=MAPPED)
    assert [d.rows for d in both.train] == [9] and [d.rows for d in both.val] == [2]

    # veRL's / SageMaker RFT's rows, and TRL's (prompt as text or messages; other columns to the reward)
    verl = [{"prompt": [{"role": "user", "content": r["question"]}], "data_source": "qa",
             "reward_model": {"style": "rule", "ground_truth": r["answer"]}} for r in QA]
    rows = _shipped_rows(tmp_path, "verl", data=verl)
    assert [(r.prompt, r.ground_truth, r.data_source) for r in rows] == [(p, gt, "qa") for p, gt, _ in EXPECTED]
    trl = [{"prompt": r["question"], "solution": r["answer"]} for r in QA]
    rows = _shipped_rows(tmp_path, "trl", data=trl)
    assert [(r.prompt, r.raw_prompt, r.ground_truth) for r in rows] == [(p, q, None) for p, _, q in EXPECTED]
    assert reward_columns(rows[4].extras, rows[4].ground_truth) == {"solution": "2"}
    chat = [{"prompt": [{"role": "system", "content": "Add."}, {"role": "user", "content": r["question"]}],
             "ground_truth": r["answer"]} for r in QA]
    rows = _shipped_rows(tmp_path, "trl-chat", data=chat)
    assert rows[1].raw_prompt == chat[1]["prompt"] and rows[1].ground_truth == "1"

    # s3:// on a real S3 API: the job reads the URL itself (it is not shipped); validation reads its first rows
    url = f"s3://{s3.bucket}/data/qa.parquet"
    import fsspec

    with fsspec.open(url, "wb") as f:
        f.write(parquet.read_bytes())
    kept = JobInputs.gather(data=url, columns=MAPPED)
    assert kept.train == [url]
    from skyrl_core.config import load_config

    cfg = load_config("quickstart", [*kept.overrides(), f"run.run_root={tmp_path}"])
    assert cfg.problems() == []
    assert _facts(load_prompts([url], columns=MAPPED)) == EXPECTED
    bad = load_config("quickstart", [f"data.train_data=[{url}]", f"run.run_root={tmp_path}"])
    assert bad.problems() == [f"data.train_data: '{url}' row 1: column 'prompt' is missing (columns: 'question', "
                              "'answer'); expected prompt as a non-empty list of {role, content} messages (or a "
                              "string), or name the prompt's column: columns={'prompt': <column>}"]


def test_data_that_cannot_be_used_is_one_line_naming_it(tmp_path: Path, s3: Any) -> None:
    import pandas as pd

    from skyrl_core.config import ConfigError
    from skyrl_core.user_inputs import JobInputs

    not_parquet = tmp_path / "broken.parquet"
    not_parquet.write_bytes(b"PAR1 this is not parquet")
    cases = {
        "empty": (dict(data=pd.DataFrame({"question": [], "answer": []}), columns=MAPPED),
                  "data: a pandas.DataFrame has no rows; expected rows with a prompt"),
        "missing column": (dict(data=pd.DataFrame(QA), columns={"prompt": "q", "ground_truth": "answer"}),
                           "data: a pandas.DataFrame row 1: column 'q' (data.columns.prompt) is missing (columns: "
                           "'question', 'answer')"),
        "mistyped column": (dict(data=[{"prompt": "1+1"}, {"prompt": 7}]),
                            "data: a list row 2: column 'prompt' holds 7; expected prompt as a non-empty list of "
                            "{role, content} messages (or a string)"),
        "unknown role": (dict(data=QA, columns={"answer": "answer"}),
                         "columns: 'answer' is not a role; allowed: prompt, ground_truth, env_class, data_source"),
        "unreadable file": (dict(data=str(not_parquet)),
                            f"data: '{not_parquet}': not a Parquet file pyarrow can read"),
        "not a dict": (dict(data=[{"prompt": "a"}, "b"]),
                       "data: list row 2 is 'b' (str), not a dict; give a list of dicts, a DataFrame, a "
                       "datasets.Dataset or a file"),
        "missing object": (dict(data=f"s3://{s3.bucket}/nothing.parquet"), None),
    }
    for name, (given, line) in cases.items():
        if line is None:
            continue  # a URL is the job's to read; validation names it (below)
        with pytest.raises(ConfigError) as err:
            JobInputs.gather(**given, ship_file=lambda _path: True)
        (got,) = err.value.problems
        assert got.startswith(line), (name, got)

    from skyrl_core.config import load_config

    cfg = load_config("quickstart", [f"data.train_data=[s3://{s3.bucket}/nothing.parquet]", f"run.run_root={tmp_path}"])
    assert cfg.problems() == [f"data.train_data: 's3://{s3.bucket}/nothing.parquet': no such object"]


def _reward_refusal(reward: Any, tmp_path: Path, as_data: bool = False) -> str:
    from skyrl_core.config import ConfigError, load_config
    from skyrl_core.user_inputs import JobInputs

    with pytest.raises(ConfigError) as err:
        inputs = JobInputs.gather(data=reward, columns=MAPPED) if as_data else \
            JobInputs.gather(data=QA, columns=MAPPED, reward=reward)
        inputs.try_rewards(load_config("quickstart", [*inputs.overrides(), f"run.run_root={tmp_path}"]))
    (line,) = err.value.problems
    return line


def test_reward_functions_that_cannot_be_used_are_refused_in_one_line(tmp_path: Path) -> None:
    lock = threading.Lock()
    sock = socket.socket()

    def wrong_signature(text, answer):
        return 1.0

    def returns_text(prompt, completion, **_):
        return "yes"

    def returns_nan(prompts, completions, **_):
        return [float("nan")] * len(completions)

    def holds_lock(prompt, completion, **_):
        with lock:
            return 1.0

    def holds_socket(prompt, completion, **_):
        return float(sock.fileno() > 0)

    def raises(prompt, completion, ground_truth, **_):
        return int(completion)  # "The answer is 0." is no int

    def needs_a_column(prompt, completion, solution):
        return 1.0

    try:
        assert _reward_refusal(wrong_signature, tmp_path) == (
            "reward 'wrong_signature': takes (text, answer); expected (prompts, completions, **columns) -> list[float] "
            "(batched, as TRL) or (prompt, completion, **columns) -> float (per sample)")
        assert _reward_refusal(returns_text, tmp_path) == (
            "reward 'returns_text' returned 'yes' (str); expected a number (tried on the first row)")
        assert _reward_refusal(returns_nan, tmp_path) == (
            "reward 'returns_nan' returned nan; expected a finite number (tried on the first row)")
        assert _reward_refusal(holds_lock, tmp_path) == (
            "reward 'holds_lock': cannot be shipped with the job: it holds 'lock' (_thread.lock), which cannot be "
            "pickled; create it inside the function instead")
        assert _reward_refusal([(holds_socket, 0.5)], tmp_path) == (
            "reward 'holds_socket': cannot be shipped with the job: it holds 'sock' (socket.socket), which cannot "
            "be pickled; create it inside the function instead")
        assert _reward_refusal(raises, tmp_path) == (
            "reward 'raises' raised on the first row with completion 'The answer is 0.': ValueError: invalid literal "
            "for int() with base 10: 'The answer is 0.'")
        assert _reward_refusal(needs_a_column, tmp_path) == (
            "reward 'needs_a_column': TypeError: test_reward_functions_that_cannot_be_used_are_refused_in_one_line."
            "<locals>.needs_a_column() missing 1 required positional argument: 'solution'; the row's columns are "
            "answer, ground_truth, question")
        assert _reward_refusal(lambda prompt, completion: 1.0, tmp_path) == (
            "reward: a lambda has no name to show its series under; define it with def")
        assert _reward_refusal("user/data/train", tmp_path, as_data=True) == (
            "data: 'user/data/train' has no suffix of .parquet, .jsonl, .json; give a data file, a dataset folder, "
            "hf://<name> or s3://<bucket>/<key>")
        assert _reward_refusal([returns_text, returns_text], tmp_path) == (
            "reward: two functions are named 'returns_text'; each series reward/<name> needs its own name")
    finally:
        sock.close()


def test_rewards_are_tried_on_a_made_up_row_when_the_data_is_on_the_clusters_own_disk(tmp_path: Path) -> None:
    """A data file the notebook cannot read (on the cluster's FSx) does not stop a launch with cell rewards: the
    functions are tried on a made-up row with a prompt and a ground truth; the cluster's probe checks the file."""
    from skyrl_core.config import load_config
    from skyrl_core.user_inputs import JobInputs

    def correct(prompt, completion, ground_truth, **_):
        return float(completion.endswith(f"{ground_truth}."))

    inputs = JobInputs.gather(data="/fsx/only-on-the-cluster/train.parquet", reward=correct)
    assert inputs.train == ["/fsx/only-on-the-cluster/train.parquet"]
    cfg = load_config("quickstart", [*inputs.overrides(), f"run.run_root={tmp_path}"])
    assert inputs.try_rewards(cfg) == [1.0]
