"""The topology map (iris.heap.topology): hand-made records answering every question, discovery on real CPU ranks
simulating two hosts (IRIS_HOST), and the workbench's view of it."""

from __future__ import annotations

import pytest

from iris.heap.cuda.topology import normalize_pci_bus_id
from iris.heap.discover import TopologyDiscovery
from iris.heap.topology import (
    FabricInfo,
    GPUInfo,
    InterconnectLevel,
    IntraNodeLinkType,
    RankRecord,
    TopologyMap,
    this_host,
)

from .multirank import run_ranks

CASES = "tests.rank_cases_topology"
pytestmark = pytest.mark.usefixtures("no_heap_files_left_behind")
L = IntraNodeLinkType
NVL, PCI = L.NVLINK.value, L.PCIE_HOST_BRIDGE.value


def _gpu(rank, host, gpu_id, fabric=None):
    return GPUInfo(global_rank=rank, local_rank=-1, hostname=host, gpu_id=gpu_id,
                   pci_bus_id=f"0000:{0x19 + gpu_id:02x}:00.0", device_name="H100", total_memory_mb=81559,
                   numa_node=0, vendor="nvidia", uuid=f"GPU-{host}-{gpu_id}", fabric_info=fabric or FabricInfo())


def _two_hosts(fabric_b: FabricInfo | None = None) -> TopologyMap:
    """host-a: ranks 0-1 on GPUs 0 and 1 over NVLink; host-b: ranks 2-3 on GPUs 0 and 1 over PCIe (host
    bridge), with ``fabric_b`` on rank 3's GPU; host-a's GPUs in fabric domain aa:1."""
    fabric_a = FabricInfo("aa", 1)
    nvlink = dict(link_types=[[-1, NVL], [NVL, -1]], p2p_access=[[True, True], [True, True]])
    pcie = dict(link_types=[[-1, PCI], [PCI, -1]], p2p_access=[[True, False], [False, True]])
    return TopologyMap.from_records([
        RankRecord(_gpu(0, "host-a", 0, fabric_a), **nvlink, has_infiniband=True, ib_devices=["mlx5_0"]),
        RankRecord(_gpu(1, "host-a", 1, fabric_a), **nvlink, has_infiniband=True, ib_devices=["mlx5_0"]),
        RankRecord(_gpu(2, "host-b", 0), **pcie, notes=["fabric: not supported on H100 (NVML: Not Supported)"]),
        RankRecord(_gpu(3, "host-b", 1, fabric_b), **pcie),
    ])


def test_map_of_hand_made_records_answers_every_question():
    topo = _two_hosts()
    assert (topo.world_size, topo.num_nodes, topo.hosts) == (4, 2, ["host-a", "host-a", "host-b", "host-b"])
    assert [topo.gpu_info[r].local_rank for r in range(4)] == [0, 1, 0, 1]
    assert topo.domains() == [[0, 1], [2, 3]]
    assert [[topo.can_map(a, b) for b in range(4)] for a in range(4)] == [
        [True, True, False, False], [True, True, False, False], [False, False, True, True], [False, False, True, True]]
    assert [topo.link(0, b) for b in range(4)] == [L.SELF, L.NVLINK, L.NETWORK, L.NETWORK]
    assert topo.link(2, 3) == topo.link(3, 2) == L.PCIE_HOST_BRIDGE
    assert topo.get_interconnect_level(0, 1) == InterconnectLevel.INTRA_NODE
    assert topo.get_interconnect_level(1, 2) == InterconnectLevel.INTER_NODE_RDMA
    assert topo.get_node_peers(0) == {1} and topo.get_rdma_peers(0) == {2, 3}
    assert topo.get_fabric_domain_peers(0) == {1} and topo.get_fabric_domain_peers(2) == set()
    assert topo.get_ranks_for_node("host-b") == [2, 3] and topo.get_ranks_for_node("host-z") == []
    assert topo.get_ranks_for_fabric_domain("aa:1") == [0, 1] and topo.get_ranks_for_fabric_domain("zz:0") == []
    assert topo.nodes["host-a"].can_p2p_access(0, 1) and not topo.nodes["host-b"].can_p2p_access(0, 1)
    assert topo.nodes["host-a"].has_infiniband and topo.nodes["host-a"].num_gpus == 2
    assert topo.explain(0, 1) == "rank 0 maps rank 1's heap: both are on host-a, linked by NVLink (GPU 0 to GPU 1)."
    assert topo.explain(3, 0) == (
        "rank 3 (host-b) cannot address rank 0's heap (host-a): they reach each other only over the network "
        "(torch.distributed); ranks 2-3 share host-b and ranks 0-1 share host-a.")
    assert topo.explain(2, 2) == "rank 2 (host-b) addresses its own heap."
    headline = topo.headline()
    for words in ("4 ranks on 2 hosts (host-a: ranks 0-1, host-b: ranks 2-3)", "NVLINK", "PCIE_HOST_BRIDGE",
                  "fabric domains: 1", "fabric: not supported on H100"):
        assert words in headline
    assert "host host-a: 2 GPUs, ranks 0-1, InfiniBand: mlx5_0, fabric aa:1" in topo.summary()
    with pytest.raises(ValueError, match="rank 7 is not in this topology of 4 ranks"):
        topo.link(0, 7)


