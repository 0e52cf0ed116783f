"""Ranks on several hosts, simulated on this machine (``IRIS_HOST`` per rank): heaps mapped per host, collectives
across hosts against torch, and a clear error for whatever addresses a rank on another host.

Two multi-process tests: 4 torchrun-style ranks (2 hosts x 2: our kernels inside each host, gloo between them)
and a real 2-rank workbench cluster started with ``hosts=2`` (2 hosts x 1).
"""

from __future__ import annotations

import pytest

import workbench
from iris.heap.reach import fault_note
from iris.heap.topology import GPUInfo, RankRecord, TopologyMap
from workbench.cluster import Workbench, local_ranks, simulated_hosts
from workbench.magics import _hosts

from .multirank import run_ranks

CASES = "tests.rank_cases_hosts"
pytestmark = pytest.mark.usefixtures("no_heap_files_left_behind")


def dealt_round_robin(rank: int) -> dict:
    """Ranks 0 and 2 on host-a, 1 and 3 on host-b (Slurm's cyclic distribution): every collective across the
    hosts then reorders blocks, and each host's kernels run over a strided group. The workbench test below has
    blocks of consecutive ranks (the default layout), which need no reordering."""
    return {"IRIS_HOST": "host-" + "ab"[rank % 2]}


@pytest.mark.slow
def test_collectives_across_two_hosts_match_torch_and_what_cannot_cross_is_refused():
    results = run_ranks(4, f"{CASES}:collectives_across_hosts", rank_env=dealt_round_robin)
    for rank, result in enumerate(results):
        assert result["checked"] == ["torch.float32", "torch.bfloat16"]
        assert result["domains"] == [[0, 2], [1, 3]]
        assert result["hosts"] == ["host-a", "host-b", "host-a", "host-b"]
        assert result["near_store"]
        far = 1 - rank % 2  # the first rank of the other host
        mine, theirs = "host-" + "ab"[rank % 2], "host-" + "ab"[far]
        names_both = f"rank {rank} ({mine}) cannot address rank {far}'s heap ({theirs})"
        for refused in ("as_remote", "store", "atomic"):
            assert names_both in result[refused], result[refused]
            assert "only over the network (torch.distributed)" in result[refused]
        assert result["store"].startswith("kernel code `_store_kernel` (")
        assert result["atomic"].startswith("kernel code `_atomic_kernel` (")
        assert f"rank {rank}: all_reduce over ranks" in result["spanning_group"]
        assert "spans 2 domains ([0, 2], [1, 3])" in result["spanning_group"]
        assert "matmul_all_reduce runs over every rank" in result["ops"] and "ctx.ccl.all_reduce" in result["ops"]


PUT_TO_THE_OTHER_HOST = """
@triton.jit
def put_far(buf, heap_bases, rank, peer, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    iris.store(buf + offs, offs.to(tl.float32), rank, peer, heap_bases)

buf = ctx.zeros(8)
put_far[(1,)](buf, ctx.get_heap_bases(), rank, 1 - rank, BLOCK=8)
"""


@pytest.mark.slow
def test_workbench_on_two_simulated_hosts_reduces_shows_its_topology_and_refuses_a_cross_host_store():
    wb = workbench.start(n=2, backend="cpu", heap_size="8MiB", hosts=2, progress=False)
    try:
        assert "simulated host host-1" in wb.status().splitlines()[2]
        report = wb.run("inp = ctx.full((8,), float(rank + 1)); out = ctx.zeros(8); ctx.ccl.all_reduce(out, inp)\n"
                        "rows = ctx.zeros(2, 8); ctx.ccl.all_gather(rows, inp.view(1, 8))")
        assert report.ok, report.render()
        assert [t.tolist() for t in wb.pull("out")] == [[3.0] * 8] * 2
        assert [t.tolist() for t in wb.pull("rows")] == [[[1.0] * 8, [2.0] * 8]] * 2
        view = workbench.topology()
        assert view.topology.domains() == [[0], [1]] and view.topology.hosts == ["host-0", "host-1"]
        assert "host-0" in view.summary() and "host-1" in view.summary()
        report = wb.run(PUT_TO_THE_OTHER_HOST)
        assert report.ranks_with("error") == [0, 1]
        text = report.render()
        assert "UnreachableRankError" in text and "kernel code `put_far`" in text
        assert "rank 0 (host-0) cannot address rank 1's heap (host-1)" in text
        assert wb.run("x = ctx.ones(4)").ok  # the ranks carry on
    finally:
        stopped = wb.stop()
    assert stopped.ok, str(stopped)


def test_simulated_hosts_are_blocks_of_consecutive_ranks_and_bad_ones_say_what_to_pass():
    assert simulated_hosts(2, 5) == ["host-0", "host-0", "host-0", "host-1", "host-1"]
    assert simulated_hosts(["a", "b"], 2) == ["a", "b"]
    assert local_ranks(simulated_hosts(2, 4)) == [(0, 2), (1, 2), (0, 2), (1, 2)]
    for bad in (0, 3, ["a", "a"], ["a", ""], "ab"):
        with pytest.raises(ValueError, match="hosts= takes a number of hosts from 1 to the 2 ranks"):
            simulated_hosts(bad, 2)
    with pytest.raises(ValueError, match="engines='slurm' starts ranks on real hosts already"):
        Workbench(n=2, engines="slurm", hosts=2)
    assert _hosts("2") == 2 and _hosts("node-a, node-b") == ["node-a", "node-b"]


def test_a_gpu_fault_in_a_world_of_several_hosts_gets_a_note_naming_the_ranks():
    topology = TopologyMap.from_records([RankRecord(GPUInfo.for_cpu_rank(r, "ab"[r // 2])) for r in range(4)])
    note = fault_note(topology, 3, "AcceleratorError: CUDA error: an illegal memory access was encountered")
    assert note.startswith("rank 3 maps the heaps of ranks 2-3 only; ranks 0-1 are on other hosts: rank 3 (b) "
                           "cannot address rank 0's heap (a)")
    assert fault_note(topology, 3, "CUDA error: out of memory") is None
    one_host = TopologyMap.from_records([RankRecord(GPUInfo.for_cpu_rank(r, "a")) for r in range(2)])
    assert fault_note(one_host, 0, "CUDA error: device-side assert triggered") is None


def test_a_rank_uses_the_gpu_of_its_index_on_its_host(monkeypatch):
    import torch

    from iris.base.backend import gpu_for_rank

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)  # a host of 4 GPUs (torch's answer, not ours)
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.delenv("IRIS_HOST", raising=False)
    assert gpu_for_rank(5) == 2  # rank 5 is its host's third rank (ranks dealt round-robin over hosts)
    assert gpu_for_rank(3) == 3  # another rank than this process's: by its number
    monkeypatch.setenv("IRIS_HOST", "host-1")
    assert gpu_for_rank(5) == 1  # hosts simulated on one machine share its GPUs: by rank
