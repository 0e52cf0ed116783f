"""Code that runs inside each rank for tests/test_topology.py (one process per rank, torchrun environment).

Hosts are simulated on this machine with ``IRIS_HOST`` (iris.heap.topology.this_host), which the test sets per rank
(tests/multirank.py's ``rank_env``).
"""

from __future__ import annotations

import os

BACKEND = os.environ.get("IRIS_TEST_BACKEND", "cpu")  # tests/gpu runs these same cases with "cuda"


def topology_of_context():
    """The context's map, as this rank sees it."""
    import iris

    ctx = iris.iris("1MiB", backend=BACKEND)
    result = _facts(ctx.topology, ctx.get_rank())
    ctx.barrier()
    return result


def discovered_topology():
    """``iris.heap.discover.discover`` over the host group alone (no heap), as this rank sees it; rank 0 prints the
    summary."""
    from iris.base.distributed import HostGroup
    from iris.heap.discover import discover

    group = HostGroup.from_environment()
    topo = discover(group, BACKEND)
    if group.rank == 0:
        print(topo.summary(), flush=True)
    result = _facts(topo, group.rank)
    group.barrier()
    return result


def _facts(topo, rank: int) -> dict:
    from iris.host.distributed.topology import TopologyMap

    n = topo.world_size
    mine = topo.gpu_info[rank]
    node = topo.nodes[mine.hostname]
    return {
        "is_upstream_map": isinstance(topo, TopologyMap),
        "hosts": topo.hosts, "domains": topo.domains(), "world_size": n, "num_nodes": topo.num_nodes,
        "can_map": [[topo.can_map(a, b) for b in range(n)] for a in range(n)],
        "links": [[str(topo.link(a, b)) for b in range(n)] for a in range(n)],
        "levels": [[str(topo.get_interconnect_level(a, b)) for b in range(n)] for a in range(n)],
        "explain_far": topo.explain(0, n - 1), "explain_near": topo.explain(0, 1 % n),
        "headline": topo.headline(), "summary": topo.summary(),
        "vendor": mine.vendor, "mine": mine.to_dict(), "notes": topo.notes, "fabric_domains": topo.fabric_domains,
        "link_types": node.link_types, "p2p_access": node.p2p_access,
    }
