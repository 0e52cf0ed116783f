"""Traffic from device tracing (the GPU path): bytes per (rank, target rank, kind) from what the events record.

Each event of an iris operation records the issuing rank (``pid``), the rank it concerns (``target_rank``)
and its payload (``payload_size``: element size times the lanes not masked off). So this counts **only what
traced kernels recorded**: kernels whose device context is initialised with ``tracing=True``
(``DeviceContext.initialize(context, rank, world, tracing=True)``, ``IrisDeviceCtx.initialize(context,
tracing=True)``), through the context's methods, while ``ctx.tracing`` is enabled. A plain ``tl.load`` on a
pointer from ``ctx.as_remote`` records nothing, and events dropped because the buffers were full are missing.

Each operation is counted at the rank its event names, as the one access that crosses ranks:

========================  ========  ===================================================================
event                     kind      counted at
========================  ========  ===================================================================
``load``, ``get``         load      the rank read (a get's store into this rank's buffer is not recorded)
``store``, ``put``        store     the rank written (a put's load of this rank's buffer is not recorded)
``copy``                  store     ``to_rank`` (the event records the destination only)
``atomic_*``              atomic    the rank updated, per lane performed (a failed CAS included)
========================  ========  ===================================================================

So the CPU's exact count (:mod:`.recorder`) may hold more bytes on the diagonal (a rank's own heap) than the
trace's; what crosses ranks is the same. Other events (a kernel's own ``compute``, ``wait``... phases) move
nothing here. The trace does not tell launches apart: everything is one launch, :data:`TRACED_KERNELS`.

Examples
--------
>>> events = [{"name": "put", "ph": "X", "pid": 0, "args": {"target_rank": 1, "payload_size": 64}}]
>>> int(traced_launches(events, 2)[0].moved("store", 1))
64
"""

from __future__ import annotations

from .launch import LaunchTraffic

TRACED_KERNELS = "traced kernels (all launches)"
KIND_OF_EVENT = {"load": "load", "get": "load", "store": "store", "put": "store", "copy": "store"}


def traced_launches(events: list[dict], world: int) -> list[LaunchTraffic]:
    """One :class:`LaunchTraffic` per issuing rank (all of a rank's traced launches as one) from trace events
    (Chrome trace dicts as ``ctx.tracing.trace()`` / ``export`` write them, one rank's or merged)."""
    per_rank = [LaunchTraffic.empty(TRACED_KERNELS, rank, world) for rank in range(world)]
    for event in events:
        if event.get("ph") not in ("X", "i"):
            continue  # metadata and flow arrows
        name = event["name"]
        kind = "atomic" if name.startswith("atomic_") else KIND_OF_EVENT.get(name)
        if kind is None:
            continue
        rank, args = event["pid"], event["args"]
        if not (0 <= rank < world and 0 <= args["target_rank"] < world):
            raise ValueError(f"trace event {name!r} of rank {rank} targets rank {args['target_rank']}, outside a "
                             f"world of {world}: pass the world size the trace was recorded with")
        per_rank[rank].add(kind, args["target_rank"], int(args["payload_size"]),
                           op=name if kind == "atomic" else None)
    return per_rank
