"""torch.distributed's ``iris`` backend (iris.distributed) on CPU ranks: every operation against gloo at 2 and 3
ranks, DDP, FSDP2 and tensor parallelism against gloo, refusals, and a rank failing mid-step under torchrun.
The rank cases in tests/rank_cases_distributed.py check inside each rank."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .multirank import ROOT, free_port, our_heap_files, run_ranks

CASES = "tests.rank_cases_distributed"


@pytest.fixture(autouse=True)
def _no_heap_files(no_heap_files_left_behind):
    yield


def test_every_operation_matches_gloo():
    # 3 ranks: sizes that do not divide evenly, every root; 2 ranks run the training loops, refusals and groups
    results = run_ranks(3, f"{CASES}:every_operation", timeout=600)
    assert len({r["compared"] for r in results}) == 1 and results[0]["compared"] > 25


def test_sub_groups_of_two_on_4_ranks():
    sums = run_ranks(4, f"{CASES}:groups_of_two", timeout=300)
    assert [s["consecutive"] for s in sums] == [3.0, 3.0, 7.0, 7.0]
    assert [s["strided"] for s in sums] == [4.0, 6.0, 4.0, 6.0]


def test_training_loops_match_gloo():
    losses = run_ranks(2, f"{CASES}:training_loops", timeout=600)
    assert losses[0]["tp"] == losses[1]["tp"]  # tensor parallelism: one model, one loss on every rank
    assert losses[0]["ddp"] != losses[1]["ddp"]  # data parallelism: each rank's own batch


def test_a_context_of_ones_own_beside_gloo():
    assert run_ranks(2, f"{CASES}:beside_gloo", timeout=120) == [{"default": "gloo", "group": "iris"}] * 2


def test_refusals_name_the_rank_and_leave_the_group_working():
    results = run_ranks(2, f"{CASES}:refusals", timeout=300)
    assert len(results[1]["said"]) == 5


def test_a_rank_failing_mid_step_ends_the_run_as_torchrun_reports_it():
    before = our_heap_files()
    env = {**os.environ, "IRIS_BACKEND": "cpu", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "--master-port", str(free_port()), "-m", CASES], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode != 0
    assert "ChildFailedError" in run.stderr and "rank 1 fails mid-step on purpose" in run.stderr, run.stderr[-3000:]
    assert our_heap_files() <= before
