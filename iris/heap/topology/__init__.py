"""Who reaches whom: the topology of a run's ranks (hosts, GPUs, links, fabric domains), upstream Iris's
``iris.host.distributed.topology`` with its names (``InterconnectLevel``, ``TopologyMap``, ...).

``levels``: the enums; ``map``: the map and its records; ``discover``: the collective that builds it and
:func:`this_host`. GPU detection (CUDA driver, NVML) is the CUDA backend's: :mod:`iris.heap.cuda.topology`.
``ctx.topology`` is the map of a context.

Examples
--------
>>> import iris
>>> ctx = iris.iris("16MiB")                           # doctest: +SKIP
>>> ctx.topology.domains(), ctx.topology.hosts         # doctest: +SKIP
([[0, 1]], ['node-a', 'node-a'])
>>> print(ctx.topology.headline())                     # doctest: +SKIP
2 ranks on 1 host (node-a: ranks 0-1); within a host: NVSWITCH; no fabric domain
"""

from .discover import HOST_VARIABLE, TopologyDiscovery, discover, this_host
from .levels import InterconnectLevel, IntraNodeLinkType
from .map import FabricInfo, GPUInfo, NodeInfo, RankRecord, TopologyMap

__all__ = [
    "HOST_VARIABLE", "FabricInfo", "GPUInfo", "InterconnectLevel", "IntraNodeLinkType", "NodeInfo", "RankRecord",
    "TopologyDiscovery", "TopologyMap", "discover", "this_host",
]
