"""Discovery: every rank reports its host and device, and every rank builds the same :class:`TopologyMap`.

Here, above the heap's backends, because a rank on the CUDA backend asks :mod:`iris.heap.cuda.topology` for its
GPU and links; the map and its records (:mod:`iris.heap.topology`) sit below the backends, which fill them in.
This module is upstream Iris's ``iris.host.distributed.topology``: it holds upstream's names of that module too
(``TopologyDiscovery``, ``TopologyMap``, ``InterconnectLevel``...).

Examples
--------
>>> topo = discover(group, "cpu")    # collective: every rank calls it    # doctest: +SKIP
>>> topo.domains()                                     # doctest: +SKIP
[[0, 1], [2, 3]]
"""

from __future__ import annotations

import os
from typing import Any

from .topology import (
    HOST_VARIABLE,
    FabricInfo,
    GPUInfo,
    InterconnectLevel,
    IntraNodeLinkType,
    NodeInfo,
    RankRecord,
    TopologyMap,
    this_host,
)

INFINIBAND_DIR = "/sys/class/infiniband"


def infiniband_devices() -> list[str]:
    """The InfiniBand/RoCE devices of this host (``/sys/class/infiniband``), [] when none."""
    try:
        return sorted(os.listdir(INFINIBAND_DIR))
    except OSError:
        return []


def local_record(rank: int, backend: str) -> RankRecord:
    """What this rank reports in discovery: its host, its device and its host's links (not collective)."""
    host = this_host()
    if backend == "cpu":
        record = RankRecord(GPUInfo.for_cpu_rank(rank, host))
    elif backend == "cuda":
        from .cuda.topology import local_gpu_record  # backend-specific detection lives there

        record = local_gpu_record(rank, host)
    else:
        raise ValueError(f"rank {rank}: unknown backend {backend!r} for topology discovery: use 'cpu' or 'cuda'")
    ib = infiniband_devices()
    record.has_infiniband, record.ib_devices = bool(ib), ib
    return record


def discover(group, backend: str) -> TopologyMap:
    """The topology of ``group``'s ranks. Collective: every rank calls it and gets the same map.

    Parameters
    ----------
    group : iris.base.distributed.HostGroup
        The ranks (``all_gather_object`` exchanges their records).
    backend : {"cpu", "cuda"}
        On the CPU, ranks are placed by host; on CUDA also by GPU (UUID, PCI bus id, NVLink/PCIe, fabric).

    Examples
    --------
    >>> topo = discover(ctx.group, ctx.backend)          # doctest: +SKIP
    >>> print(topo.explain(0, 1))                        # doctest: +SKIP
    rank 0 maps rank 1's heap: both are on node-a, linked by NVLink through NVSwitch (GPU 0 to GPU 1).
    """
    mine = local_record(group.rank, backend)
    records = [RankRecord.from_dict(d) for d in group.all_gather_object(mine.to_dict())]
    return TopologyMap.from_records(records)


class TopologyDiscovery:
    """Upstream's entry point: ``TopologyDiscovery(ctx).discover()`` gives ``ctx``'s map, then
    :meth:`get_communication_groups` and :meth:`get_heap_distribution_plan` read it.

    Examples
    --------
    >>> discovery = TopologyDiscovery(ctx)             # doctest: +SKIP
    >>> discovery.discover().domains()                 # doctest: +SKIP
    [[0, 1]]
    """

    def __init__(self, iris_ctx=None):
        if iris_ctx is None:
            from ..base.backend import choose_backend
            from ..base.distributed import HostGroup

            self._group, self._backend = HostGroup.from_environment(), choose_backend(None)
        else:
            self._group, self._backend = iris_ctx.group, iris_ctx.backend
        self.rank, self.world_size = self._group.rank, self._group.world_size
        self._topology: TopologyMap | None = None

    @property
    def topology(self) -> TopologyMap | None:
        """The map, or None before :meth:`discover`."""
        return self._topology

    def discover(self) -> TopologyMap:
        """Discover (collective) and keep the map."""
        self._topology = discover(self._group, self._backend)
        return self._topology

    def get_communication_groups(self) -> dict[InterconnectLevel, list[list[int]]]:
        """Per level, the groups of ranks that communicate at it: one per host; one per fabric domain plus each
        host outside any (none without a fabric); the whole world over the network."""
        topo = self._discovered()
        fabric_groups = []
        if topo.fabric_domains:
            in_fabric = {h for hosts in topo.fabric_domains.values() for h in hosts}
            fabric_groups = [topo.get_ranks_for_fabric_domain(k) for k in sorted(topo.fabric_domains)]
            fabric_groups += [sorted(n.ranks) for h, n in sorted(topo.nodes.items()) if h not in in_fabric]
        return {
            InterconnectLevel.INTRA_NODE: [sorted(n.ranks) for _, n in sorted(topo.nodes.items())],
            InterconnectLevel.INTRA_RACK_FABRIC: fabric_groups,
            InterconnectLevel.INTER_NODE_RDMA: [list(range(topo.world_size))],
        }

    def get_heap_distribution_plan(self) -> dict[int, dict[str, Any]]:
        """Per rank, its peers by how their heaps would be reached: ``ipc_peers`` (one host), ``fabric_peers``
        (one fabric domain, other hosts), ``rdma_peers`` (network only), with its host, GPU and fabric domain."""
        topo = self._discovered()
        plan = {}
        for rank, info in topo.gpu_info.items():
            node = topo.get_node_peers(rank)
            plan[rank] = {
                "ipc_peers": sorted(node), "fabric_peers": sorted(topo.get_fabric_domain_peers(rank) - node),
                "rdma_peers": sorted(topo.get_rdma_peers(rank)), "node": info.hostname,
                "local_rank": info.local_rank, "gpu_id": info.gpu_id, "fabric_domain": info.fabric_info.domain_key,
            }
        return plan

    def _discovered(self) -> TopologyMap:
        if self._topology is None:
            raise RuntimeError(f"rank {self.rank}: call discover() (collectively, on every rank) before asking "
                               "for the communication groups or the heap plan")
        return self._topology


__all__ = [
    "HOST_VARIABLE", "FabricInfo", "GPUInfo", "InterconnectLevel", "IntraNodeLinkType", "NodeInfo", "RankRecord",
    "TopologyDiscovery", "TopologyMap", "discover", "this_host",
]
