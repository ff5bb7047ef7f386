"""Checkpoints in SkyRL's layout, written atomically.

::

    <ckpt_path>/                       trainer.ckpt_path, default <run_dir>/checkpoints
      latest_ckpt_global_step.txt      the newest COMPLETE checkpoint (written last)
      global_step_N/
        policy/                        model.safetensors + config.json (an HF model dir, consolidated;
                                       LoRA merged), generation_config.json, the tokenizer
          adapter/                             LoRA only: the PEFT adapter (adapter_model.safetensors,
                                               adapter_config.json), what a resume restores
          optim_world_size_W_rank_R.pt         each rank's AdamW state (its fsdp2 shards; the adapters' with LoRA)
          extra_state_world_size_W_rank_R.pt   each rank's LR schedule and RNG states
          fsdp_config.json                     the strategy and world size that wrote them
        critic/                        gae only: the same, model.safetensors = body + value_head
        trainer_state.json             global_step, data position, the step's metrics, config
        data.json                      the train loader position (epoch, batch_in_epoch)

A checkpoint is assembled in ``.tmp_global_step_N`` and renamed into place before the latest file
is updated, so a kill at any moment leaves either the previous or the new checkpoint, never half.
The roles' parts are written and read by :class:`skyrl_engine.trainable.TrainableWorker`; a checkpoint
written by W ranks resumes on any number of ranks.

The root may be an object store (``trainer.ckpt_path=s3://...``, or a run root there). A checkpoint is
then assembled in a local staging folder (:func:`staging_root`) as above, on every Ray node of the job
(a rank on another node writes its shards on its own disk), uploaded file by file from each node to
``<root>/global_step_N/`` (:func:`upload`), and only then is ``latest_ckpt_global_step.txt`` put: a kill
during the upload leaves the previous checkpoint as the latest. A resume first downloads the checkpoint
into the staging folder of every node (:func:`fetch`) and loads it from there.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from typing import Any

# where checkpoints live and which is the latest: one rule for the notebook and the engine, in skyrl_core
from skyrl_core.resume import LATEST_FILE, STEP_DIR_RE, STEP_PREFIX, latest_checkpoint
from skyrl_core.resume import checkpoint_root as checkpoint_root
from skyrl_core.store import is_url, open_store


def step_dir(root: str, step: int) -> str:
    """``<root>/global_step_<step>``."""
    return f"{root.rstrip('/')}/{STEP_PREFIX}{step}" if is_url(root) else os.path.join(root, f"{STEP_PREFIX}{step}")


def latest_step(root: str) -> int | None:
    """The step in ``latest_ckpt_global_step.txt`` when that checkpoint exists, else None (root local or a URL);
    the notebook asks the same question of the same files (``skyrl_core.resume.latest_checkpoint``)."""
    return latest_checkpoint(root)


def staging_root(root: str) -> str:
    """The local folder where checkpoints of the object-store root ``root`` are assembled and fetched:
    ``$SKYRL_NB_CACHE/checkpoints/<hash of root>`` (else under the temp dir), on the job's own disk."""
    base = os.environ.get("SKYRL_NB_CACHE") or os.path.join(tempfile.gettempdir(), "skyrl-nb")
    return os.path.join(os.path.expanduser(base), "checkpoints", hashlib.sha256(root.encode()).hexdigest()[:16])


def on_every_node(fn: Any, *args: Any) -> list[Any]:
    """``fn(*args)`` once on every alive node of the Ray cluster this process is connected to (tasks of 0
    CPUs pinned to each node), or just here when it is not connected or the cluster has one node."""
    ray = __import__("sys").modules.get("ray")  # only a process that imported ray can be connected
    if ray is None or not ray.is_initialized():
        return [fn(*args)]
    nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
    if len(nodes) <= 1:
        return [fn(*args)]
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(num_cpus=0)(fn)
    return ray.get([task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(*args)
                    for node in nodes])


def begin_staged(root: str, step: int) -> str:
    """:func:`begin` in the staging folder of an object-store ``root``, on every node; returns the folder."""
    return on_every_node(begin, staging_root(root), step)[0]