def test_fabric_domain_across_hosts_is_the_rack_level():
    topo = _two_hosts(fabric_b=FabricInfo("aa", 1))  # rank 3's GPU joins host-a's fabric domain
    assert topo.get_interconnect_level(0, 3) == InterconnectLevel.INTRA_RACK_FABRIC
    assert topo.get_interconnect_level(0, 2) == InterconnectLevel.INTER_NODE_RDMA
    assert topo.link(0, 3) == L.NVSWITCH and topo.link(0, 2) == L.NETWORK
    assert not topo.can_map(0, 3)  # heaps are mapped within a host only, for now
    assert topo.get_fabric_domain_peers(3) == {0, 1} and topo.get_rdma_peers(3) == set()  # 2: node peer
    assert topo.fabric_domains == {"aa:1": ["host-a", "host-b"]}
    assert "they share fabric domain aa:1 (NVLink)" in topo.explain(0, 3)


def test_ranks_sharing_a_gpu_and_unmeasured_links():
    shared = [RankRecord(_gpu(r, "h", 0)) for r in range(2)] + [RankRecord(_gpu(2, "h", 1))]
    topo = TopologyMap.from_records(shared)
    assert topo.link(0, 1) == L.SELF and topo.nodes["h"].num_gpus == 2
    assert topo.link(0, 2) == L.UNKNOWN  # no link matrix was measured (NVML missing)
    assert "a link that could not be detected" in topo.explain(0, 2)
    with pytest.raises(ValueError, match="records must be in rank order"):
        TopologyMap.from_records(list(reversed(shared)))


def test_records_survive_the_exchange_and_pci_ids_normalise():
    record = RankRecord(_gpu(0, "h", 0, FabricInfo("ab", 2)), link_types=[[-1]], notes=["n"])
    assert RankRecord.from_dict(record.to_dict()) == record
    assert normalize_pci_bus_id("00000000:1A:00.0") == "0000:1a:00.0"


def test_discovery_on_cpu_ranks_simulating_two_hosts():
    results = run_ranks(4, f"{CASES}:topology_of_context", rank_env=lambda r: {"IRIS_HOST": "host-" + "ab"[r // 2]})
    first = results[0]
    assert all(r["summary"] == first["summary"] for r in results)  # every rank built the same map
    assert first["is_upstream_map"] and first["vendor"] == "cpu"
    assert first["hosts"] == ["host-a", "host-a", "host-b", "host-b"]
    assert first["domains"] == [[0, 1], [2, 3]] and first["num_nodes"] == 2
    assert first["can_map"][0] == [True, True, False, False]
    assert first["links"][0] == ["SELF", "SHARED_MEMORY", "NETWORK", "NETWORK"]
    assert first["levels"][1] == ["INTRA_NODE", "INTRA_NODE", "INTER_NODE_RDMA", "INTER_NODE_RDMA"]
    assert first["explain_far"].startswith("rank 0 (host-a) cannot address rank 3's heap (host-b)")
    assert "ranks 0-1 share host-a and ranks 2-3 share host-b" in first["explain_far"]
    assert first["explain_near"] == "rank 0 maps rank 1's heap: both are on host-a, linked by shared memory."
    assert first["headline"].startswith("4 ranks on 2 hosts (host-a: ranks 0-1, host-b: ranks 2-3)")


def test_host_comes_from_iris_host_and_an_empty_one_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("IRIS_HOST", "host-z")
    assert this_host() == "host-z"
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("IRIS_HOST", " ")
    with pytest.raises(ValueError, match="IRIS_HOST is set but empty in rank 5's environment"):
        this_host()


def test_discovery_needs_discover_first():
    discovery = TopologyDiscovery.__new__(TopologyDiscovery)  # the plan's check, without a process group
    discovery.rank, discovery._topology = 0, None
    with pytest.raises(RuntimeError, match="call discover"):
        discovery.get_communication_groups()


# -- the workbench's view (workbench.topology() on a running cluster: tests/test_hosts.py) ------------------

def test_view_static_form_shows_the_matrix_hosts_legend_and_summary():
    import html

    from workbench.widgets.static import WIDGET_VIEW
    from workbench.widgets.topology_view import TopologyView

    topo = _two_hosts()
    view = TopologyView(topo)
    bundle = view._repr_mimebundle_()
    assert bundle[WIDGET_VIEW]["model_id"] == view.model_id  # the widget, and beside it its static form
    assert bundle["text/plain"] == f"TopologyView: {topo.headline()}"
    page = bundle["text/html"]
    assert page.count("<svg") == 1 and page.count("<rect") == 16 + 2  # 4 x 4 cells, 2 hosts outlined
    for words in ("rank 0 · host-a", "rank 3 · host-b", "NV = NVLINK", "PHB = PCIE_HOST_BRIDGE", "NET = NETWORK",
                  "self = SELF", html.escape(topo.explain(3, 0)), "host host-b: 2 GPUs, ranks 2-3"):
        assert words in page, words

