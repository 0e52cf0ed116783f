"""The symmetric heap and the host API on the CPU backend, with real processes on 2 and 4 ranks."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from iris.base.sizes import format_size, parse_size
from iris.heap import Allocator, OutOfHeap
from iris.heap.cpu import PREFIX, SHM_DIR, remove_stale_heap_files

from .multirank import ROOT, our_heap_files, run_ranks, start_ranks, stop

CASES = "tests.rank_cases_heap"


pytestmark = pytest.mark.usefixtures("no_heap_files_left_behind")


# -- single-process units ------------------------------------------------------------------------

def test_parse_size_spellings():
    assert parse_size("64MiB") == 64 << 20
    assert parse_size("1 GiB") == 1 << 30
    assert parse_size("512k") == 512 << 10
    assert parse_size("100MB") == 100_000_000
    assert parse_size(4096) == 4096
    assert format_size(3 << 20) == "3.0 MiB"
    for bad in ("lots", "-1", "12 parsecs", 0, True, "0MiB"):
        with pytest.raises(ValueError, match="size"):
            parse_size(bad)


def test_allocator_first_fit_merges_and_reports():
    a = Allocator(size=4096, alignment=256)
    x, y, z = a.allocate(1), a.allocate(300), a.allocate(256)
    assert (x, y, z) == (0, 256, 768)
    a.release(y)
    assert a.allocate(512) == 256  # the freed hole is reused
    a.release(x)
    a.release(256)
    a.release(z)
    assert a.usage().free == 4096 and a.usage().largest_free == 4096  # everything merged back
    a.allocate(4096)
    with pytest.raises(OutOfHeap):
        a.allocate(1)
    assert a.usage().allocations == 1  # a failed allocation changes nothing


def test_allocator_fragmentation():
    a = Allocator(size=1024, alignment=256)
    blocks = [a.allocate(256) for _ in range(4)]
    a.release(blocks[0])
    a.release(blocks[2])
    use = a.usage()
    assert (use.used, use.free, use.largest_free) == (512, 512, 256) and use.fragmentation == 0.5


# -- multi-rank, real processes ------------------------------------------------------------------

@pytest.mark.parametrize("world", [2, 4])
def test_creation_family_and_offsets_agree(world):
    results = run_ranks(world, f"{CASES}:creation_family")
    assert all(r["offsets"] == results[0]["offsets"] for r in results)  # symmetric: same offsets everywhere
    assert len({tuple(r["bases"]) for r in results}) == world  # each process maps the heaps at its own addresses
    assert results[0]["listing"][0] == [0, 48, "torch.float32", [3, 4], "z"]


@pytest.mark.parametrize("world", [2, 4])
def test_as_remote_reads_and_writes_reach_the_owner(world):
    errors = run_ranks(world, f"{CASES}:as_remote_host")[0]
    assert f"rank {world} is out of range: the valid ranks are 0 to {world - 1}" in errors[0]
    assert "ctx.zeros" in errors[-2]
    assert errors[-1].startswith("rank 0: copy_2d takes two 2-D blocks of one shape and dtype with unit column "
                                 "stride and rows apart, got [2, 6] torch.float32 strides (1, 8)")
    assert errors[-1].endswith("call .contiguous() on a transposed or expanded one")


def test_free_and_reuse_through_a_small_heap():
    results = run_ranks(2, f"{CASES}:free_and_reuse")
    assert results[0]["offsets"] == results[1]["offsets"]
    assert len(set(results[0]["offsets"])) <= 2  # the same blocks are used again and again
    assert results[0]["live_after_partial_free"] == 2 == results[1]["live_after_partial_free"]


def test_divergence_is_named_and_oom_leaves_heap_usable():
    results = run_ranks(2, f"{CASES}:divergence_and_oom")
    for r in results:
        assert "rank 0 asked for float32[32] (128 bytes)" in r["divergence"]
        assert "rank 1 asked for float32[64] (256 bytes)" in r["divergence"]
        assert re.search(r"out of memory allocating uint8\[2097152\].*heap of 1\.0 MiB", r["oom"])
    assert results[1]["divergence"].startswith("rank 1:")


def test_broadcast_scalars_objects_tensors():
    for r in run_ranks(2, f"{CASES}:broadcast_values"):
        assert r == {
            "int": 42, "float": 2.5, "obj": {"a": [1, 2], "r": 1}, "tensor": ["ndarray", [0, 1, 2, 3]],
            "bf16": [1.0, 1.0], "array": [1, 1], "string": "hello",
        }


def test_logging_names_rank_and_world(tmp_path):
    ranks = start_ranks(2, f"{CASES}:logging_lines", workdir=tmp_path)
    for r in ranks:
        assert r.process.wait(timeout=120) == 0, r.log()
    logs = [r.log() for r in ranks]
    assert "[Iris] [0/2] info line" in logs[0] and "[Iris] [1/2] debug line" in logs[1]
    assert "hidden" not in logs[0] and "[Iris] [0/2] WARNING: warned" in logs[0]


def test_heap_files_are_private_and_unlinked_once_mapped():
    assert run_ranks(2, f"{CASES}:heap_file_mode") == [[0o600, 0o600]] * 2


def test_sigkill_leaves_nothing_in_dev_shm(tmp_path):
    ranks = start_ranks(2, f"{CASES}:wait_to_be_killed", workdir=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not all("READY" in r.log() for r in ranks):
            alive = all(r.process.poll() is None for r in ranks)
            assert alive and time.monotonic() < deadline, [r.log() for r in ranks]
            time.sleep(0.2)
    finally:
        stop(ranks)
    assert all(r.process.returncode == -signal.SIGKILL for r in ranks)
    pids = {str(r.process.pid) for r in ranks}
    assert not [n for n in our_heap_files() if any(f"-p{p}-" in n for p in pids)]


def test_stale_files_of_dead_processes_are_removed():
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    name = f"{PREFIX}-u{os.getuid()}-p{int(dead.stdout)}-deadbeef-r0"
    open(os.path.join(SHM_DIR, name), "w").close()
    mine = f"{PREFIX}-u{os.getuid()}-p{os.getpid()}-cafef00d-r0"
    open(os.path.join(SHM_DIR, mine), "w").close()
    try:
        removed = remove_stale_heap_files()
        assert name in removed and mine not in removed  # a live process's file is left alone
    finally:
        os.unlink(os.path.join(SHM_DIR, mine))


def test_world_of_one_without_torchrun():
    assert run_ranks(1, f"{CASES}:world_of_one")[0] == [1, 0, [0, 1, 2, 3], [0, 1, 2, 3]]


def test_demo_under_torchrun():
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4", "examples/heap_demo.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "IRIS_BACKEND": "cpu", "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all 4 ranks agree" in out.stdout, out.stdout


def test_heap_larger_than_dev_shm_is_refused_up_front():
    message = run_ranks(1, f"{CASES}:heap_larger_than_dev_shm")[0]
    assert message.startswith("rank 0: the heaps need")
