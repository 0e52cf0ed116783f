"""Where upstream Iris's documentation puts its Gluon host API: ``import iris.experimental.iris_gluon as iris_gl``.

The same names as :mod:`iris.iris_gluon`: ``iris(heap_size)``, :class:`~iris.iris_gluon.IrisGluon` and
``IrisDeviceCtx``.

Examples
--------
>>> import iris.experimental.iris_gluon as iris_gl
>>> ctx = iris_gl.iris(64 << 20)      # doctest: +SKIP
>>> ctx.get_backend() is ctx.get_device_context()      # doctest: +SKIP
True
"""

from ..iris_gluon import IrisBackend, IrisDeviceCtx, IrisGluon, iris

__all__ = ["IrisBackend", "IrisDeviceCtx", "IrisGluon", "iris"]
