"""iris.flags (signal, arrive, wait) between real ranks on the CPU, under the race checker, and compiled for sm_90."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest

from .multirank import ROOT, run_ranks


@pytest.mark.parametrize("world", [2, 3])
def test_flags_order_data_between_ranks(world, no_heap_files_left_behind):
    results = run_ranks(world, "tests.rank_cases_flags:flags_between_ranks", timeout=240)
    # the sums were checked against torch in the ranks; here, what the race checker saw
    for rank, races in enumerate(results):
        assert races["signal_wait"] == [], (rank, races["signal_wait"])
        assert races["arrive_wait"] == [], (rank, races["arrive_wait"])
    without_wait = [text for races in results for text in races["signal_no_wait"]]
    assert without_wait and all("race on inbox[" in text for text in without_wait), without_wait


def test_sm90_compiles_releases_and_acquires():
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    with tempfile.TemporaryDirectory() as scratch:
        env.update(IRIS_BACKEND="cuda", PYTHONPATH=str(ROOT), TMPDIR=scratch)
        done = subprocess.run([sys.executable, "-m", "tests.flags_sm90"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(done.stdout.splitlines()[-1])
    for world in (2, 3):
        gather, send, total = (counts[f"{name} world={world}"] for name in
                               ("all_gather_sum", "send_and_arrive", "wait_and_sum"))
        assert gather["release"] >= 1 and gather["acquire"] >= 1, gather   # signal, then wait
        assert send["release"] == world and send["acquire"] == 0, send     # one arrive per rank
        assert total["acquire"] >= 1 and total["release"] == 0, total      # the wait alone
        assert min(gather["bar_sync"], send["bar_sync"], total["bar_sync"]) >= 1
