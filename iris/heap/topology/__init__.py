"""Who reaches whom: the topology of a run's ranks (hosts, GPUs, links, fabric domains), with upstream Iris's names
(``InterconnectLevel``, ``TopologyMap``, ...).

``levels``: the enums; ``map``: the map and its records; ``host``: :func:`this_host`. The backends fill records in
(GPU detection, CUDA driver and NVML, is :mod:`iris.heap.cuda.topology`); :mod:`iris.heap.discover`, above them,
is the collective that builds the map (and upstream's ``TopologyDiscovery``). ``ctx.topology`` is a context's map.

Examples
--------
>>> import iris
>>> ctx = iris.iris("16MiB")                           # doctest: +SKIP
>>> ctx.topology.domains(), ctx.topology.hosts         # doctest: +SKIP
([[0, 1]], ['node-a', 'node-a'])
>>> print(ctx.topology.headline())                     # doctest: +SKIP
2 ranks on 1 host (node-a: ranks 0-1); within a host: NVSWITCH; no fabric domain
"""

from .host import HOST_VARIABLE, this_host
from .levels import InterconnectLevel, IntraNodeLinkType
from .map import FabricInfo, GPUInfo, NodeInfo, RankRecord, TopologyMap

__all__ = [
    "HOST_VARIABLE", "FabricInfo", "GPUInfo", "InterconnectLevel", "IntraNodeLinkType", "NodeInfo", "RankRecord",
    "TopologyMap", "this_host",
]
