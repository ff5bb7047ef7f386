"""``skyrl_nb.runs`` is :mod:`skyrl_core.runs` (the contracts package); kept so notebooks keep working."""

import sys

from skyrl_core import runs as _runs

sys.modules[__name__] = _runs
