"""Generated malformed `%skyrl` lines: each one is a one-line UsageError, submits nothing, writes nothing.

The lines are drawn (seeded) from the ways a line goes wrong: unbalanced quotes, empty or unknown
options, unknown commands, missing or extra run ids, bad `--tail`, overrides without a key or a
value, unknown keys, wrong values, cell bodies that are not YAML mappings, lookups of runs that do not
exist. HOME and every skyrl-nb dir point at an empty temp dir, which must stay empty.
"""

from __future__ import annotations

import os
import random
import string
import time
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError

SEED = 16
N_LINES = 120

_WORDS = ["trainer.seed=3", "trainer.max_training_steps=2", "generator.n_samples_per_prompt=4",
          "trainer.algorithm.advantage_estimator=rloo"]
_LOOKUPS = ["status", "logs", "stop", "resume", "dashboard", "inspect"]
_EMPTY = ["''", '""', "' '"]


def _word(rng: random.Random, alphabet: str = string.ascii_lowercase, n: int = 6) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _unbalanced(rng: random.Random) -> str:
    words = ["launch", *rng.sample(_WORDS, 2)]
    at = rng.randrange(1, len(words))
    words[at] = rng.choice("'\"") + words[at]
    return " ".join(words)


def malformed_lines(seed: int = SEED, n: int = N_LINES) -> list[tuple[str, str, str | None]]:
    """``(kind, line, cell)``: `n` malformed magic lines drawn with `seed`."""
    rng = random.Random(seed)
    makers = {
        "unbalanced quote": lambda: (_unbalanced(rng), None),
        "trailing backslash": lambda: ("launch trainer.seed=3 \\", None),
        "empty option": lambda: (f"launch {rng.choice(['--preset', '--run-id', '--cluster', '-p', '-c'])} "
                                 + rng.choice(_EMPTY), None),
        "empty run id": lambda: (f"{rng.choice(_LOOKUPS)} {rng.choice(_EMPTY)}", None),
        "unknown command": lambda: (_word(rng) + " " + rng.choice(["", "x", "trainer.seed=1"]), None),
        "unknown option": lambda: (f"{rng.choice(['launch', 'list', 'status'])} --{_word(rng)}", None),
        "option without value": lambda: (f"launch {rng.choice(['--preset', '--run-id', '-c'])}", None),
        "flag with a value": lambda: ("launch --wait=yes", None),
        "missing run id": lambda: (rng.choice(["logs", "stop", "resume", "dashboard", "inspect"]), None),
        "extra run ids": lambda: (f"{rng.choice(['status', 'logs', 'stop'])} {_word(rng)} {_word(rng)}", None),
        "list with a run": lambda: (f"list {_word(rng)}", None),
        "bad --tail": lambda: (rng.choice([f"logs r --tail {rng.randint(-99, -1)}", "logs r --tail many",
                                           "status --tail 3", "logs r --tail ''"]), None),
        "launch option on lookup": lambda: (f"{rng.choice(_LOOKUPS)} r --{rng.choice(['preset q', 'run-id r'])}",
                                            None),
        "override without =": lambda: (f"launch trainer.{_word(rng)}", None),
        "override without key": lambda: (f"launch ={rng.randint(0, 9)}", None),
        "override without value": lambda: (f"launch {rng.choice(_WORDS).split('=')[0]}=", None),
        "unknown key": lambda: (f"launch {_word(rng)}.{_word(rng)}=1", None),
        "wrong value": lambda: (rng.choice(["launch trainer.seed=abc", "launch trainer.train_batch_size=0",
                                            "launch trainer.algorithm.advantage_estimator=grpoo",
                                            "launch generator.inference_engine.backend=tpu",
                                            "launch run.run_root=relative/runs"]), None),
        "bad run id": lambda: (f"launch --run-id {rng.choice(['a/b', '../up', 'x:y', '-lead', 'é'])!r}", None),
        "unknown preset": lambda: (f"launch --preset {_word(rng)}", None),
        "cell on lookup": lambda: (f"{rng.choice(_LOOKUPS)} r", "trainer: {seed: 1}"),
        "cell not YAML": lambda: ("launch", rng.choice(["trainer: [1, 2", "a: b: c", "\t- x", "{"])),
        "cell not a mapping": lambda: ("launch", rng.choice(["- a\n- b", "42", "just text"])),
        "unknown run": lambda: (f"{rng.choice(_LOOKUPS)} no-such-{_word(rng)}", None),
        # absurd sizes and depths, and paths out of the run root (issue 33)
        "huge number": lambda: (f"launch trainer.{rng.choice(['seed', 'train_batch_size', 'epochs'])}="
                                + "9" * rng.randint(4301, 6000), None),
        "deep cell body": lambda: ("launch", (lambda n: rng.choice(["trainer: " + "{a: " * n + "1" + "}" * n,
                                                                    "data:\n  train_data: " + "[" * n + "]" * n]))(
                                       rng.randint(40, 3000))),
        "run outside the root": lambda: (f"{rng.choice(['status', 'dashboard', 'inspect'])} "
                                         f"{rng.choice(['..', 'x/../..'])}/{_word(rng)}", None),
    }
    kinds = list(makers)
    out = [(kind, *makers[kind]()) for kind in kinds]  # every kind at least once
    out += [(kind, *makers[kind]()) for kind in (rng.choice(kinds) for _ in range(n - len(kinds)))]
    return out


