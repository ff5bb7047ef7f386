"""skyrl-nb's contracts: what the notebook, the widgets and the engine agree on.

- :mod:`skyrl_core.choices` every choice a config key offers, defined once (``StrEnum``s)
- :mod:`skyrl_core.registry` named plug-ins (advantage estimators, policy losses, environments) and
  the ``plugins:`` modules that add to them
- :mod:`skyrl_core.config` the job config schema, presets, validation
- :mod:`skyrl_core.runs` the run store (writer, reader, trajectory parts), run states, the run-id rule,
  atomic writes
- :mod:`skyrl_core.frontend` whether a live widget front end is attached

It imports only the standard library, pydantic and pyyaml (pandas / pyarrow inside the functions that
read trajectories), so the engine can stand on it without any widget library and the notebook without
torch.
"""
