"""Alias for code written against older Iris docs: ``import iris.iris_gluon as iris_gl``.

``iris_gl.iris(heap_size)`` is :func:`iris.iris` (its context's ``get_device_context()`` is what Gluon
kernels take) and ``iris_gl.IrisDeviceCtx`` is :class:`iris.gluon.IrisDeviceCtx`.

Examples
--------
>>> import iris.iris_gluon as iris_gl
>>> ctx = iris_gl.iris(64 << 20)                                                   # doctest: +SKIP
>>> kernel[(1,)](iris_gl.IrisDeviceCtx, ctx.get_device_context(), buf, num_warps=1)   # doctest: +SKIP
"""

from .context import iris
from .gluon import IrisDeviceCtx

__all__ = ["IrisDeviceCtx", "iris"]
