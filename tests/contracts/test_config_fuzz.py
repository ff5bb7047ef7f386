"""Generated invalid configs: every one is refused, with one short line per problem naming its key.

A seeded generator builds several hundred configs from "atomic" problems (a wrong type, inf/nan, a
huge int, a boolean for a number, an empty string, a NUL byte, an emoji, an unknown key, a bad file,
...) over every key of the schema, one to four problems at a time. Each config goes through
``config_problems`` (the one validation) and a sample through the CLI's ``validate`` in this process.
"""

from __future__ import annotations

import enum
import os
import random
import time
import types
import typing
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import BaseModel

from skyrl_core.config import MAX_PROBLEM_CHARS, JobConfig, all_keys, check_config, config_problems
from skyrl_core.registry import ADVANTAGE_ESTIMATORS, POLICY_LOSSES
from skyrl_engine.__main__ import main

SEED = 16
CONFIGS = 320
CLI_SAMPLE = 50


@dataclass(frozen=True)
class Problem:
    """One thing wrong: the overrides that cause it and the key its line must start with."""

    overrides: tuple[str, ...]
    expect: str
    registry: bool = False  # judged by a registry: not reported while a plugins: module fails

    @property
    def keys(self) -> set[str]:
        return {o.split("=", 1)[0] for o in self.overrides} | {self.expect}


def _kind(key: str) -> str:
    """bool / int / float / enum / list / floats / str for a dotted key, read from the schema."""
    model = JobConfig
    *sections, leaf = key.split(".")
    for section in sections:
        model = model.model_fields[section].annotation
    annotation = model.model_fields[leaf].annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if str in members and any(typing.get_origin(a) is list for a in members):
            return "str_or_list"  # lora.target_modules: a name, a regex or a list of names
        annotation = members[0]
    if typing.get_origin(annotation) is list:
        return "floats" if "adam_betas" in key else "list"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "enum"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    if typing.get_origin(annotation) is dict:
        return "dict"
    return {bool: "bool", int: "int", float: "float", str: "str"}[annotation]


BAD_BY_KIND = {
    "int": ["true", "false", "2.5", "abc", "18446744073709551616", "-99999999999999999999999", ".inf", ".nan",
            "[1]", "{a: 1}", "''", "😀", '"a\\0b"', "1" * 5000, "!!binary Mw=="],
    "float": ["true", "false", "abc", ".inf", "-.inf", ".nan", "[1.0]", "{a: 1}", "''", "😀", "1.0e+400",
              "!!binary MC4x"],
    "bool": ["1", "0", "2.5", "abc", "''", "[true]", "😀", '"true"'],
    "enum": ["bogus", "5", "true", "''", "😀", "[a]", '"a\\0b"'],
    "list": ["5", "abc", "[5]", "[[a]]", "{a: 1}", "true", "[!!binary YQ==]"],
    "floats": ["[0.9, 1.5]", "[.nan, .nan]", "[.inf, 0.9]", "[0.9]", "[true, 0.9]", "[-0.1, 0.9]", "abc",
               "[0.9, 0.999, 0.5]"],
    "str": ["5", "true", "[a, b]", "{a: 1}", "2.5", "!!binary YQ=="],
    "str_or_list": ["5", "true", "{a: 1}", "2.5", "[5]", "[[a]]"],
    "section": ["5", "true", "abc", "[a]"],  # an optional section (fsdp_config.mixed_precision); a bad sub-key is its own key
    "dict": ["5", "abc", "[a]", "{a: 1}"],  # fsdp_config.wrap_policy: only {} is built
}

