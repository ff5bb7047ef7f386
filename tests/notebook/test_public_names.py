"""Every public name of the previous releases resolves after a bare ``import skyrl_nb``.

A notebook written for the release before the contracts moved to ``skyrl_core`` starts with ``import
skyrl_nb`` and then uses ``skyrl_nb.runs.open(...)``, ``skyrl_nb.config.PRESETS`` or
``skyrl_nb.cluster.base.Cluster`` without importing those submodules itself.
"""

from __future__ import annotations

import json
import subprocess
import sys

# Collected from git history: the public top-level names of skyrl_nb/__init__.py, skyrl_nb/config.py,
# skyrl_nb/runs.py and skyrl_nb/cluster/__init__.py in every commit up to 5c5e982^ (the last release
# before skyrl_core), and every dotted ``skyrl_nb.…`` name its README, docs and notebooks spell out.
OLD_NAMES = """
skyrl_nb.Cluster skyrl_nb.ConfigError skyrl_nb.Dashboard skyrl_nb.Job skyrl_nb.JobConfig skyrl_nb.RunReader
skyrl_nb.__version__ skyrl_nb.compare skyrl_nb.configure skyrl_nb.connect skyrl_nb.list_runs
skyrl_nb.load_config skyrl_nb.load_ipython_extension skyrl_nb.open_run
skyrl_nb.cluster skyrl_nb.cluster.Cluster skyrl_nb.cluster.HyperPodRayCluster skyrl_nb.cluster.LocalCluster
skyrl_nb.cluster.connect skyrl_nb.cluster.hyperpod skyrl_nb.cluster.list_hyperpod skyrl_nb.cluster.local
skyrl_nb.cluster.studio_proxy_url skyrl_nb.cluster.base skyrl_nb.cluster.base.Cluster skyrl_nb.cluster.kube
skyrl_nb.cluster.kube.KubeClient skyrl_nb.cluster.kuberay
skyrl_nb.config skyrl_nb.config.ADVANTAGE_ESTIMATORS skyrl_nb.config.AlgorithmConfig
skyrl_nb.config.BUILTIN_DATASETS skyrl_nb.config.BUILTIN_MODELS skyrl_nb.config.BUILTIN_PREFIX
skyrl_nb.config.CispoConfig skyrl_nb.config.ConfigError skyrl_nb.config.CriticConfig skyrl_nb.config.DataConfig
skyrl_nb.config.DynamicSamplingConfig skyrl_nb.config.EnvironmentConfig skyrl_nb.config.FullyAsyncConfig
skyrl_nb.config.GeneratorConfig skyrl_nb.config.InferenceEngineConfig skyrl_nb.config.JobConfig
skyrl_nb.config.KLControllerConfig skyrl_nb.config.KL_ESTIMATORS skyrl_nb.config.LOSS_REDUCTIONS
skyrl_nb.config.ModelConfig skyrl_nb.config.OffPolicyCorrectionConfig skyrl_nb.config.OptimizerConfig
skyrl_nb.config.OverlongBufferConfig skyrl_nb.config.POLICY_LOSSES skyrl_nb.config.PRESETS
skyrl_nb.config.PlacementConfig skyrl_nb.config.PolicyConfig skyrl_nb.config.RESUME_MODES
skyrl_nb.config.RUN_STATES skyrl_nb.config.RunConfig skyrl_nb.config.SEQUENCE_MASK_METRICS
skyrl_nb.config.SamplingParams skyrl_nb.config.TIS_RATIO_TYPES skyrl_nb.config.TrainerConfig
skyrl_nb.config.all_keys skyrl_nb.config.did_you_mean skyrl_nb.config.load_config
skyrl_nb.config.parse_override skyrl_nb.config.preset
skyrl_nb.runs skyrl_nb.runs.FINAL_STATES skyrl_nb.runs.HEARTBEAT_STALE_S skyrl_nb.runs.REWARD_KEY
skyrl_nb.runs.RunList skyrl_nb.runs.RunReader skyrl_nb.runs.RunSummary skyrl_nb.runs.RunWriter
skyrl_nb.runs.STATES skyrl_nb.runs.list_runs skyrl_nb.runs.open skyrl_nb.runs.open_run
skyrl_nb.dashboard skyrl_nb.dashboard.Dashboard skyrl_nb.demo skyrl_nb.form skyrl_nb.jobs skyrl_nb.magics
skyrl_nb.studio skyrl_nb.studio.info
""".split()

# For each name: forget every skyrl_nb / skyrl_core module, `import skyrl_nb` afresh, then follow the
# dotted name by attribute access alone, so no earlier name's imports can help a later one.
WALK = r"""
import json, sys
names, failed = json.loads(sys.argv[1]), []
for name in names:
    for mod in [m for m in sys.modules if m.split(".")[0] in ("skyrl_nb", "skyrl_core")]:
        del sys.modules[mod]
    import skyrl_nb
    obj = skyrl_nb
    try:
        for part in name.split(".")[1:]:
            obj = getattr(obj, part)
    except Exception as err:
        failed.append(f"{name}: {type(err).__name__}: {err}")
import skyrl_nb.compare, skyrl_nb.cluster.local
callable_after_import = callable(skyrl_nb.compare) and callable(skyrl_nb.cluster.local)
print(json.dumps({"failed": failed, "callable": callable_after_import}))
"""


def test_every_old_public_name_resolves_after_import_skyrl_nb() -> None:
    out = subprocess.run([sys.executable, "-c", WALK, json.dumps(OLD_NAMES)], capture_output=True, text=True,
                         timeout=120, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["failed"] == [], "\n".join(result["failed"])
    # a submodule named like its function (`compare`, `local`) stays callable once imported directly
    assert result["callable"]
    assert len(set(OLD_NAMES)) == len(OLD_NAMES) == 87
