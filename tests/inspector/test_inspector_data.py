"""The inspector's data layer on real Parquet parts: index, groups, filters, paging, drift."""

from __future__ import annotations

import os

from inspector_runs import write_run, write_step

from skyrl_widgets.inspector_data import PartIndex, TrajectoryData


def test_index_sees_added_rewritten_and_removed_parts(tmp_path):
    writer = write_run(tmp_path / "r", steps=3)
    data = TrajectoryData(writer.run_dir)
    assert data.steps == [1, 2, 3]
    assert not data.refresh()  # nothing new

    write_step(writer, 4)
    assert data.refresh().added == [4] and data.steps == [1, 2, 3, 4]

    before = {r["uid"] for r in data.rows(3)}
    writer.truncate_after(2)  # a resume from step 2 ...
    found = data.refresh()
    assert found.removed == [3, 4] and data.steps == [1, 2]
    write_step(writer, 3, groups=1)  # ... rewrites step 3 with other rows
    assert data.refresh().added == [3]
    assert {r["uid"] for r in data.rows(3)} != before


def test_rewritten_part_is_noticed_by_inode(tmp_path):
    writer = write_run(tmp_path / "r", steps=2)
    index = PartIndex(writer.trajectory_dir)
    index.scan()
    write_step(writer, 2, groups=1)  # same name, new file (temp + rename)
    assert index.scan().changed == [2]


def test_groups_have_statistics(finished_run):
    data = TrajectoryData(finished_run)
    groups = {g["key"]: g for g in data.groups(3)}
    assert set(groups) == {0, 1, 2}
    assert groups[0]["zero_variance"] and groups[0]["mean_reward"] == 1.0 and groups[0]["std_reward"] == 0.0
    assert not groups[1]["zero_variance"] and groups[1]["mean_reward"] == 0.5
    assert groups[1]["n"] == 4 and groups[2]["env_class"] == "search"
    # step 4 has group 0 discarded by the "engine"
    assert data.view(4)["discarded"] == 4 and data.view(3)["discarded"] == 0


def test_filters_sort_and_paging(finished_run):
    data = TrajectoryData(finished_run)
    keys = lambda v: [g["key"] for g in v["groups"]]  # noqa: E731
    assert keys(data.view(3)) == [0, 1, 2]
    assert keys(data.view(3, {"zero_variance": "hide"})) == [1, 2]
    assert keys(data.view(3, {"zero_variance": "only"})) == [0]
    assert keys(data.view(3, {"env_class": "search"})) == [2]
    assert keys(data.view(3, {"data_source": "src1"})) == [1]
    assert keys(data.view(3, {"search": "ANSWER 3.2."})) == [2]
    assert keys(data.view(3, {"search": "backwards"})) == [g["key"] for g in data.groups(3)
                                                           if "backwards" in g["prompt"]]
    # reward range: groups with a matching sample stay; non-matching samples are dimmed
    view = data.view(3, {"reward_min": 0.5})
    assert keys(view) == [0, 1, 2]
    g1 = view["groups"][1]
    assert [s["match"] for s in g1["samples"]] == [s["reward"] >= 0.5 for s in g1["samples"]]
    assert keys(data.view(3, {"reward_max": 0.5, "zero_variance": "any"})) == [1, 2]
    assert all(s["finish_reason"] == "length" for g in data.view(3, {"finish_reason": "length"})["groups"]
               for s in g["samples"] if s["match"])
    # discarded samples: shown with their reason, or hidden
    v4 = data.view(4)
    assert v4["groups"][0]["samples"][0]["discarded_reason"] == "zero-variance group filtered"
    assert keys(data.view(4, {"show_discarded": False})) == [1, 2]
    # sort and paging
    assert keys(data.view(3, {"sort": "reward_asc"}))[-1] == 0
    assert keys(data.view(3, {"sort": "reward_desc"}))[0] == 0
    p0, p1 = data.view(3, page=0, page_size=2), data.view(3, page=1, page_size=2)
    assert (p0["pages"], keys(p0), keys(p1)) == (2, [0, 1], [2])
    assert data.view(3, page=9, page_size=2)["page"] == 1
    assert data.view(3)["facets"]["finish_reason"] == ["length", "stop"]


def test_token_payload_and_turns(tmp_path):
    write_run(tmp_path / "mt", steps=2, multi_turn=True)
    data = TrajectoryData(tmp_path / "mt")
    assert data.has_token_data()
    sample = data.view(1)["groups"][1]["samples"][0]
    tokens = sample["tokens"]
    assert "".join(tokens["text"]) == sample["response"]  # character-level fallback
    assert len(tokens["logprob"]) == len(tokens["advantage"]) == len(sample["response"])
    assert [t["role"] for t in sample["turns"]] == ["user", "assistant", "tool_call", "observation", "assistant"]
    assert sample["turns"][1]["token_end"] == 6

    write_run(tmp_path / "plain", steps=1, tokens=False)
    plain = TrajectoryData(tmp_path / "plain")
    assert not plain.has_token_data()
    assert plain.view(1)["groups"][0]["samples"][0]["tokens"] is None


def test_drift_scans_in_budgeted_chunks(tmp_path):
    write_run(tmp_path / "r", steps=12)
    data = TrajectoryData(tmp_path / "r")
    prompt = data.groups(5)[0]["prompt"]
    first = data.drift(prompt, budget_s=0.0)  # nothing scanned yet: a partial answer
    assert not first["done"] and first["points"] == [] and first["total"] == 12
    full = data.drift(prompt, budget_s=5.0, detail_steps=3, around_step=5)
    assert full["done"] and full["scanned"] == 12
    steps = [p[0] for p in full["points"]]
    expected = [s for s in range(1, 13) if any(g["prompt"] == prompt for g in data.groups(s))]
    assert steps == expected
    assert 5 in [d["step"] for d in full["details"]]
    assert all(s["response"].startswith("answer") for d in full["details"] for s in d["samples"])
    # a part rewritten later is rescanned
    os.remove(data.index.path(12))
    data.refresh()
    assert 12 not in [p[0] for p in data.drift(prompt)["points"]]


def test_chat_prompts_read_back_as_turns_with_the_expected_answer(tmp_path):
    """The prompt as the model saw it becomes chat turns (the template's markup kept apart for the raw view);
    each group carries its ground truth; a completion's special tokens are marked."""
    from inspector_runs import write_run

    from skyrl_widgets.inspector_data import TrajectoryData

    write_run(tmp_path / "chat", steps=1, chat=True)
    group = TrajectoryData(tmp_path / "chat").view(1)["groups"][0]
    assert [t["role"] for t in group["prompt_turns"]] == ["system", "user", "assistant"]
    assert group["prompt_turns"][1]["content"] == "Spell 'cat' backwards." and group["prompt_turns"][-1]["open"]
    assert ["<|im_start|>", True] in group["prompt_parts"] and ["<|im_end|>", True] in group["prompt_parts"]
    assert group["ground_truth"] == "tac"
    assert all(s["response_parts"] == [[s["response"], False]] for s in group["samples"])
    write_run(tmp_path / "plain", steps=1)
    plain = TrajectoryData(tmp_path / "plain").view(1)["groups"][0]  # a prompt with no template has no turns
    assert plain["prompt_turns"] is None and plain["prompt_parts"] == [[plain["prompt"], False]]