def _upload_here(tmp: str, root: str, name: str) -> int:
    """Upload the files this node has under ``tmp`` to ``<root>/<name>/``, then remove them; how many."""
    if not os.path.isdir(tmp):
        return 0
    files = sum(len(f) for _, _, f in os.walk(tmp))
    open_store(root).upload_folder(tmp, name)
    shutil.rmtree(tmp, ignore_errors=True)
    return files


def upload(tmp: str, root: str, step: int, trainer_state: dict[str, Any], max_to_keep: int) -> str:
    """Finish a checkpoint staged by :func:`begin_staged` on an object store: the trainer state, every
    node's files under ``<root>/global_step_<step>/``, then the latest file, then pruning; returns its URL."""
    _write_state(tmp, trainer_state)
    store = open_store(root)
    name = f"{STEP_PREFIX}{step}"
    store.delete_folder(name)  # a half upload of this step by a killed run
    if not sum(on_every_node(_upload_here, tmp, root, name)):
        raise RuntimeError(f"checkpoint {step}: no node had files in {tmp} to upload")
    store.put(LATEST_FILE, str(step).encode())
    prune(root, max_to_keep)
    return step_dir(root, step)


def _download_here(root: str, name: str, local: str) -> None:
    shutil.rmtree(local, ignore_errors=True)
    open_store(root).download_folder(name, local)


def fetch(ckpt_dir: str) -> str:
    """A local folder holding the checkpoint ``ckpt_dir``: itself when local, else a fresh download of the
    object-store ``.../global_step_N`` into :func:`staging_root` on every node (what ranks load from)."""
    if not is_url(ckpt_dir):
        return ckpt_dir
    root, _, name = ckpt_dir.rstrip("/").rpartition("/")
    step_of(name)  # a global_step_N directory, or a one-line ValueError
    local = os.path.join(staging_root(root), "fetched", name)
    on_every_node(_download_here, root, name, local)
    if not os.path.isdir(local):
        raise FileNotFoundError(f"trainer.resume_path: {ckpt_dir!r} holds no files")
    return local


def step_of(path: str) -> int:
    """N from a ``.../global_step_N`` directory; ValueError otherwise."""
    m = STEP_DIR_RE.match(os.path.basename(os.path.normpath(path)))
    if not m:
        raise ValueError(f"trainer.resume_path: {path!r} is not a global_step_N checkpoint directory")
    return int(m.group(1))


def _write_text_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def begin(root: str, step: int) -> str:
    """A fresh temporary directory for checkpoint ``step`` (with ``policy/`` inside)."""
    tmp = os.path.join(root, f".tmp_{STEP_PREFIX}{step}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "policy"))
    return tmp


def _write_state(tmp: str, trainer_state: dict[str, Any]) -> None:
    with open(os.path.join(tmp, "trainer_state.json"), "w") as f:
        json.dump(trainer_state, f, default=str)
    with open(os.path.join(tmp, "data.json"), "w") as f:
        json.dump(trainer_state.get("data_position", {}), f)


def commit(root: str, tmp: str, step: int, trainer_state: dict[str, Any], max_to_keep: int) -> str:
    """Write the trainer state, move ``tmp`` into place, update the latest file, prune old ones."""
    _write_state(tmp, trainer_state)
    final = step_dir(root, step)
    if os.path.exists(final):
        shutil.rmtree(final)
    os.rename(tmp, final)
    _write_text_atomic(os.path.join(root, LATEST_FILE), str(step))
    prune(root, max_to_keep)
    return final


def prune(root: str, max_to_keep: int) -> list[int]:
    """Delete the oldest ``global_step_N`` dirs beyond ``max_to_keep`` (-1 keeps all); return deleted steps."""
    if max_to_keep is None or max_to_keep < 0:
        return []
    store = open_store(root)
    steps = sorted(int(m.group(1)) for name in store.folders() if (m := STEP_DIR_RE.match(name)))
    doomed = steps[: max(0, len(steps) - max(max_to_keep, 1))]
    for step in doomed:
        if is_url(root):
            store.delete_folder(f"{STEP_PREFIX}{step}")
        else:
            shutil.rmtree(step_dir(root, step), ignore_errors=True)
    return doomed


def read_trainer_state(ckpt_dir: str) -> dict[str, Any]:
    """The driver's state saved with a checkpoint."""
    with open(os.path.join(ckpt_dir, "trainer_state.json")) as f:
        return json.load(f)
