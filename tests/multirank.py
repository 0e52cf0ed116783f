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
import threading
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


# Variables that start_ranks sets per rank or per run: not read at import (a zygote serves any values of them).
# PYTEST_CURRENT_TEST too: pytest sets it to each test's name, so with it in the key every test started a zygote of
# its own (torch, triton and iris imported again, and kept alive to the session's end: 41 zygotes in one lane).
_PER_RUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "IRIS_TEST_RESULT",
            "PYTEST_CURRENT_TEST")


def _gpu_visible() -> bool:
    import torch

    return torch.cuda.is_available()


def start_ranks(world_size: int, target: str, *args, env: dict | None = None, workdir: Path | None = None,
                rank_env=None, warm: bool = False):
    """Start ``world_size`` processes running ``target`` ("module:function"), return their RankProcess list.

    ``env`` is added to every rank's environment, then ``rank_env(rank)`` (a dict) to that rank's, e.g.
    ``rank_env=lambda r: {"IRIS_HOST": f"host-{r // 2}"}`` to simulate two hosts of two ranks.

    ``warm``: fork each rank from a :class:`Zygote` that has imported iris with the same environment (a fresh
    process all the same, without the interpreter's start-up and ``import iris``); not with ``rank_env`` (the
    ranks' environments differ), not where a GPU is visible (a process that has touched CUDA cannot fork children
    that use it: the GPU tests start every rank cold), and not with ``IRIS_TEST_COLD=1`` in the environment (every
    rank started by ``python -m tests.rank_main``, as before the zygote)."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="iris-test-"))
    port = free_port()
    zygote = None
    if warm and rank_env is None and os.environ.get("IRIS_TEST_COLD", "") in ("", "0") and not _gpu_visible():
        zygote = Zygote.for_environment({**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    ranks = []
    for rank in range(world_size):
        environment = {
            **os.environ, "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "PYTHONPATH": str(ROOT), "IRIS_TEST_RESULT": str(workdir / f"result{rank}.json"),
            **(env or {}), **(rank_env(rank) if rank_env else {}),
        }
        log_path = workdir / f"rank{rank}.log"
        argv = [target, json.dumps(list(args))]
        if zygote is not None:
            process = zygote.fork(argv, environment, log_path)
        else:
            with open(log_path, "w") as log:
                process = subprocess.Popen(
                    [sys.executable, "-m", "tests.rank_main", *argv],
                    cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT,
                )
        ranks.append(RankProcess(rank, process, workdir / f"result{rank}.json", log_path))
    return ranks


class ForkedRank:
    """A rank forked by a :class:`Zygote`, with the part of ``subprocess.Popen`` that the tests use: ``pid``,
    ``returncode``, ``poll()``, ``wait(timeout)`` (its exit code comes from the zygote, which reaps it)."""

    def __init__(self, zygote: Zygote, pid: int):
        self.zygote, self.pid, self.returncode, self.args = zygote, pid, None, ["tests.rank_main", f"pid {pid}"]

    def poll(self):
        if self.returncode is None:
            self.returncode = self.zygote.exit_code(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None):
        if self.returncode is None:
            self.returncode = self.zygote.exit_code(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode


class Zygote:
    """``python -m tests.rank_zygote`` (see there): one per distinct environment, for the whole pytest session."""

    _by_environment: dict = {}
    _lock = threading.Lock()

    @classmethod
    def for_environment(cls, environment: dict) -> Zygote:
        key = tuple(sorted((k, v) for k, v in environment.items() if k not in _PER_RUN))
        with cls._lock:
            zygote = cls._by_environment.get(key)
            if zygote is None or not zygote.alive():
                zygote = cls._by_environment[key] = cls(dict(key))
            return zygote

    def __init__(self, environment: dict):
        read_end, write_end = os.pipe()
        self._stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.rank_zygote"], cwd=ROOT, stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=self._stderr, pass_fds=[write_end],
            env={**environment, "IRIS_ZYGOTE_FD": str(write_end)},
        )
        os.close(write_end)
        self._replies = os.fdopen(read_end, "rb")
        self._changed = threading.Condition()
        self._started: dict[int, int] = {}   # request id -> pid
        self._codes: dict[int, int] = {}     # pid -> exit code
        self._ended = False
        self._error = None
        self._next_id = 0
        threading.Thread(target=self._read, daemon=True, name="rank-zygote-replies").start()

    def _read(self) -> None:
        for line in self._replies:
            message = json.loads(line)
            with self._changed:
                if "error" in message:
                    self._error = message["error"]
                elif "code" in message:
                    self._codes[message["pid"]] = message["code"]
                elif "id" in message:
                    self._started[message["id"]] = message["pid"]
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def alive(self) -> bool:
        return self.process.poll() is None and not self._ended and self._error is None

    def _failure(self) -> AssertionError:
        self._stderr.seek(0)
        why = self._error or self._stderr.read().decode(errors="replace")[-4000:]
        return AssertionError(f"the rank zygote (tests/rank_zygote.py) ended: {why}")

    def fork(self, argv: list[str], environment: dict, log_path: Path) -> ForkedRank:
        with self._changed:
            request_id, self._next_id = self._next_id, self._next_id + 1
            request = {"id": request_id, "env": environment, "argv": argv, "log": str(log_path), "cwd": str(ROOT)}
            try:
                self.process.stdin.write((json.dumps(request) + "\n").encode())
                self.process.stdin.flush()
            except BrokenPipeError:
                raise self._failure() from None
            if not self._changed.wait_for(lambda: request_id in self._started or self._ended or self._error,
                                          timeout=120):
                raise AssertionError("the rank zygote did not fork a rank within 120 s")
            if request_id not in self._started:
                raise self._failure()
            return ForkedRank(self, self._started.pop(request_id))

    def exit_code(self, pid: int, timeout: float | None):
        """The exit code of child ``pid`` once it ended (None after ``timeout`` seconds if it has not)."""
        with self._changed:
            self._changed.wait_for(lambda: pid in self._codes or self._ended, timeout=timeout)
            if pid in self._codes:
                return self._codes.pop(pid)
            if self._ended:
                raise self._failure()
            return None


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
    :func:`start_ranks`; the ranks are forked from a warm zygote (``warm`` there)."""
    with tempfile.TemporaryDirectory(prefix="iris-test-") as workdir:
        return _run_in(Path(workdir), world_size, target, args, timeout, env, rank_env)


def _run_in(workdir: Path, world_size: int, target: str, args: tuple, timeout: float, env: dict | None,
            rank_env=None) -> list:
    ranks = start_ranks(world_size, target, *args, env=env, workdir=workdir, rank_env=rank_env, warm=True)
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
