"""What the widgets ask each rank: run inside the engines, sent there by reference like :mod:`workbench.engine`.

Every function answers with a plain dict (numpy arrays at most a few hundred kB), never a tensor: the
tensors stay on the ranks. A rank that lacks what was asked answers ``status`` ``"missing"``,
``"not-tensor"`` or ``"error"`` with a ``message`` instead of raising, so a view can name every rank
that lacks it at once.

Examples
--------
>>> wb.apply(probes.snapshot, "x", "view-1", 256, 0)                  # doctest: +SKIP
[{'status': 'ok', 'rank': 0, 'shape': (4096, 4096), 'dtype': 'float32', 'block': (16, 16), ...}, ...]
>>> wb.apply(probes.heap_map)[0]["allocations"][0]["names"]            # doctest: +SKIP
['x']
"""

from __future__ import annotations

from . import reduce


def _namespace() -> dict:
    from IPython import get_ipython

    return get_ipython().user_ns


def lookup(expression: str) -> dict:
    """``{"status": "ok", "value": ...}``, or ``"missing"``/``"error"`` with a message, for ``expression``.

    A plain name is looked up (so a missing variable is told apart from a failing expression); anything
    else, like ``"x[0]"`` or ``"out.view(64, 64)"``, is evaluated in the rank namespace.
    """
    namespace = _namespace()
    if expression.isidentifier():
        if expression not in namespace:
            return {"status": "missing", "message": f"no variable {expression!r}"}
        return {"status": "ok", "value": namespace[expression]}
    try:
        return {"status": "ok", "value": eval(expression, namespace)}
    except Exception as exc:
        return {"status": "error", "message": f"{type(exc).__name__}: {exc}"}


def _tensor(expression: str):
    """(None, the tensor) for ``expression``, or (a failure dict, None)."""
    import torch

    found = lookup(expression)
    if found["status"] != "ok":
        return found, None
    value = found["value"]
    if not isinstance(value, torch.Tensor):
        return {"status": "not-tensor", "message": f"a {type(value).__name__}, not a tensor"}, None
    if value.numel() == 0:
        return {"status": "error", "message": f"an empty tensor of shape {tuple(value.shape)}"}, None
    return None, value


def snapshot(expression: str, token: str | None = None, max_side: int = 256, index: int = 0) -> dict:
    """This rank's reduced view of ``expression`` (see :func:`reduce.summarize_tensor`) with ``status``
    ``"ok"``, or a failure; ``token`` names the view whose previous snapshot diff mode compares with."""
    rank = _namespace().get("rank")
    failure, t = _tensor(expression)
    if failure is not None:
        return {**failure, "rank": rank}
    try:
        return {"status": "ok", "rank": rank, **reduce.summarize_tensor(t, token, max_side, index)}
    except IndexError as exc:
        return {"status": "error", "rank": rank, "message": str(exc)}


def remote_snapshot(expression: str, target: int, max_side: int = 256, index: int = 0) -> dict:
    """Rank ``target``'s copy of ``expression`` as *this* rank reaches it through ``ctx.as_remote``.

    Besides the reduced values: ``bases`` (this rank's ``heap_bases`` row), ``address`` (the local
    tensor's ``data_ptr()``), ``offset`` (``address - bases[rank]``), ``translated``
    (``bases[target] + offset``, the device API's translation) and ``remote_address``
    (``ctx.as_remote(t, target).data_ptr()``).
    """
    namespace = _namespace()
    rank = namespace.get("rank")
    failure, t = _tensor(expression)
    if failure is not None:
        return {**failure, "rank": rank}
    ctx = namespace["ctx"]
    try:
        view = ctx.as_remote(t, target)
        allocation = ctx.heap.find(t)
    except ValueError as exc:  # iris's message names the rank and says what to do
        return {"status": "error", "rank": rank, "message": str(exc)}
    bases = [int(b) for b in ctx.get_heap_bases().tolist()]
    offset = t.data_ptr() - bases[rank]
    try:
        reduced = reduce.summarize_tensor(view, None, max_side, index)
    except IndexError as exc:
        return {"status": "error", "rank": rank, "message": str(exc)}
    return {"status": "ok", "rank": rank, **reduced, "bases": bases, "address": t.data_ptr(), "offset": offset,
            "translated": bases[target] + offset, "remote_address": view.data_ptr(),
            "allocation": allocation.offset}


def variable_names(namespace: dict, ctx) -> dict[int, list[str]]:
    """Allocation offset -> the rank namespace's variables holding a tensor that views it, sorted (names
    starting with ``_``, IPython's output history, are left out)."""
    import torch

    names: dict[int, list[str]] = {}
    for name, value in list(namespace.items()):
        if not name.startswith("_") and isinstance(value, torch.Tensor) and ctx.heap.is_symmetric(value):
            names.setdefault(ctx.heap.find(value).offset, []).append(name)
    return {offset: sorted(found) for offset, found in names.items()}