BAD_BY_KEY = {
    "trainer.policy.model.path": ["/nonexistent/model", "''", "😀", "builtin://nope", '"a\\0b"', "null"],
    "trainer.ckpt_path": ["relative/ckpts", "''", "/etc/passwd", "/etc/passwd/x", '"/tmp/a\\0b"'],
    "run.run_root": ["relative", "''", "/etc/passwd", '"/tmp/\\0x"', "null", "~nosuchuser_h16/runs"],
    "run.run_id": ["''", "😀", "a/b", "a" * 101, "-x", '"a\\0b"'],
    "environment.env_class": ["nonexistent_env", "''", "😀", "a b", "null"],
    "trainer.algorithm.advantage_estimator": ["grpoo", "''", "😀", "null"],
    "trainer.algorithm.policy_loss_type": ["regularr", "''", "😀"],
    "data.train_data": ["[]", "[/nonexistent/train.parquet]", "[builtin://nope]", "['']", '["a\\0b.parquet"]'],
    "data.val_data": ["[/nonexistent/val.parquet]", "[builtin://nope]", "[😀]"],
    "plugins": ["[no_such_module_h16]", "['']", "[5]", "abc", "[😀]"],
}
REGISTRY_KEYS = {"environment.env_class", ADVANTAGE_ESTIMATORS.key, POLICY_LOSSES.key}
UNKNOWN_KEYS = ["trainer.sed", "bogus", "trainer.algorithm.nope", "generator.sampling_params.temp",
                "trainer.policy.optimizer_config.lrr", "run.run_idd", "😀.x"]


def _atomic_problems() -> list[Problem]:
    found = []
    for key in all_keys():
        kind = _kind(key)
        values = BAD_BY_KEY.get(key, []) + ([] if key in BAD_BY_KEY and kind == "str" else BAD_BY_KIND[kind])
        for value in values:
            registry = key in REGISTRY_KEYS and not value.startswith(("5", "[", "null"))
            found.append(Problem((f"{key}={value}",), key, registry))
    # keys judged only in company: a critic's model with gae, a resume path with from_path
    for value in ("/nonexistent/critic", "''", '"a\\0b"', "builtin://nope"):
        found.append(Problem(("trainer.algorithm.advantage_estimator=gae", f"trainer.critic.model.path={value}"),
                             "trainer.critic.model.path"))
    for value in ("/nonexistent/global_step_3", "null", "''"):
        found.append(Problem(("trainer.resume_mode=from_path", f"trainer.resume_path={value}"), "trainer.resume_path"))
    found += [Problem((f"{key}=1",), key) for key in UNKNOWN_KEYS]
    found += [Problem(("trainer.algorithm=5",), "trainer.algorithm"), Problem(("generator=abc",), "generator")]
    found += [Problem(("trainer.seed",), "trainer.seed"), Problem(("=3",), "'=3'")]
    return found


