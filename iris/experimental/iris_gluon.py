"""Alias for code written against older Iris docs: ``import iris.experimental.iris_gluon as iris_gl``.

Same names as :mod:`iris.iris_gluon`: ``iris(heap_size)`` and ``IrisDeviceCtx``.

Examples
--------
>>> import iris.experimental.iris_gluon as iris_gl
>>> ctx = iris_gl.iris(64 << 20)      # doctest: +SKIP
"""

from ..iris_gluon import IrisDeviceCtx, iris

__all__ = ["IrisDeviceCtx", "iris"]
