"""Which GPU each rank runs on, and which ranks share one: a timing taken on a shared GPU measures the sharing.

Examples
--------
>>> shared_groups([("host", "GPU-1"), ("host", "GPU-2"), ("host", "GPU-1")])
[[0, 2]]
"""

from __future__ import annotations

import socket

import torch


def this_gpu(ctx) -> tuple[str, str]:
    """(host name, the GPU's UUID) of this rank's heap device; ``(host, "cpu")`` on the CPU backend."""
    if ctx.backend != "cuda":
        return socket.gethostname(), "cpu"
    return socket.gethostname(), str(torch.cuda.get_device_properties(ctx.get_device()).uuid)


def shared_groups(places: list) -> list[list[int]]:
    """Groups of ranks (two or more) whose places (one per rank, in rank order) are the same GPU."""
    by_place: dict = {}
    for rank, place in enumerate(places):
        by_place.setdefault(tuple(place), []).append(rank)
    return [ranks for ranks in by_place.values() if len(ranks) > 1]


def sharing_message(groups: list[list[int]], what: str) -> str:
    """Why ``what`` is refused on ranks that share GPUs, and what to do instead."""
    listed = "; ".join("ranks " + ", ".join(map(str, g)) for g in groups)
    return (f"{what}: {listed} share one GPU, so each would time the sharing, not the kernel. Start one rank per "
            "GPU (as many ranks as GPUs), or pass allow_shared_gpu=True for a correctness-only run whose times "
            "are marked as not meaningful")
