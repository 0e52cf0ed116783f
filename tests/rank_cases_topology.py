"""Code that runs inside each rank for tests/test_topology.py (one process per rank, torchrun environment).

Hosts are simulated on this machine with ``IRIS_HOST`` (iris.topology.this_host), which the test sets per rank
(tests/multirank.py's ``rank_env``).
"""

from __future__ import annotations

import os

BACKEND = os.environ.get("IRIS_TEST_BACKEND", "cpu")  # tests/gpu runs these same cases with "cuda"


def topology_of_context():
    """The context's map, as this rank sees it."""
    from iris.host.distributed.topology import TopologyMap

    import iris

    ctx = iris.iris("1MiB", backend=BACKEND)
    topo = ctx.topology
    n = ctx.get_num_ranks()
    result = {
        "is_upstream_map": isinstance(topo, TopologyMap),
        "hosts": topo.hosts, "domains": topo.domains(), "world_size": topo.world_size, "num_nodes": topo.num_nodes,
        "can_map": [[topo.can_map(a, b) for b in range(n)] for a in range(n)],
        "links": [[str(topo.link(a, b)) for b in range(n)] for a in range(n)],
        "levels": [[str(topo.get_interconnect_level(a, b)) for b in range(n)] for a in range(n)],
        "explain_far": topo.explain(0, n - 1), "explain_near": topo.explain(0, 1),
        "headline": topo.headline(), "summary": topo.summary(),
        "vendor": topo.gpu_info[ctx.get_rank()].vendor,
    }
    ctx.barrier()
    return result

