"""``skyrl_nb.config`` is :mod:`skyrl_core.config` (the contracts package); kept so notebooks keep working."""

import sys

from skyrl_core import config as _config

sys.modules[__name__] = _config
