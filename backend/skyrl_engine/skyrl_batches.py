"""SkyRL's batches in skyrl-nb's run store: the pure pieces the bridge's SkyRL classes
(``skyrl_classes.py``) call on each step's ``GeneratorInput`` / ``GeneratorOutput``. No SkyRL import here:
they run, and are tested, with or without it."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from skyrl_core.run_files import trajectory_row
from skyrl_engine.dapo import soft_overlong_penalty

Decode = Callable[[list[int], bool], str]


def sample_inputs(input_batch: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{instance_id: {"env_class", "data_source"}}`` from one SkyRL ``GeneratorInput`` (what the generator
    output no longer says; :func:`trajectory_rows` reads it back by the sample's ``TrajectoryID``)."""
    ids = input_batch.get("trajectory_ids") or []
    envs = input_batch.get("env_classes") or []
    extras = input_batch.get("env_extras") or [None] * len(ids)
    return {tid.instance_id: {"env_class": env, "data_source": (extra or {}).get("data_source")}
            for tid, env, extra in zip(ids, envs, extras, strict=False)}


def _spans(mask: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(start, end, value)`` runs of equal values in a 0/1 mask."""
    spans: list[tuple[int, int, int]] = []
    for i, v in enumerate(mask):
        v = int(v)
        if spans and spans[-1][2] == v:
            spans[-1] = (spans[-1][0], i + 1, v)
        else:
            spans.append((i, i + 1, v))
    return spans


def _rows_of(tensor: Any) -> list[list[float]]:
    return tensor.tolist() if hasattr(tensor, "tolist") else [list(row) for row in tensor]


def trajectory_rows(step: int, output: Mapping[str, Any], uids: Sequence[str], advantages_BT: Any,
                    decode: Decode, *, inputs: Mapping[str, Mapping[str, Any]] | None = None,
                    default_env_class: str = "", store_token_data: bool = True,
                    multi_turn: bool = False) -> list[dict[str, Any]]:
    """One run-store row per sample of a SkyRL ``GeneratorOutput`` (docs/architecture.md "The run store").

    ``uids`` are SkyRL's prompt ids per sample; ``advantages_BT`` is SkyRL's ``advantages`` tensor for the
    same samples (extra padding rows after them are ignored), RIGHT-aligned as SkyRL lays response tensors
    out: sample b's L response tokens are its last L columns. ``inputs`` comes from :func:`sample_inputs`.
    With ``multi_turn`` the loss mask's runs become ``turns`` (1: the model's, 0: the environment's tokens).
    The reward is the sample's (a per-token reward list is summed); the advantage is its first response
    token's, as skyrl-nb's engine stores it.
    """
    advantages = _rows_of(advantages_BT)
    ids = output.get("trajectory_ids")
    stops = output.get("stop_reasons")
    logprobs = output.get("rollout_logprobs")
    if ids:
        instances, repetitions = [t.instance_id for t in ids], [t.repetition_id for t in ids]
    else:  # SkyRL numbers a prompt's samples by repetition_id; count them when there are no trajectory ids
        instances, repetitions, seen = list(uids), [], {}
        for instance in instances:
            repetitions.append(seen.get(instance, 0))
            seen[instance] = repetitions[-1] + 1
    numeric = all(str(i).isdigit() for i in instances)
    rows = []
    for b, response in enumerate(output["response_ids"]):
        length = len(response)
        adv_row = advantages[b]
        token_adv = [float(x) for x in adv_row[len(adv_row) - length:]] if length else []
        reward = output["rewards"][b]
        info = (inputs or {}).get(instances[b], {})
        extra: dict[str, Any] = {}
        if store_token_data:
            extra.update(token_ids=[int(t) for t in response],
                         token_logprobs=[float(x) for x in logprobs[b]] if logprobs else None, token_advantages=token_adv)
        if multi_turn:
            turns = [{"role": "assistant" if value else "user", "content": decode(list(response[s:e]), True),
                      "token_start": s, "token_end": e} for s, e, value in _spans(output["loss_masks"][b])]
            extra.update(turns=json.dumps(turns), num_turns=sum(1 for t in turns if t["role"] == "assistant"))
        rows.append(trajectory_row(
            step=step, uid=f"{step}-{instances[b]}-{repetitions[b]}",
            group=int(instances[b]) if numeric else str(instances[b]),
            prompt=decode(list(output["prompt_token_ids"][b]), False), response=decode(list(response), True),
            reward=float(sum(reward)) if isinstance(reward, (list, tuple)) else float(reward),
            advantage=token_adv[0] if token_adv else 0.0, num_tokens=length,
            finish_reason=stops[b] if stops else None, env_class=info.get("env_class") or default_env_class,
            data_source=info.get("data_source") or "unknown", **extra))
    return rows


def apply_overlong_penalty(output: dict[str, Any], max_len: int, buffer_len: int, penalty_factor: float) -> None:
    """DAPO's soft overlong penalty on a SkyRL ``GeneratorOutput``'s per-sample rewards, in place, before
    dynamic sampling sees them (where skyrl-nb's engine applies it; ``skyrl_engine.dapo.soft_overlong_penalty``).
    Per-token reward lists are left alone."""

    rewards = output["rewards"]
    if buffer_len <= 0 or not rewards or isinstance(rewards[0], (list, tuple)):
        return
    lengths = [len(r) for r in output["response_ids"]]
    output["rewards"] = soft_overlong_penalty(list(rewards), lengths, max_len, buffer_len, penalty_factor)
