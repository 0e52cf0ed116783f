"""Code that runs inside each rank for tests/test_lesson_steps.py: lesson 11's all_to_all_single layer, taken from
the notebook as benchmarks/lesson11_steps.py takes it, on CPU ranks (gloo)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from benchmarks.lesson11_steps import LESSON, lesson_baseline
from benchmarks.lesson_modules import lesson_function


def lesson11_baseline(tokens: int, hidden: int, e_local: int, top_k: int) -> dict:
    """The baseline's output on this rank's tokens against the MoE layer summed in plain torch."""
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    layer_weights = lesson_function(LESSON, "layer_weights", {"torch": torch})
    route = lesson_function(LESSON, "route", {"torch": torch})
    gate, all_experts = layer_weights(hidden, e_local * world)
    x = torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(100 + rank))
    ids, weights = route(x, gate, top_k)
    got = lesson_baseline(all_experts[rank * e_local:(rank + 1) * e_local], world, dist.group.WORLD, top_k)(
        x, ids, weights)
    want = sum(weights[:, j, None] * torch.einsum("th,thk->tk", x, all_experts[ids[:, j].long()])
               for j in range(top_k))
    dist.destroy_process_group()
    return {"error": (got - want).abs().max().item(), "rows_sent": int((ids // e_local != rank).sum())}