@pytest.fixture()
def sealed(shell: Any, spy_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME and skyrl-nb's dirs in an empty temp dir, the spy cluster configured, starting a head forbidden."""
    import skyrl_nb.cluster.local as local_mod

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("SKYRL_NB_CACHE_DIR", "SKYRL_NB_CONFIG_DIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "RAY_AUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    real_local = local_mod.local

    def lookup_only(**kwargs: Any) -> Any:
        if kwargs.get("start", True):
            raise AssertionError("a malformed line must not start a local cluster")
        return real_local(**kwargs)

    monkeypatch.setattr(local_mod, "local", lookup_only)
    shell.user_ns["spy"] = spy_cluster
    shell.run_line_magic("config", "SkyrlMagics.cluster = 'spy'")
    return home


def test_malformed_lines_are_one_line_usage_errors(sealed: Path, shell: Any, spy_cluster: Any,
                                                   tmp_path: Path) -> None:
    lines = malformed_lines()
    assert len(lines) >= 50 and len({kind for kind, _, _ in lines}) >= 20
    started = time.monotonic()
    for kind, line, cell in lines:
        try:
            if cell is None:
                shell.run_line_magic("skyrl", line)
            else:
                shell.run_cell_magic("skyrl", line, cell)
        except UsageError as err:
            message = str(err)
        except Exception as err:  # pragma: no cover - the failure this test exists for
            pytest.fail(f"{kind}: %skyrl {line!r} raised {type(err).__name__}: {err}")
        else:
            pytest.fail(f"{kind}: %skyrl {line!r} was accepted")
        assert message.strip() and "\n" not in message and "Traceback" not in message, (kind, line, message)
        assert len(message) < 2000, (kind, line, len(message))
    elapsed = time.monotonic() - started
    assert spy_cluster.client.submitted == [], "a malformed line was submitted"
    written = [str(p) for p in sealed.rglob("*")] + [str(p) for p in (tmp_path / "runs").rglob("*")]
    assert written == [], f"files appeared: {written[:5]}"
    assert elapsed < 30, f"{len(lines)} lines took {elapsed:.1f} s"


def test_lookups_of_unknown_runs_write_nothing(sealed: Path, shell: Any) -> None:
    for command in _LOOKUPS:
        with pytest.raises(UsageError, match="no-such-run"):
            shell.run_line_magic("skyrl", f"{command} no-such-run")
    assert not (sealed / ".config" / "skyrl-nb" / "ray_token").exists()
    assert list(sealed.rglob("*")) == []


@pytest.mark.parametrize("line", ["-h", "--help", "launch -h", "logs some-run --help"])
def test_help_prints_the_commands(shell: Any, line: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert shell.run_line_magic("skyrl", line) is None
    out = capsys.readouterr().out
    assert out.startswith("%skyrl COMMAND") and "required" not in out
    for command in ("launch", "status", "logs", "stop", "resume", "list", "dashboard", "inspect", "--run-id"):
        assert command in out


def test_list_shows_runs_launched_here_wherever_they_live(sealed: Path, shell: Any, spy_cluster: Any,
                                                          tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    shell.run_line_magic("skyrl", f"launch --run-id far-away --no-dashboard run.run_root={elsewhere}")
    shell.run_line_magic("skyrl", "launch --run-id at-home --no-dashboard")
    assert len(spy_cluster.client.submitted) == 2
    runs = shell.run_line_magic("skyrl", "list")
    assert sorted(r.run_id for r in runs) == ["at-home", "far-away"]
    assert {r.path for r in runs} == {str(elsewhere / "far-away"), str(tmp_path / "runs" / "at-home")}
    assert os.path.isdir(elsewhere / "far-away")
