"""Upstream Iris's ``iris.ccl.utils`` names, for code written against upstream (its process-group tests import
``extract_group_info`` from here). The implementations live in :mod:`iris.ccl.groups` and :mod:`iris.ccl.config`.

Examples
--------
>>> from iris.ccl.utils import extract_group_info
>>> extract_group_info(None, ctx)  # rank_in_group, rank_global, world_size, rank_start, rank_stride  # doctest: +SKIP
(1, 1, 4, 0, 1)
"""

from .config import ReduceOp
from .groups import extract_group_info

__all__ = ["ReduceOp", "extract_group_info"]
