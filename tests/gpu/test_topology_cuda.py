"""The topology map on the CUDA backend: each rank's GPU (PCI bus id, UUID), the link and peer access between
the host's GPUs (CUDA driver, NVML), the fabric domain or why there is none; hosts simulated with IRIS_HOST.

Run on a GPU machine by tests/gpu/run_gpu_checks.sh (or alone: python3 -m pytest tests/gpu/test_topology_cuda.py).
"""

from __future__ import annotations

import socket

import pytest
import torch

from tests.gpu import WORLD
from tests.multirank import run_ranks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CASES = "tests.rank_cases_topology"
CUDA = {"IRIS_TEST_BACKEND": "cuda", "IRIS_BACKEND": "cuda"}
GPU_LINKS = {"NVLINK", "NVSWITCH", "PCIE_SWITCH", "PCIE_HOST_BRIDGE", "PCIE_NUMA", "PCIE_SYSTEM"}


def _same_map(results):
    assert all(r["summary"] == results[0]["summary"] for r in results)  # every rank built the same map
    return results[0]


def test_one_host_gpus_links_and_fabric():
    results = run_ranks(WORLD, f"{CASES}:discovered_topology", env=CUDA)
    first = _same_map(results)
    print(first["summary"])
    gpus = torch.cuda.device_count()
    assert first["vendor"] == "nvidia" and first["hosts"] == [socket.gethostname()] * WORLD
    assert first["domains"] == [list(range(WORLD))] and all(all(row) for row in first["can_map"])
    for r in results:
        mine = r["mine"]
        assert mine["pci_bus_id"] and mine["uuid"].startswith("GPU-") and mine["total_memory_mb"] > 0, mine
        assert mine["gpu_id"] == r["mine"]["global_rank"] % gpus
    links = first["link_types"]
    assert links is not None and len(links) == gpus, first["notes"]  # NVML answered for every pair
    for a in range(WORLD):
        for b in range(WORLD):
            expected = {"SELF"} if a % gpus == b % gpus else GPU_LINKS
            assert first["links"][a][b] in expected, (a, b, first["links"][a][b])
    assert all(all(row) for row in first["p2p_access"])  # the IPC heap needs peer access between the GPUs
    # a fabric domain, or the reason there is none (H100/H200 boards without a multi-host NVLink fabric)
    assert first["fabric_domains"] or any(n.startswith("fabric: ") for n in first["notes"]), first["notes"]


def test_simulated_hosts_reach_each_other_over_the_network_only():
    results = run_ranks(2, f"{CASES}:discovered_topology", env=CUDA, rank_env=lambda r: {"IRIS_HOST": f"gpu-host-{r}"})
    first = _same_map(results)
    assert first["hosts"] == ["gpu-host-0", "gpu-host-1"] and first["domains"] == [[0], [1]]
    assert first["can_map"] == [[True, False], [False, True]]
    expected = "INTRA_RACK_FABRIC" if first["fabric_domains"] else "INTER_NODE_RDMA"
    assert first["levels"][0][1] == expected
    assert first["explain_far"].startswith("rank 0 (gpu-host-0) cannot address rank 1's heap (gpu-host-1)")


def test_context_has_the_map():
    first = _same_map(run_ranks(WORLD, f"{CASES}:topology_of_context", env=CUDA))
    assert first["is_upstream_map"] and first["vendor"] == "nvidia" and first["world_size"] == WORLD
