"""Upstream Iris's ``iris.host.platform.utils``: its timing and rank-to-device helpers, which live here in
:mod:`iris.runtime.timing` and :mod:`iris.upstream.hip` (this module holds no code of its own: the names are those
modules').

Examples
--------
>>> from iris.host.platform.utils import do_bench, get_device_id_for_rank
>>> do_bench is iris.do_bench                                              # doctest: +SKIP
True
"""

from ..runtime.timing import do_bench
from .hip import get_device_id_for_rank, is_simulation_env

__all__ = ["do_bench", "get_device_id_for_rank", "is_simulation_env"]
