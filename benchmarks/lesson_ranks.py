"""One rank per GPU under torchrun, as the lessons' benchmarks (and bench_view_check.py) start: this process's GPU,
the NCCL process group on it (the torch + NCCL baselines), and an iris context on the CUDA backend.

Examples
--------
>>> ctx = gpu_rank("1GiB")         # in a program run by torchrun --nproc_per_node=2   # doctest: +SKIP
>>> ctx.num_ranks                                                                       # doctest: +SKIP
2
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

import iris


def gpu_rank(heap_size: str):
    """This rank's :class:`iris.Iris` with a symmetric heap of ``heap_size``, on GPU ``LOCAL_RANK``, after the
    NCCL process group is up (``NCCL_NVLS_ENABLE`` must be set before: the programs set it first)."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    return iris.iris(heap_size, backend="cuda")
