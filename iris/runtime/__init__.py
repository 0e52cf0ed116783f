"""The host API: a rank's context and what it makes.

* :mod:`.context`: :class:`~iris.runtime.context.Iris` (``iris.iris(heap_size)``): the heap, ``as_remote``,
  barriers, broadcast, ``ctx.ccl``, ``ctx.ops``, ``ctx.tracing``, the race checker;
* :mod:`.gluon_context`: :class:`~iris.runtime.gluon_context.IrisGluon`, the same context with upstream's Gluon
  host methods;
* :mod:`.tensor_creation`: ``zeros``, ``ones``, ``full``, ``rand``... on the heap, with upstream's size forms;
* :mod:`.heap_choice`: which allocator hands out a heap (chosen here, above the heaps);
* :mod:`.symmetric_memory`: per-allocation address tables (``ctx.allocate_symmetric``, ``SymmetricAddressMap``) that
  the device API translates with, and :mod:`.torch_symm_mem`: torch's symmetric memory as memory for it (GPUs);
* :mod:`.timing`: ``iris.do_bench``.

The context sits above the library and the instruments, since it offers them (``ctx.ccl``, ``ctx.ops``,
``ctx.tracing``); :mod:`iris.bench` and :mod:`iris.perf`, which run contexts, sit above it.

Examples
--------
>>> import iris
>>> iris.runtime.context.Iris is iris.Iris
True
"""
