"""The device API: what kernels call, in Triton and in Gluon.

* :mod:`.core`: the Triton functions (``iris.load``, ``store``, ``get``, ``put``, ``copy``, ``atomic_*``),
  :class:`~iris.language.core.DeviceContext` and :func:`~iris.language.core.translate`, the one routine that
  maps a pointer to another rank's heap (upstream's ``iris.device`` / ``iris.mem.triton``);
* :mod:`.gluon`: :class:`~iris.language.gluon.IrisDeviceCtx`, the same operations for Gluon kernels;
* :mod:`.tiles` and :mod:`.tile_collectives`: upstream's tile layer (``iris.Tile``, ``make_tensor_view``) and the
  collectives on tiles that ``DeviceContext`` offers;
* :mod:`.sync` (flags between ranks, as the collectives use them) and :mod:`.flags` (per-tile flags, as the
  lessons use them);
* :mod:`.tracing` and :mod:`.trace_events`: device-side event records (``DeviceContext.initialize(...,
  tracing=True)``); the host side is :mod:`iris.instruments.tracing`;
* :mod:`.hints` and :mod:`.warp_width`: GPU compile hints, and Gluon layouts written for AMD's 64-wide warps
  compiled for NVIDIA's 32-wide ones.

Imports :mod:`iris.base`, :mod:`iris.heap` (the unmapped-peer base) and :mod:`iris.interpret` (its debug checks).

Examples
--------
>>> import iris
>>> iris.language.core.DeviceContext is iris.DeviceContext
True
"""