def _bad_sources(folder: Path) -> list[tuple[str, str]]:
    """(source, expected line prefix) for config files that cannot be read, or hold bad values."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "latin1.yaml": "trainer:\n  seed: 3 # café\n".encode("latin-1"),
        "not_yaml.yaml": b"trainer: [1, 2\n",
        "a_list.yaml": b"- a\n- b\n",
        "a_number.yaml": b"42\n",
        "deep.yaml": b"[" * 50000 + b"]" * 50000 + b"\n",
        "bomb.yaml": b"a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                     b"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n",
        "bad_values.yaml": b"trainer:\n  seed: .inf\n  train_batch_size: true\n",
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / "a_folder.yaml").mkdir(exist_ok=True)
    # not regular files: named by what they are, never opened (a FIFO blocks, /dev/zero never ends)
    specials = [folder / "fifo.yaml", folder / "loop.yaml", folder / "big.yaml"]
    if not specials[0].exists():
        os.mkfifo(specials[0])
        specials[1].symlink_to(specials[1])
        specials[2].write_bytes(b"# padding\n" * 110_000)  # over the 1 MiB a config file may hold
    return [(str(path), "config") for path in ("/dev/zero", *specials)] + [(str(folder / name), "config") for name in files if name not in ("bomb.yaml", "bad_values.yaml")] + [
        (str(folder / "bomb.yaml"), "a"), (str(folder / "bad_values.yaml"), "trainer.seed"),
        (str(folder / "a_folder.yaml"), "config"), (str(folder / "missing.yaml"), "config"),
        ("quikstart", "config"), (str(folder / "nul\x00.yaml"), "config"),
    ]


def _generate(folder: Path) -> list[tuple[str, list[Problem], str | None]]:
    """(source, problems, expected prefix of the source's own line or None) for each generated config."""
    rng = random.Random(SEED)
    atomic = _atomic_problems()
    sources = _bad_sources(folder)
    configs = []
    for i in range(CONFIGS):
        chosen: list[Problem] = []
        for _ in range(rng.randint(1, 4)):
            p = rng.choice(atomic)
            if all(not (p.keys & q.keys) for q in chosen):
                chosen.append(p)
        source, prefix = ("quickstart", None) if i % 7 else rng.choice(sources)
        configs.append((source, chosen, prefix))
    return configs


def _allowed_prefixes(problems: list[Problem]) -> set[str]:
    given = {o.split("=", 1)[0] for p in problems for o in p.overrides}
    return set(all_keys()) | given | {p.expect for p in problems} | {"config", "plugins", "a", "b", "c", "d"} \
        | {k.rsplit(".", 1)[0] for k in all_keys()}


def _check_lines(lines: list[str], problems: list[Problem], prefix: str | None) -> None:
    assert lines, f"accepted: {[p.overrides for p in problems]}"
    allowed = _allowed_prefixes(problems)
    for line in lines:
        assert "\n" not in line and len(line) <= MAX_PROBLEM_CHARS, line
        assert any(line.startswith(f"{key}:") for key in allowed) or line.startswith(
            tuple(f"{o}:" for p in problems for o in p.overrides)), line
    plugin_failed = any(line.startswith("plugins:") for line in lines)
    for p in problems:  # every independent problem shows, under its own key
        if p.registry and plugin_failed:
            continue
        if prefix == "config" and p.expect.startswith("data."):
            continue  # an unreadable source leaves data.columns unknown: the data files' check (it reads both) waits
        assert any(line.startswith(f"{p.expect}:") or line.startswith(f"{p.overrides[-1]}:") for line in lines), \
            (p, lines)
    if prefix is not None:
        assert any(line.startswith(f"{prefix}:") for line in lines), (prefix, lines)


def test_generated_invalid_configs_are_refused_one_line_each(tmp_path: Path) -> None:
    configs = _generate(tmp_path / "sources")
    assert len(configs) >= 300
    started = time.perf_counter()
    for i, (source, problems, prefix) in enumerate(configs):
        overrides: list[str] | dict = [o for p in problems for o in p.overrides]
        if i % 5 == 0:  # the dict form too, as the form and the magics pass it
            from skyrl_core.config import parse_override

            overrides = dict(parse_override(o) for o in overrides if "=" in o and not o.startswith("="))
            problems = [p for p in problems if all("=" in o and not o.startswith("=") for o in p.overrides)]
            if not problems and prefix is None:
                continue
        cfg, lines = config_problems(source, overrides)
        assert cfg is None or lines
        _check_lines(lines, problems, prefix)
        with pytest.raises(Exception) as err:  # the raising form: only ConfigError, the same lines
            check_config(source, overrides)
        assert type(err.value).__name__ == "ConfigError" and err.value.problems == lines
    assert time.perf_counter() - started < 30


def test_generated_invalid_configs_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configs = [c for c in _generate(tmp_path / "sources") if "\x00" not in c[0]]  # argv holds no NUL byte
    sample = random.Random(SEED + 1).sample(configs, CLI_SAMPLE)
    for source, problems, prefix in sample:
        overrides = [o for p in problems for o in p.overrides]
        code = main(["validate", "--config", source, *overrides])
        out, err = capsys.readouterr()
        lines = err.splitlines()
        assert code == 2 and out == "", (source, overrides, out, err)
        assert lines == config_problems(source, overrides)[1]
        _check_lines(lines, problems, prefix)


def test_a_yaml_alias_bomb_in_one_override_is_one_short_line() -> None:
    levels = ["&a [1,1,1,1,1,1,1,1,1]"]
    levels += [f"&{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcdef", "bcdefg", strict=True)]
    override = f"generator.sampling_params.temperature=[{', '.join(levels)}]"
    assert len(override) < 400
    started = time.perf_counter()
    (line,) = config_problems("quickstart", [override])[1]
    assert time.perf_counter() - started < 1
    assert line.startswith("generator.sampling_params.temperature: [[1, 1, 1, 1, ...]") and len(line) < 250


def test_every_generated_problem_alone_is_refused_under_its_key() -> None:
    atomic = _atomic_problems()
    assert len(atomic) > 1000
    for problem in atomic:
        _check_lines(config_problems("quickstart", list(problem.overrides))[1], [problem], None)
