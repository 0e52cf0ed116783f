"""Code that runs inside each rank for tests/test_heap_growth.py (one process per rank, torchrun environment)."""

from __future__ import annotations

import os

from iris.base.distributed import HostGroup
from iris.heap.cuda.fd_exchange import share_fds


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def descriptors_reach_the_other_ranks():
    """Each rank shares a memory file holding its rank; every rank reads the others' through the descriptors it got,
    and after closing them has no more descriptors open than before."""
    group = HostGroup.from_environment()
    before = _open_fds()
    fd = os.memfd_create(f"rank{group.rank}")
    os.write(fd, f"rank {group.rank}".encode())
    received = share_fds(group, [fd, fd], peers=range(group.world_size))
    read = {rank: [os.pread(got, 16, 0).decode() for got in fds] for rank, fds in received.items()}
    for fds in received.values():
        for got in fds:
            os.close(got)
    os.close(fd)
    # a rank that asks for nothing still takes part, and gets nothing
    nothing = share_fds(group, [], peers=[])
    group.barrier()
    return {"read": {str(r): texts for r, texts in read.items()}, "nothing": len(nothing),
            "leaked": sorted(_open_fds() - before)}
