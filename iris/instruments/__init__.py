"""The instruments: what a run of kernels did, seen from outside the kernels.

* :mod:`.checking`: the race detector of the CPU backend (``iris.iris(..., check="races")``);
* :mod:`.tracing`: ``ctx.tracing`` on the host (enable, reset, export as a Perfetto trace) and the timeline read
  from a trace; the kernels' side is :mod:`iris.language.tracing`;
* :mod:`.traffic`: the traffic matrix, bytes each rank moved to and from each heap, beside the minimum;
* :mod:`.stepping`: a distributed kernel stepped on CPU ranks, every rank held before each heap access, in an order
  chosen, recorded and replayed (a race of the checker's made to happen);
* :mod:`.operations`: named operations (a collective of a training step, ``all_reduce · DDP bucket 0``), said by the
  code that knows, read by the others at each launch and access: the traffic per operation, a race's operation, the
  stepper's, the timeline's spans.

Usable from a torchrun script: nothing here imports the workbench, ipyparallel or ipywidgets (the workbench draws
what these measure). Imports the layers below (:mod:`iris.base`, :mod:`iris.heap`, :mod:`iris.interpret`,
:mod:`iris.language`). Timing and roofs are a layer higher, in :mod:`iris.perf`, since they run a context.

Examples
--------
>>> import iris
>>> iris.instruments.checking.Race is iris.Race
True
"""
