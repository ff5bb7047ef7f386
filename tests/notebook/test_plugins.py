"""Plug-ins from the notebook to the cluster: ``plugins: [my_skyrl_plugin]`` validates here, travels with
the job (Ray ``py_modules``) and runs in the engine.

The plug-in is ``tests/fixtures/plugins/my_skyrl_plugin.py``, a single module outside the package. It
is put on the notebook's ``sys.path`` only: the cluster's processes never see that folder, so a job can
import it only because ``launch`` shipped it. The job that trains with it on a real local Ray cluster
is tests/notebook/test_local_cluster.py::test_local_with_a_60_char_home_runs_a_job_with_a_plugin.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skyrl_core.config import ConfigError, load_config
from skyrl_core.registry import ADVANTAGE_ESTIMATORS, POLICY_LOSSES

PLUGIN_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "plugins"
PLUGIN_FILE = PLUGIN_DIR / "my_skyrl_plugin.py"
WITH_PLUGIN = ["plugins=[my_skyrl_plugin]", "trainer.algorithm.advantage_estimator=my_adv",
               "trainer.algorithm.policy_loss_type=my_loss"]
PLUGIN_NAMES = ((ADVANTAGE_ESTIMATORS, "my_adv"), (POLICY_LOSSES, "my_loss"))


@pytest.fixture()
def plugin_on_path(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fixture folder on the notebook's sys.path (and nowhere else)."""
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    return PLUGIN_DIR


@pytest.fixture()
def without_plugin() -> Iterator[None]:
    """A process that never imported the plug-in: its names unregistered for the test, restored after."""
    saved = [(registry, name, registry.registered().get(name)) for registry, name in PLUGIN_NAMES]
    for registry, name, _ in saved:
        registry.unregister(name)
    yield
    for registry, name, entry in saved:
        if entry is not None:
            registry.register(name, entry)


def test_a_plugin_that_cannot_be_imported_is_one_line_naming_plugins() -> None:
    with pytest.raises(ConfigError) as err:
        load_config("quickstart", overrides=["plugins=[no_such_module]"])
    (line,) = err.value.problems
    assert line.startswith("plugins:") and "no_such_module" in line and "\n" not in line


def test_a_plugin_name_is_refused_without_its_plugin(without_plugin: None) -> None:
    with pytest.raises(ConfigError) as err:
        load_config("quickstart", overrides=["trainer.algorithm.advantage_estimator=my_adv"])
    (line,) = err.value.problems
    assert line.startswith("trainer.algorithm.advantage_estimator: 'my_adv' is not allowed")
    assert all(name in line for name in ADVANTAGE_ESTIMATORS.names())


def test_launch_ships_the_plugin_module_with_the_job(plugin_on_path: Path, spy_cluster: Any,
                                                     tmp_path: Path) -> None:
    cfg = load_config("quickstart", overrides=WITH_PLUGIN)
    assert cfg.plugins == ["my_skyrl_plugin"] and "my_adv" in ADVANTAGE_ESTIMATORS and "my_loss" in POLICY_LOSSES
    shipped: dict[str, str] = {}
    submit = spy_cluster.client.submit_job

    def submit_job(**kwargs: Any) -> str:
        # what Ray's client uploads now: the staged folder lives only until submit_job returns
        entry = Path(kwargs["runtime_env"]["py_modules"][-1])
        shipped.update({str(p.relative_to(entry)): p.read_text() for p in entry.rglob("*") if p.is_file()})
        return submit(**kwargs)

    spy_cluster.client.submit_job = submit_job
    user_pkg = str(tmp_path / "user_pkg")
    given = {"env_vars": {"MY_VAR": "1"}, "py_modules": [user_pkg]}
    spy_cluster.launch(cfg, overrides=[f"run.run_root={tmp_path}"], run_id="ships-plugin", runtime_env=given)
    (submitted,) = spy_cluster.client.submitted
    env = submitted["runtime_env"]
    user_entry, plugin_entry = env["py_modules"]
    assert user_entry == user_pkg and Path(plugin_entry).name == "my_skyrl_plugin"
    assert shipped == {"__init__.py": PLUGIN_FILE.read_text()}  # a one-file package: `import my_skyrl_plugin`
    assert not Path(plugin_entry).exists()  # the staging folder is gone once the job is submitted
    assert env["env_vars"]["MY_VAR"] == "1" and env["env_vars"]["SKYRL_NB_RUN_DIR"] == str(tmp_path / "ships-plugin")
    assert given == {"env_vars": {"MY_VAR": "1"}, "py_modules": [user_pkg]}  # the caller's is untouched


def test_no_plugins_no_py_modules(spy_cluster: Any, tmp_path: Path) -> None:
    spy_cluster.launch("quickstart", overrides=[f"run.run_root={tmp_path}"], run_id="no-plugins")
    assert "py_modules" not in spy_cluster.client.submitted[0]["runtime_env"]
