"""torch.distributed's reduction operators on our kernels: which run as our sum, and how the others are computed.

Our reduction kernels sum float32, float16 and bfloat16 (:mod:`iris.ccl`). On them run ``SUM``, ``AVG`` (the
sum, divided by the group's size afterwards) and ``PREMUL_SUM`` (each rank's input scaled by the factor first,
as NCCL's). Every other operator, and every sum of another dtype (integers, float64, bool), gathers the ranks'
inputs with our all_gather kernel and reduces them on each rank in rank order with torch (``PRODUCT``, ``MIN``,
``MAX``, ``BAND``, ``BOR``, ``BXOR``): the same numbers as gloo's, for ``world`` times the traffic of a sum.
``AVG`` of an integer tensor is refused, as gloo refuses it.

Examples
--------
>>> plan(dist.ReduceOp.MAX, torch.float32)                  # doctest: +SKIP
Plan(kind='gathered', name='MAX', factor=None)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

SUMMED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
RedOp = dist.ReduceOp.RedOpType


@dataclass(frozen=True)
class Plan:
    """How one reduction runs: ``kind`` is ``"summed"`` (our sum kernels) or ``"gathered"`` (all_gather, then torch)."""

    kind: str
    name: str
    factor: object = None  # PREMUL_SUM's factor (a float or a one-element tensor)


def op_type(op) -> RedOp:
    """The RedOpType of what torch passes (a ``ReduceOp`` object in options, or a RedOpType)."""
    return op.op if hasattr(op, "op") else RedOp(int(op))


def plan(op, dtype: torch.dtype, rank: int) -> Plan:
    """How ``op`` over ``dtype`` tensors runs here; a ValueError for what cannot be computed."""
    kind = op_type(op)
    name = kind.name
    if kind == RedOp.AVG and not (dtype.is_floating_point or dtype.is_complex):
        raise ValueError(f"rank {rank}: ReduceOp.AVG of a {dtype} tensor: an average of integers is not one of them; "
                         "use ReduceOp.SUM and divide (as gloo asks too)")
    if kind in (RedOp.SUM, RedOp.AVG, RedOp.PREMUL_SUM) and dtype in SUMMED_DTYPES:
        return Plan("summed", name, op.factor if kind == RedOp.PREMUL_SUM else None)
    if kind == RedOp.PREMUL_SUM:
        raise ValueError(f"rank {rank}: ReduceOp.PREMUL_SUM of a {dtype} tensor: it scales float32, float16 or "
                         "bfloat16 tensors only (as NCCL's)")
    if kind not in GATHERED:
        raise ValueError(f"rank {rank}: reduction {name} is not one torch.distributed defines for a backend")
    if dtype.is_complex and kind not in (RedOp.SUM, RedOp.AVG):
        raise ValueError(f"rank {rank}: {name} of a complex tensor has no order; use ReduceOp.SUM")
    if kind in (RedOp.BAND, RedOp.BOR, RedOp.BXOR) and dtype.is_floating_point:
        raise ValueError(f"rank {rank}: ReduceOp.{name} of a {dtype} tensor: bitwise reductions take integer or "
                         "bool tensors")
    return Plan("gathered", name)


def premultiplied(tensor: torch.Tensor, plan_: Plan) -> torch.Tensor:
    """``tensor`` scaled by PREMUL_SUM's factor in place (other plans: unchanged)."""
    if plan_.factor is not None:
        tensor.mul_(plan_.factor)
    return tensor


def finish(tensor: torch.Tensor, plan_: Plan, world: int) -> torch.Tensor:
    """A summed result made the operator's: AVG divides by the group's size, in place."""
    if plan_.name == "AVG":
        tensor.div_(world)
    return tensor


def reduce_rows(rows: torch.Tensor, plan_: Plan) -> torch.Tensor:
    """The operator over dim 0 of ``rows`` (one row per rank, in rank order), computed with torch."""
    if rows.dtype == torch.bool:
        return reduce_rows(rows.to(torch.uint8), plan_).bool()
    return GATHERED[RedOp.__members__[plan_.name]](rows)


def _fold(fn):
    def reduce(rows):
        out = rows[0].clone()
        for row in rows[1:]:
            out = fn(out, row)
        return out

    return reduce


GATHERED = {
    RedOp.SUM: _fold(torch.add),          # in rank order, as the rows arrive
    RedOp.AVG: lambda rows: _fold(torch.add)(rows) / rows.shape[0],
    RedOp.PRODUCT: _fold(torch.mul),
    RedOp.MIN: _fold(torch.minimum),
    RedOp.MAX: _fold(torch.maximum),
    RedOp.BAND: _fold(torch.bitwise_and),
    RedOp.BOR: _fold(torch.bitwise_or),
    RedOp.BXOR: _fold(torch.bitwise_xor),
}