def heap_map() -> dict:
    """This rank's heap: usage, and each live allocation with the variables that refer to it.

    ``allocations`` is a list of dicts ``offset``, ``nbytes``, ``dtype``, ``shape``, ``label`` (the
    ``name=`` given at creation) and ``names``: the variables of :func:`variable_names`.
    """
    namespace = _namespace()
    ctx = namespace["ctx"]
    names = variable_names(namespace, ctx)
    usage = ctx.heap_usage()
    allocations = [
        {"offset": a.offset, "nbytes": a.nbytes, "dtype": str(a.dtype).removeprefix("torch."), "shape": a.shape,
         "label": a.label, "names": names.get(a.offset, [])}
        for a in ctx.heap.allocations()
    ]
    return {"rank": namespace.get("rank"), "size": usage.size, "used": usage.used, "free": usage.free,
            "largest_free": usage.largest_free, "fragmentation": usage.fragmentation, "allocations": allocations}


def start_tracing(max_events: int) -> dict:
    """Make this rank's ``ctx.tracing`` record a fresh capture of up to ``max_events`` events: enabled
    (buffers allocated) when it is not or holds another number of events, else reset."""
    tracing = _namespace()["ctx"].tracing
    if tracing.enabled and tracing.max_events == max_events:
        tracing.reset()
    else:
        tracing.enable(max_events=max_events)
    return {"rank": _namespace().get("rank"), "max_events": tracing.max_events}


def rank_trace() -> dict:
    """This rank's trace (``ctx.tracing.trace()``) with each event's ``location`` named by its allocation's
    ``name=`` label, else after the variables holding it, as the heap inspector shows them;
    ``status`` ``"missing"`` when tracing was never enabled here."""
    namespace = _namespace()
    ctx, rank = namespace["ctx"], namespace.get("rank")
    if not ctx.tracing.enabled:
        return {"status": "missing", "rank": rank,
                "message": "tracing is not enabled: run a cell with %%iris_kernel --trace, or call "
                           "ctx.tracing.enable() before the kernels"}
    names = {offset: ", ".join(found) for offset, found in variable_names(namespace, ctx).items()}
    return {"status": "ok", "rank": rank, "trace": ctx.tracing.trace(unlabelled=names)}


def start_race_check() -> dict:
    """Turn this rank's race checker on (``ctx.start_race_check()``: collective, so every rank is asked)."""
    namespace = _namespace()
    namespace["ctx"].start_race_check()
    return {"rank": namespace.get("rank")}


def take_races() -> dict:
    """This rank's races since the last call (``ctx.races()``), after a host barrier (collective: every rank
    is asked, between cells). The barrier tells the checker what the cell boundary means: every rank finished
    the cell before any starts the next. Allocations without a ``name=`` label are named after the variable
    holding them, as the heap inspector names them. ``status`` ``"off"`` when the checker is off."""
    import dataclasses

    namespace = _namespace()
    ctx, rank = namespace["ctx"], namespace.get("rank")
    if ctx.check != "races":
        return {"status": "off", "rank": rank}
    ctx.barrier()
    names = variable_names(namespace, ctx)
    races = [dataclasses.replace(race, allocation=", ".join(names[race.offset]))
             if race.allocation.startswith("alloc@") and race.offset in names else race for race in ctx.races()]
    return {"status": "ok", "rank": rank, "races": races}


_traffic_recorder = None  # this rank's recorder of the last %%iris_kernel --traffic cell (iris.traffic)


def start_traffic() -> dict:
    """Record this rank's traffic from now on (``iris.traffic.record``), ending a recording still running."""
    global _traffic_recorder
    import iris

    if _traffic_recorder is not None:
        _traffic_recorder.stop()
    _traffic_recorder = iris.traffic.record(_namespace()["ctx"]).start()
    return {"rank": _namespace().get("rank"), "source": _traffic_recorder.source}


def stop_traffic() -> dict:
    """End this rank's recording and answer its launches (``iris.traffic.LaunchTraffic``, numpy inside);
    ``status`` ``"missing"`` when this rank recorded nothing (the cell ran on other ranks)."""
    rank = _namespace().get("rank")
    if _traffic_recorder is None:
        return {"status": "missing", "rank": rank, "launches": [],
                "message": "no traffic recorded: run a cell with %%iris_kernel --traffic"}
    _traffic_recorder.stop()
    return {"status": "ok", "rank": rank, "launches": _traffic_recorder.launches,
            "source": _traffic_recorder.source, "dropped_events": _traffic_recorder.dropped_events}
