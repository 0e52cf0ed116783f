"""Code that runs inside each rank for tests/test_named_collectives.py: a training step of DDP, FSDP2 and tensor
parallelism on the ``iris`` backend of a torchrun-style program, its collectives named by
:func:`iris.distributed.name_collectives`, recorded by the traffic recorder and by tracing.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist
import torch.nn as nn

import iris

from .rank_cases_distributed import TinyTransformer


def _model(kind: str, named: bool):
    from torch.distributed.device_mesh import DeviceMesh

    torch.manual_seed(0)
    model = TinyTransformer()
    if kind == "ddp":
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)  # two buckets
    elif kind == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        mesh = DeviceMesh.from_group(dist.group.WORLD, "cpu")
        fully_shard(model.block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    else:
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        mesh = DeviceMesh.from_group(dist.group.WORLD, "cpu")
        parallelize_module(model, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    return iris.distributed.name_collectives(model) if named else model


def _steps(kind: str, named: bool, record: int = 0):
    """Three SGD steps (the last ``record`` of them recorded and traced); the losses and the recorder."""
    model = _model(kind, named)
    ctx = iris.distributed.context()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(1 + (0 if kind == "tp" else dist.get_rank()))  # TP: one batch for all
    losses, recorder = [], iris.traffic.record(ctx)
    for step in range(3):
        tokens, targets = (torch.randint(0, 32, (4, 8), generator=data) for _ in range(2))
        if step == 3 - record:
            ctx.tracing.enable(max_events=1000)
            recorder.start()
        loss = nn.functional.cross_entropy(model(tokens).reshape(-1, 32), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    recorder.stop()
    return losses, recorder, model


def named_steps() -> dict:
    """Per kind: the recorded step's operations (label, bytes in per rank, what they carry, what crossed, what was
    needed), the traced step's operation spans, the parameters' bytes; for DDP the losses with and without names."""
    dist.init_process_group("iris", timeout=datetime.timedelta(seconds=120))
    ctx = iris.distributed.context()
    found = {}
    for kind in ("ddp", "fsdp2", "tp"):
        losses, recorder, model = _steps(kind, named=True, record=1)
        operations = recorder.per_operation()  # collective
        traced = [e for e in ctx.tracing.trace()["traceEvents"] if e.get("cat") == "iris.operation"]
        found[kind] = {
            "losses": losses,
            "operations": [{"label": e.label, "nbytes": e.operation.nbytes, "detail": e.operation.detail,
                            "ranks": list(e.operation.ranks), "kernel": e.matrix.kernel,
                            "crossing": e.matrix.crossing().tolist(), "needed": e.matrix.needed()}
                           for e in operations],
            "text": operations.text(),
            "traced": [(e["name"], e["args"]["payload_size"], e["tid"]) for e in traced],
            "parameters": {name: p.numel() * p.element_size() for name, p in
                           (model.module if kind == "ddp" else model).named_parameters()},
        }
    found["ddp"]["unnamed_losses"] = _steps("ddp", named=False)[0]
    dist.destroy_process_group()
    return found
