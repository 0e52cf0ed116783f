"""Run a function on N ranks, each a real process with torchrun's environment, and collect the results.

Examples
--------
>>> results = run_ranks(2, "tests.rank_cases:heap_offsets_agree")     # doctest: +SKIP
>>> results[0] == results[1]                                          # doctest: +SKIP
True
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def our_heap_files() -> set[str]:
    """Names of iris CPU heap files (and their race-checker shadow files: same prefix) now in /dev/shm."""
    from iris.heap.cpu import PREFIX, SHM_DIR

    return {name for name in os.listdir(SHM_DIR) if name.startswith(PREFIX)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RankProcess:
    rank: int
    process: subprocess.Popen
    result_path: Path
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def result(self):
        return json.loads(self.result_path.read_text())


def start_ranks(world_size: int, target: str, *args, env: dict | None = None, workdir: Path | None = None,
                rank_env=None):
    """Start ``world_size`` processes running ``target`` ("module:function"), return their RankProcess list.

    ``env`` is added to every rank's environment, then ``rank_env(rank)`` (a dict) to that rank's, e.g.
    ``rank_env=lambda r: {"IRIS_HOST": f"host-{r // 2}"}`` to simulate two hosts of two ranks."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="iris-test-"))
    port = free_port()
    ranks = []
    for rank in range(world_size):
        environment = {
            **os.environ, "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "PYTHONPATH": str(ROOT), "IRIS_TEST_RESULT": str(workdir / f"result{rank}.json"),
            **(env or {}), **(rank_env(rank) if rank_env else {}),
        }
        log_path = workdir / f"rank{rank}.log"
        with open(log_path, "w") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.rank_main", target, json.dumps(list(args))],
                cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT,
            )
        ranks.append(RankProcess(rank, process, workdir / f"result{rank}.json", log_path))
    return ranks


def stop(ranks) -> None:
    """SIGKILL every rank process still running (by pid) and reap it."""
    for r in ranks:
        if r.process.poll() is None:
            os.kill(r.process.pid, signal.SIGKILL)
        r.process.wait()


def run_ranks(world_size: int, target: str, *args, timeout: float = 180, env: dict | None = None,
              rank_env=None) -> list:
    """Run ``target`` on every rank and return the per-rank JSON results; raise with the logs if one fails.
    The ranks' logs and results live in a temporary directory, removed afterwards. ``env`` and ``rank_env``: as
    :func:`start_ranks`."""
    with tempfile.TemporaryDirectory(prefix="iris-test-") as workdir:
        return _run_in(Path(workdir), world_size, target, args, timeout, env, rank_env)


def _run_in(workdir: Path, world_size: int, target: str, args: tuple, timeout: float, env: dict | None,
            rank_env=None) -> list:
    ranks = start_ranks(world_size, target, *args, env=env, workdir=workdir, rank_env=rank_env)
    deadline = time.monotonic() + timeout
    try:
        for r in ranks:
            r.process.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        stop(ranks)
        raise AssertionError(f"{target} timed out after {timeout}s:\n" + _logs(ranks)) from None
    failed = [r for r in ranks if r.process.returncode != 0]
    if failed:
        stop(ranks)
        raise AssertionError(f"{target} failed on ranks {[r.rank for r in failed]}:\n" + _logs(ranks))
    return [r.result() for r in ranks]


def _logs(ranks) -> str:
    return "\n".join(f"--- rank {r.rank} (exit {r.process.returncode}) ---\n{r.log()[-4000:]}" for r in ranks)
