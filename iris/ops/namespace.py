"""``ctx.ops``: the GEMM + communication ops as methods of a context, with a workspace kept per op and shapes.

Examples
--------
>>> ws = ctx.ops.matmul_all_gather(out, A, B)          # doctest: +SKIP
>>> ctx.ops.matmul_all_gather(out, A, B) is ws          # the same shapes: the same workspace   # doctest: +SKIP
True
"""

from __future__ import annotations

from .config import Workspace
from .fused import all_gather_matmul, matmul_all_gather, matmul_all_reduce, matmul_reduce_scatter


class Ops:
    """Upstream Iris's ``ctx.ops`` (see :mod:`iris.ops` for each op)."""

    def __init__(self, ctx):
        self._ctx = ctx
        self._workspaces: dict[tuple, Workspace] = {}

    def workspace_for(self, key: tuple) -> Workspace:
        """The workspace kept for ``key`` (op, shapes, dtype), made empty on first use."""
        if key not in self._workspaces:
            self._workspaces[key] = Workspace(key)
        return self._workspaces[key]

    def release_workspaces(self) -> None:
        """Forget every kept workspace: their heap buffers are released at the next allocation once no tensor
        refers to them (as any heap tensor is). Call it on every rank, e.g. between problem sizes."""
        self._workspaces.clear()

    def matmul_all_reduce(self, out, A, B, bias=None, async_op=False, config=None, workspace=None) -> Workspace:
        """See :func:`iris.ops.matmul_all_reduce`."""
        return matmul_all_reduce(self._ctx, out, A, B, bias, async_op, config, workspace)

    def all_gather_matmul(self, out, A_sharded, B, bias=None, async_op=False, config=None,
                          workspace=None) -> Workspace:
        """See :func:`iris.ops.all_gather_matmul`."""
        return all_gather_matmul(self._ctx, out, A_sharded, B, bias, async_op, config, workspace)

    def matmul_all_gather(self, out, A, B, bias=None, async_op=False, config=None, workspace=None) -> Workspace:
        """See :func:`iris.ops.matmul_all_gather`."""
        return matmul_all_gather(self._ctx, out, A, B, bias, async_op, config, workspace)

    def matmul_reduce_scatter(self, out, A, B, bias=None, async_op=False, config=None,
                              workspace=None) -> Workspace:
        """See :func:`iris.ops.matmul_reduce_scatter`."""
        return matmul_reduce_scatter(self._ctx, out, A, B, bias, async_op, config, workspace)
