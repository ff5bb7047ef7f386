"""What the trajectory inspector reads: a run's Parquet parts, paged and picked up incrementally.

The inspector never loads a whole run. It keeps

- an index of steps -> part files, built from file names with one ``os.scandir`` (no ``stat``); a
  part that a resume rewrote is noticed by its inode changing, so a refresh costs one directory read
  plus the new parts;
- a small LRU cache of whole steps (the step on screen and a few neighbours);
- for "this prompt across steps", an inverted index prompt -> ``(step, mean reward, n)`` filled in
  budgeted chunks that read only the ``step``, ``prompt`` and ``reward`` columns.

Rows follow the run-store contract (docs/architecture.md): ``step, uid, group, prompt, response, reward,
advantage, num_tokens, finish_reason, env_class, data_source`` plus the optional ``turns``, ``ground_truth``,
``token_ids``, ``token_logprobs``, ``token_advantages``, ``token_texts``, ``discarded_reason``, and a reward function's
``reward_error`` and ``reward/<name>`` scores.

A prompt is stored as the model saw it, chat template applied; :func:`chat_turns` reads it back as turns
(ChatML's ``<|im_start|>role``, Llama 3's header ids, ``<|role|>`` tags) and :func:`special_parts` marks the
template's special tokens, so the view can show a conversation and dim the markup.

One idea, the inspector's data model over a run's parts (paging, filters, caches); the part index is the run store's.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from skyrl_core.part_index import PartIndex, ScanResult, StorePartIndex, part_index
from skyrl_core.runs import DamagedFile, part_schema_problem, read_run_part
from skyrl_core.store import Store, open_store

#: Columns the group view reads; anything else in a part is left on disk.
VIEW_COLUMNS = (
    "step", "uid", "group", "prompt", "response", "reward", "advantage", "num_tokens", "finish_reason",
    "env_class", "data_source", "turns", "ground_truth", "token_ids", "token_logprobs", "token_advantages",
    "token_texts", "discarded_reason", "reward_error", "reward/*",
)
TOKEN_COLUMNS = ("token_logprobs", "token_advantages")
#: Columns a part must have for the inspector to show it (a part without them is named and skipped).
NEEDED_COLUMNS = ("prompt", "reward")
SORTS = ("group", "reward_desc", "reward_asc", "std_desc", "length_desc", "discarded_first")
MAX_TEXT_CHARS = 6000
MAX_TOKENS = 4096

DEFAULT_FILTERS: dict[str, Any] = {
    "reward_min": None, "reward_max": None, "finish_reason": "", "env_class": "", "data_source": "",
    "zero_variance": "any", "search": "", "show_discarded": True, "sort": "group",
}


def finite(value: Any) -> float | None:
    """A run-store value (metric, reward, ...) as a finite float; None when missing, NaN/inf or not a number.

    >>> finite("0.5"), finite(None), finite(float("nan")), finite("n/a")
    (0.5, None, None, None)
    """
    if value is None:
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


#: A chat template's special tokens: ``<|im_start|>``, ``<|user|>``, ``<s>`` / ``</s>``, ``[INST]``.
SPECIAL_RE = re.compile(r"<\|[^|<>\s]{1,40}\|>|</?s>|\[/?INST\]")
_ROLES = ("system", "user", "assistant", "tool", "ipython", "function", "observation", "developer")
_TURN_ENDS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>", "</s>", "<|eom_id|>")


def special_parts(text: str) -> list[list[Any]]:
    """``text`` cut into ``[piece, is_special]`` runs: the template's special tokens apart from the words.

    >>> special_parts("<|user|>2+1<|im_end|>")
    [['<|user|>', True], ['2+1', False], ['<|im_end|>', True]]
    """
    out: list[list[Any]] = []
    pos = 0
    for m in SPECIAL_RE.finditer(text):
        if m.start() > pos:
            out.append([text[pos:m.start()], False])
        out.append([m.group(0), True])
        pos = m.end()
    if pos < len(text):
        out.append([text[pos:], False])
    return out


def chat_turns(prompt: str) -> list[dict[str, Any]] | None:
    """A templated prompt read back as chat turns ``{"role", "content"}``; None when it has none (plain text).

    Knows ChatML (``<|im_start|>user\n...<|im_end|>``), Llama 3 (``<|start_header_id|>user<|end_header_id|>``)
    and role tags (``<|user|>...``). The generation prompt at the end (an assistant turn with nothing in it
    yet) is kept, marked ``"open": True``: the completions are its content.

    >>> chat_turns("<|user|>4+2<|im_end|><|assistant|>")
    [{'role': 'user', 'content': '4+2'}, {'role': 'assistant', 'content': '', 'open': True}]
    """
    turns: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    header = False  # Llama 3: the role's name comes between the two header tokens
    for piece, special in special_parts(prompt):
        name = piece[2:-2] if special and piece.startswith("<|") else ""
        if special and name in _ROLES:
            current = {"role": name, "content": ""}
            turns.append(current)
        elif special and name == "im_start":
            current = {"role": "", "content": "", "_header": True}
            turns.append(current)
        elif special and name == "start_header_id":
            header = True
            current = {"role": "", "content": ""}
            turns.append(current)
        elif special and name == "end_header_id":
            header = False
        elif special and piece in _TURN_ENDS:
            if current is not None:
                current["_closed"] = True
            current = None
        elif not special and current is not None:
            if header:
                current["role"] += piece.strip()
            elif current.pop("_header", False):
                role, _, rest = piece.partition("\n")
                current["role"], current["content"] = role.strip(), rest
            else:
                current["content"] += piece
    turns = [t for t in turns if t["role"]]
    if not turns:
        return None
    last = turns[-1]
    if last["role"] == "assistant" and not last["content"].strip() and not last.get("_closed"):
        last["open"] = True
    for t in turns:
        t.pop("_header", None)
        t.pop("_closed", None)
        t["content"] = t["content"].strip("\n")
    return turns


def _parse_turns(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if not isinstance(value, list):
        return None
    return [t for t in value if isinstance(t, dict)]


class TokenText:
    """Turns a sample's ``token_ids`` into display strings.

    In order: the part's own ``token_texts``; the run's tokenizer (``tokenizer.json`` in the model
    directory or in ``<run_dir>/tokenizer/``, read with the light ``tokenizers`` package when it is
    installed); a character-level match with the response; else ``⟨id⟩``.
    """

    def __init__(self, run_dir: Path | str, config: dict[str, Any], store: Store | None = None):
        self._run_dir = run_dir
        self._store = store if store is not None else open_store(run_dir)
        self._config = config
        self._tokenizer: Any = None
        self._looked = False

    def _load(self) -> Any:
        if self._looked:
            return self._tokenizer
        self._looked = True
        model = (((self._config.get("trainer") or {}).get("policy") or {}).get("model") or {}).get("path")
        candidates: list[tuple[Store, str]] = [(self._store, "tokenizer/tokenizer.json")]
        if model and "://" not in str(model):
            candidates.append((open_store(Path(str(model)).expanduser()), "tokenizer.json"))
        for store, name in candidates:
            try:
                text = store.read(name).decode("utf-8")
            except (OSError, ValueError):
                continue
            try:
                from tokenizers import Tokenizer

                self._tokenizer = Tokenizer.from_str(text)
                break
            except Exception:  # a missing package or a tokenizer file we cannot read: fall back
                self._tokenizer = None
        return self._tokenizer

    def texts(self, row: dict[str, Any], n: int) -> list[str]:
        given = row.get("token_texts")
        if given is not None and len(given) == n:
            return [str(t) for t in given]
        ids = list(row.get("token_ids") or [])[:n]
        tok = self._load() if ids else None
        if tok is not None:
            # byte-level BPE / sentencepiece markers back to the characters they stand for
            return [(tok.id_to_token(int(i)) or f"⟨{i}⟩").replace("Ġ", " ").replace("Ċ", "\n").replace("▁", " ")
                    for i in ids]
        response = row.get("response") or ""
        if len(response) == n:
            return list(response)
        if len(response) > n > 0 and ids and len(response) - n <= 2:
            return list(response[:n])  # e.g. a stripped end-of-sequence token
        return [f"⟨{i}⟩" for i in ids] if ids else ["·"] * n


class TrajectoryData:
    """Paged, incremental access to one run's trajectories for the inspector (thread-safe).

    A part that is not readable Parquet shows as a step without samples; ``warnings`` says which.
    """

    def __init__(self, run_dir: str | os.PathLike[str], config: dict[str, Any] | None = None,
                 cache_steps: int = 12):
        # import on the caller's thread: a first import inside a refresh thread can race another
        # thread's import of pandas / pyarrow and see a partially initialised module
        import pyarrow.parquet  # noqa: F401

        self.store = open_store(run_dir)
        self.run_dir = self.store.root
        self.index: PartIndex | StorePartIndex = part_index(self.store)
        self.tokens = TokenText(self.run_dir, config or {}, self.store)
        self._cache: OrderedDict[int, list[dict[str, Any]]] = OrderedDict()
        self._cache_steps = cache_steps
        self._lock = threading.RLock()
        # "this prompt across steps": prompt -> [(step, mean reward, n)], filled chunk by chunk
        self._prompt_steps: dict[str, list[tuple[int, float | None, int]]] = {}
        self._scanned: set[int] = set()
        #: one line per damaged part (or unreadable trajectories folder) skipped so far
        self.warnings: list[str] = []
        self.refresh()

    def _skip(self, err: DamagedFile | str) -> None:
        message = err if isinstance(err, str) else f"{err}; skipped"
        if message not in self.warnings:
            self.warnings.append(message)

    # ------------------------------------------------------------------ steps and rows
    @property
    def steps(self) -> list[int]:
        return self.index.steps

    def refresh(self, full: bool = False) -> ScanResult:
        """Pick up parts written (or rewritten, or removed) since the last look."""
        with self._lock:
            result = self.index.scan(full=full)
            if self.index.problem:
                self._skip(self.index.problem)
            for step in result.changed + result.removed:
                self._cache.pop(step, None)
                self._forget_scanned(step)
            return result

    def _forget_scanned(self, step: int) -> None:
        if step not in self._scanned:
            return
        self._scanned.discard(step)
        for key, hits in list(self._prompt_steps.items()):
            kept = [h for h in hits if h[0] != step]
            if kept:
                self._prompt_steps[key] = kept
            else:
                del self._prompt_steps[key]

    def rows(self, step: int) -> list[dict[str, Any]]:
        """All samples of one step as dicts (cached for a few steps)."""
        with self._lock:
            if step in self._cache:
                self._cache.move_to_end(step)
                return self._cache[step]
            missing = KeyError(f"step {step}: no trajectory part in {self.index.dir}; steps: {_span(self.steps)}")
            if step not in self.index:
                raise missing
            try:
                rows = read_run_part(self.store, step, VIEW_COLUMNS, required=NEEDED_COLUMNS).to_pylist()
            except FileNotFoundError:
                raise missing from None
            except DamagedFile as err:
                self._skip(err)
                rows = []
            for i, row in enumerate(rows):
                row.setdefault("step", step)
                row["_i"] = i
                row["turns"] = _parse_turns(row.get("turns"))
            self._cache[step] = rows
            while len(self._cache) > self._cache_steps:
                self._cache.popitem(last=False)
            return rows

    def has_token_data(self, step: int | None = None) -> bool:
        """Whether the parts carry per-token log-probs or advantages (checked on one step)."""
        step = self.steps[-1] if step is None and self.steps else step
        if step is None:
            return False
        return any(row.get(c) is not None for row in self.rows(step) for c in TOKEN_COLUMNS)

    # ------------------------------------------------------------------ group view
    def groups(self, step: int) -> list[dict[str, Any]]:
        """The step's samples grouped by prompt group, with per-group statistics."""
        by_group: dict[Any, list[dict[str, Any]]] = {}
        for row in self.rows(step):
            key = row.get("group")
            by_group.setdefault(row.get("prompt") if key is None else key, []).append(row)
        groups = []
        for key, samples in by_group.items():
            kept = [s for s in samples if not s.get("discarded_reason")]
            rewards = [r for s in (kept or samples) if (r := finite(s.get("reward"))) is not None]
            lengths = [finite(s.get("num_tokens")) or 0.0 for s in samples]
            mean = sum(rewards) / len(rewards) if rewards else None
            std = (math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
                   if rewards and mean is not None else None)
            first = samples[0]
            truth = first.get("ground_truth")
            groups.append({
                "key": key if isinstance(key, (int, float, str)) else str(key),
                "prompt": first.get("prompt") or "",
                "ground_truth": None if truth is None else str(truth)[:MAX_TEXT_CHARS],
                "env_class": first.get("env_class") or "",
                "data_source": first.get("data_source") or "",
                "n": len(samples),
                "mean_reward": mean,
                "std_reward": std,
                "zero_variance": bool(rewards) and max(rewards) - min(rewards) < 1e-9,
                "mean_length": sum(lengths) / len(lengths) if lengths else 0.0,
                "discarded": len(samples) - len(kept),
                "samples": samples,
            })
        return groups

    def facets(self, step: int) -> dict[str, list[str]]:
        """Values present in the step for the filter drop-downs."""
        rows = self.rows(step)
        return {c: sorted({str(r[c]) for r in rows if r.get(c)}) for c in ("finish_reason", "env_class",
                                                                           "data_source")}

    def view(self, step: int, filters: dict[str, Any] | None = None, page: int = 0,
             page_size: int = 8) -> dict[str, Any]:
        """One page of filtered, sorted groups of ``step``, ready to send to the browser."""
        f = {**DEFAULT_FILTERS, **(filters or {})}
        every = self.groups(step)
        groups = [g for g in every if _group_passes(g, f)]
        sort = f.get("sort") or "group"
        if sort == "reward_desc":
            groups.sort(key=lambda g: -(g["mean_reward"] if g["mean_reward"] is not None else -math.inf))
        elif sort == "reward_asc":
            groups.sort(key=lambda g: g["mean_reward"] if g["mean_reward"] is not None else math.inf)
        elif sort == "std_desc":
            groups.sort(key=lambda g: -(g["std_reward"] or 0.0))
        elif sort == "length_desc":
            groups.sort(key=lambda g: -g["mean_length"])
        elif sort == "discarded_first":
            groups.sort(key=lambda g: -g["discarded"])
        page_size = max(1, int(page_size))
        pages = max(1, math.ceil(len(groups) / page_size))
        page = min(max(0, int(page)), pages - 1)
        rows = self.rows(step)
        shown = groups[page * page_size:(page + 1) * page_size]
        return {
            "step": step,
            "page": page,
            "pages": pages,
            "total_groups": len(groups),
            "all_groups": len(every),
            "samples": len(rows),
            "discarded": sum(1 for r in rows if r.get("discarded_reason")),
            "facets": self.facets(step),
            "groups": [self._group_payload(g, f) for g in shown],
        }

    def _group_payload(self, group: dict[str, Any], f: dict[str, Any]) -> dict[str, Any]:
        samples = [s for s in group["samples"] if f.get("show_discarded", True) or not s.get("discarded_reason")]
        prompt = group["prompt"][:MAX_TEXT_CHARS]
        return {
            **{k: v for k, v in group.items() if k != "samples"},
            "prompt_turns": chat_turns(prompt),
            "prompt_parts": special_parts(prompt),
            "samples": [self._sample_payload(s, _sample_matches(s, f)) for s in samples],
        }

    def _sample_payload(self, row: dict[str, Any], match: bool) -> dict[str, Any]:
        response = row.get("response") or ""
        out: dict[str, Any] = {
            "uid": str(row.get("uid", row["_i"])),
            "reward": finite(row.get("reward")),
            "advantage": finite(row.get("advantage")),
            "num_tokens": int(finite(row.get("num_tokens")) or 0),
            "finish_reason": row.get("finish_reason") or "",
            "discarded_reason": row.get("discarded_reason") or None,
            # reward functions (skyrl_engine.rewards): each one's score, and the error of one that raised
            "reward_error": row.get("reward_error") or None,
            "reward_parts": {k.split("/", 1)[1]: finite(v) for k, v in row.items() if k.startswith("reward/")} or None,
            "response": response[:MAX_TEXT_CHARS],
            "response_parts": special_parts(response[:MAX_TEXT_CHARS]),
            "truncated": len(response) > MAX_TEXT_CHARS,
            "match": match,
            "turns": [
                {"role": str(t.get("role", "")), "content": str(t.get("content", ""))[:MAX_TEXT_CHARS],
                 "parts": special_parts(str(t.get("content", ""))[:MAX_TEXT_CHARS]),
                 "token_start": t.get("token_start"), "token_end": t.get("token_end")}
                for t in row["turns"]
            ] if row.get("turns") else None,
            "tokens": None,
        }
        lps, advs = row.get("token_logprobs"), row.get("token_advantages")
        if lps is not None or advs is not None:
            n = min(MAX_TOKENS, max(len(lps or ()), len(advs or ())))
            texts = self.tokens.texts(row, n)
            out["tokens"] = {
                "text": texts,
                "special": [bool(SPECIAL_RE.fullmatch(t)) for t in texts],
                "logprob": [_round(v) for v in list(lps or ())[:n]] if lps is not None else None,
                "advantage": [_round(v) for v in list(advs or ())[:n]] if advs is not None else None,
            }
        return out

    # ------------------------------------------------------------------ prompt across steps
    def drift(self, prompt: str, budget_s: float = 0.3, detail_steps: int = 8,
              around_step: int | None = None) -> dict[str, Any]:
        """Where ``prompt`` was sampled across the run, and its completions at a few of those steps.

        Scans unscanned parts for at most ``budget_s`` seconds (call again to continue: ``done`` says
        when every part has been looked at). ``points`` has one ``[step, mean reward, n]`` per step
        that sampled the prompt; ``details`` holds the completions at up to ``detail_steps`` of them,
        spread over the run and always including ``around_step`` when it sampled the prompt.
        """
        self._scan_prompts(budget_s)
        with self._lock:
            hits = sorted(self._prompt_steps.get(prompt, []))
            points = [[s, m, n] for s, m, n in hits]
            chosen = _spread([s for s, _, _ in hits], detail_steps, around_step)
            details = []
            for step in chosen:
                try:
                    rows = self.rows(step)
                except (KeyError, FileNotFoundError):  # removed by a resume since the scan
                    continue
                details.append({
                    "step": step,
                    "samples": [{"reward": finite(r.get("reward")), "num_tokens": int(finite(r.get("num_tokens")) or 0),
                                 "finish_reason": r.get("finish_reason") or "",
                                 "discarded_reason": r.get("discarded_reason") or None,
                                 "response": (r.get("response") or "")[:400]}
                                for r in rows if r.get("prompt") == prompt],
                })
            scanned = sum(1 for s in self.steps if s in self._scanned)
            return {"prompt": prompt, "points": points, "details": details,
                    "scanned": scanned, "total": len(self.steps), "done": scanned >= len(self.steps)}

    def _scan_prompts(self, budget_s: float, chunk: int = 128) -> None:
        """Read (step, prompt, reward) of unscanned parts, newest first, for about ``budget_s``."""
        import pyarrow.dataset as ds

        with self._lock:
            todo = [s for s in reversed(self.steps) if s not in self._scanned]
        deadline = time.perf_counter() + budget_s
        while todo and time.perf_counter() < deadline:
            batch, todo = todo[:chunk], todo[chunk:]
            paths = [str(self.index.path(s)) for s in batch]
            try:  # outside the lock: the view stays responsive while we read
                if not self.store.local:
                    raise OSError("an object store: read part by part")
                dataset = ds.dataset(paths, format="parquet")
                # a dataset reads every part as the first one's schema: a part with other columns would
                # be read as nulls without a word, so each part's own schema is checked (its footer)
                if any(part_schema_problem(f.physical_schema, ("step", *NEEDED_COLUMNS))
                       for f in dataset.get_fragments()):
                    raise ValueError("a part with another schema: read part by part")
                cols = dataset.to_table(columns=["step", "prompt", "reward"]).to_pydict()
                steps, prompts, rewards = cols["step"], cols["prompt"], cols["reward"]
            except Exception:  # a part without a step column, or one removed under us: go one by one
                steps, prompts, rewards = [], [], []
                for s in batch:
                    try:
                        part = read_run_part(self.store, s, ("prompt", "reward"), required=NEEDED_COLUMNS).to_pydict()
                    except (FileNotFoundError, OSError):
                        continue
                    except DamagedFile as err:
                        self._skip(err)
                        continue
                    n = len(part.get("prompt", []))
                    steps += [s] * n
                    prompts += part.get("prompt", [])
                    rewards += part.get("reward", [None] * n)
            acc: dict[tuple[int, str], list[float]] = {}
            counts: dict[tuple[int, str], int] = {}
            for s, p, r in zip(steps, prompts, rewards, strict=False):
                key = (int(s), p)
                counts[key] = counts.get(key, 0) + 1
                if (fr := finite(r)) is not None:
                    acc.setdefault(key, []).append(fr)
            with self._lock:
                for (s, p), n in counts.items():
                    vals = acc.get((s, p), [])
                    self._prompt_steps.setdefault(p, []).append((s, sum(vals) / len(vals) if vals else None, n))
                self._scanned.update(batch)


