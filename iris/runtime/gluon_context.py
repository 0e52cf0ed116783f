"""Upstream Iris's Gluon host API: ``import iris.runtime.gluon_context as iris_gl``, then ``ctx =
iris_gl.iris(heap_size)``.

:class:`IrisGluon` is :class:`iris.Iris` with the methods upstream's Gluon class documents where they differ
from :class:`~iris.Iris`: ``get_backend()``, ``broadcast(data, src_rank=0)`` and ``barrier(group=None)``.
Everything else it documents (``get_device_context``, ``get_heap_bases``, ``get_rank``, ``get_num_ranks``,
``get_device``, ``get_cu_count``, ``zeros``, ``ones``, ``full``, ``zeros_like``, ``is_symmetric``,
``debug``/``info``/``warning``/``error`` and ``ccl.all_to_all``/``all_gather``/``reduce_scatter``) is
:class:`~iris.Iris`'s own, so one context serves Triton and Gluon kernels alike. ``IrisDeviceCtx`` is
:class:`iris.language.gluon.IrisDeviceCtx` (``IrisBackend`` is upstream's older name for it). The same names are in
``iris.runtime.gluon_context``, where upstream's documentation puts them.

Examples
--------
Run with ``torchrun --nproc_per_node=2 script.py``:

>>> import iris.runtime.gluon_context as iris_gl
>>> ctx = iris_gl.iris(64 << 20)                                                   # doctest: +SKIP
>>> buf = ctx.zeros(1024, dtype=torch.float32)                                     # doctest: +SKIP
>>> kernel[(1,)](iris_gl.IrisDeviceCtx, ctx.get_device_context(), buf, num_warps=1)   # doctest: +SKIP
>>> seed = ctx.broadcast(1234 if ctx.get_rank() == 0 else None, src_rank=0)        # doctest: +SKIP
"""

from __future__ import annotations

import torch

from ..ccl import CCL
from ..language.gluon import IrisDeviceCtx
from .context import Iris

# Upstream's older name for the Gluon device context.
IrisBackend = IrisDeviceCtx

__all__ = ["IrisBackend", "IrisDeviceCtx", "IrisGluon", "iris"]


class IrisGluon(Iris):
    """A rank's context for Gluon kernels, with upstream ``IrisGluon``'s methods. Create it with :func:`iris`.

    Upstream documents ``IrisGluon.CCL.<collective>``: that class is :class:`iris.ccl.CCL`, whose instance is
    ``ctx.ccl`` (it also has ``all_reduce``).

    Examples
    --------
    >>> ctx = iris.runtime.gluon_context.iris("64MiB")                                   # doctest: +SKIP
    >>> kernel[(1,)](IrisDeviceCtx, ctx.get_backend(), buf, num_warps=1)      # doctest: +SKIP
    """

    CCL = CCL

    def get_backend(self) -> torch.Tensor:
        """The device context tensor, the same object as :meth:`get_device_context` (upstream's legacy name).

        Upstream's code returns exactly that, although its class docstring calls the result "the Gluon
        aggregate": kernels build the aggregate themselves, with ``IrisDeviceCtx.initialize(tensor)``. It says
        nothing about which backend runs: that is ``ctx.backend`` (``"cuda"`` or ``"cpu"``).

        Returns
        -------
        torch.Tensor
            int64 ``[cur_rank, num_ranks, heap_base_0 ... heap_base_{n-1}, 17 tracing slots]``: on this
            rank's GPU on the CUDA backend; on the CPU backend a CPU tensor, its heap bases being addresses
            in this process, where the Triton interpreter reads them.

        Examples
        --------
        >>> kernel[(1,)](IrisDeviceCtx, ctx.get_backend(), buf)   # same as ctx.get_device_context()  # doctest: +SKIP
        """
        return self.get_device_context()

    def barrier(self, group=None) -> None:
        """Wait for this rank's device work, then for every rank of ``group`` (upstream's signature: ``group``
        first): None for all ranks, or a torch.distributed group whose members alone call, as for
        :meth:`iris.Iris.barrier`.
        """
        super().barrier(group=group)

    def broadcast(self, data, src_rank: int = 0):
        """``src_rank``'s ``data`` on every rank (collective; the other ranks' ``data`` is ignored, None will do).

        Parameters
        ----------
        data : scalar, str, dict, torch.Tensor, numpy array or any picklable object
            What ``src_rank`` sends.
        src_rank : int
            The sending rank, in ``[0, num_ranks)``; anything else is a ``ValueError``.

        Returns
        -------
        object
            Tensors and arrays come back as numpy arrays, as upstream's do (bfloat16 as float32: numpy has no
            bfloat16); scalars, strings, dicts and other objects come back as they were sent.

        Examples
        --------
        >>> ctx.broadcast(torch.arange(4) if ctx.get_rank() == 1 else None, src_rank=1)   # doctest: +SKIP
        array([0, 1, 2, 3])
        """
        return super().broadcast(data, src=src_rank)


def iris(heap_size: int | str = 1 << 30, **options) -> IrisGluon:
    """Create this rank's :class:`IrisGluon` context (collective: every rank calls it).

    Parameters
    ----------
    heap_size : int or str
        Bytes of symmetric heap per rank, e.g. ``1 << 30`` (upstream's default) or ``"64MiB"``.
    **options
        The keywords of :func:`iris.iris` (``backend=``, ``debug=``...), which upstream does not have.

    Examples
    --------
    >>> import iris.runtime.gluon_context as iris_gl
    >>> ctx = iris_gl.iris(1 << 30)                        # doctest: +SKIP
    >>> ctx = iris_gl.iris("64MiB", backend="cpu")         # doctest: +SKIP
    """
    return IrisGluon(heap_size, **options)