def _group_passes(group: dict[str, Any], f: dict[str, Any]) -> bool:
    if f.get("env_class") and group["env_class"] != f["env_class"]:
        return False
    if f.get("data_source") and group["data_source"] != f["data_source"]:
        return False
    zv = f.get("zero_variance") or "any"
    if zv == "only" and not group["zero_variance"]:
        return False
    if zv == "hide" and group["zero_variance"]:
        return False
    needle = (f.get("search") or "").strip().lower()
    if needle and needle not in group["prompt"].lower() and not any(
            needle in (s.get("response") or "").lower() for s in group["samples"]):
        return False
    return any(_sample_matches(s, f) for s in group["samples"])


def _sample_matches(sample: dict[str, Any], f: dict[str, Any]) -> bool:
    if sample.get("discarded_reason") and not f.get("show_discarded", True):
        return False
    reward = finite(sample.get("reward"))
    lo, hi = finite(f.get("reward_min")), finite(f.get("reward_max"))
    if lo is not None and (reward is None or reward < lo):
        return False
    if hi is not None and (reward is None or reward > hi):
        return False
    return not (f.get("finish_reason") and sample.get("finish_reason") != f["finish_reason"])


def _spread(steps: list[int], k: int, must: int | None) -> list[int]:
    """Up to ``k`` of ``steps`` spread evenly (first and last included), plus ``must`` if present."""
    if len(steps) <= k:
        return steps
    picks = {steps[round(i * (len(steps) - 1) / (k - 1))] for i in range(k)} if k > 1 else {steps[-1]}
    if must is not None and must in steps:
        picks.add(must)
    return sorted(picks)


def _round(value: Any) -> float | None:
    f = finite(value)
    return None if f is None else round(f, 4)


def _span(steps: list[int]) -> str:
    return f"{steps[0]}..{steps[-1]} ({len(steps)} parts)" if steps else "none yet"
