"""A cluster of ranks: an ipyparallel controller and one engine per rank, each owning an ``Iris`` context.

Rank r is engine ``Workbench.engine_ids[r]``: engines register in whatever order they start, so ranks are
given explicitly (by the launcher's own rank for MPI/Slurm-style launchers, else by engine id) and sent
to each engine with the torch.distributed rendezvous (``MASTER_ADDR``, ``MASTER_PORT`` on a port free
on rank 0's host, ``RANK``, ``WORLD_SIZE``) before ``iris.iris(...)`` is called on every rank at once.

:meth:`Workbench.stop` asks every rank's engine to exit (status 0) and waits for it; only what is still
running then is stopped through ipyparallel's cluster API (by pid, SIGTERM then SIGKILL). It runs at
interpreter exit too, and an engine-side watchdog ends the engines if the notebook dies. ipyparallel's own
messages about the processes (whole engine logs when one exits with a non-zero status) are kept in
:attr:`Workbench.cluster_log` instead of printed: the workbench says itself, concisely, what went wrong.

Examples
--------
>>> wb = Workbench(n=2, backend="cpu", heap_size="16MiB").start()          # doctest: +SKIP
>>> wb.run("x = ctx.full((4,), float(rank))")                              # doctest: +SKIP
>>> wb.pull("x")                                                             # doctest: +SKIP
[tensor([0., 0., 0., 0.]), tensor([1., 1., 1., 1.])]
>>> print(wb.stop())                                                        # doctest: +SKIP
stopped 2 ranks (cpu backend): each exited with status 0; no process and nothing in /dev/shm left
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from iris.base.backend import gpu_visible
from iris.base.sizes import format_size, parse_size
from iris.heap.cpu import heap_files_of, process_alive, remove_stale_heap_files

from . import engine, execution, hang_report, room, shutdown, whereabouts
from .progress import StartProgress
from .report import CellReport, RankError, WorkbenchError
from .shutdown import EngineStop, StopReport

BACKENDS = ("auto", "cpu", "cuda")
# The hub registers engines (and notices dead ones) on its heartbeat: ipyparallel's 3 s period makes a
# 4-engine start-up wait two beats for nothing.
HEARTBEAT_MS = 300
# A rank asked to exit takes ~0.2 s; one still running after this is signalled.
EXIT_SECONDS = 5.0
# ipyparallel waits 5 s after SIGTERM before SIGKILL; a rank stuck in a kernel needs no more than this.
STOP_SECONDS_UNTIL_KILL = 2
# After the engines, their nannies (which notice at once that their engine is gone) and then the controller's
# processes get this long to exit.
NANNY_SECONDS = 2.0
# While a cluster starts, how often its processes are checked for one that ended (the start then fails at once).
START_CHECK_SECONDS = 0.5
# How long an engine's exit code may take to reach its psutil.Process after ipyparallel's thread reaped it.
REAPED_SECONDS = 1.0
CLUSTER_LOG_RECORDS = 50
_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


class Workbench:
    """The ranks of one notebook: start, run cells, pull values, stop.

    Parameters
    ----------
    n : int
        Number of ranks (engines).
    backend : {"auto", "cpu", "cuda"}
        Heap backend of every rank; "auto" picks cuda when the engines see a GPU.
    heap_size : int or str
        Symmetric heap per rank, e.g. ``"64MiB"`` (parsed by :func:`iris.base.sizes.parse_size`).
    engines : str
        ipyparallel engine launcher: ``"local"`` (default), ``"mpi"``, ``"slurm"``... or a class path.
    timeout : float
        Default seconds a cell may run before its ranks are interrupted.
    interrupt_grace : float
        Seconds interrupted ranks get to stop before the cluster is restarted.
    progress : bool
        Show a progress bar while starting.
    check : {None, "races"}
        Check every kernel for data races (CPU backend; :mod:`workbench.races` shows them after each cell).
        None: ``IRIS_CHECK`` decides, as in any iris program.
    hosts : int or list of str, optional
        For tests and teaching, a simulation: the local ranks behave as if on this many hosts (or on hosts of
        these names), in blocks of consecutive ranks (:func:`simulated_hosts`); each rank gets ``IRIS_HOST``
        (:func:`iris.heap.topology.this_host`), so heaps are mapped only within a host, kernels that address another
        host's rank get a clear error and ``ctx.ccl`` crosses hosts over torch.distributed. Real hosts come
        from ipyparallel's launchers (``engines="mpi"``, ``"slurm"``, ``"ssh"``), which need no such option.

    Attributes
    ----------
    check : str or None
        What the ranks check (``"races"``), as their contexts say once started.
    last_stop : StopReport or None
        What the last :meth:`stop` (or the stop of :meth:`restart`) did.
    cluster_log : collections.deque of str
        ipyparallel's recent warnings about this cluster's processes, which are not printed.
    cluster_dir : str or None
        While a cluster of local engines runs, the folder of its own that holds its ipyparallel profile
        (connection files, logs) and its sockets; :meth:`stop` removes it. None for other launchers, whose
        engines may run on other hosts: their clusters use ipyparallel's default profile (a folder those hosts
        share, such as a home directory) and TCP, the controller listening on every interface.

    Examples
    --------
    >>> wb = Workbench(n=4, backend="cpu").start()      # doctest: +SKIP
    >>> wb.run("print(rank, world_size)").ok             # doctest: +SKIP
    True
    """

    def __init__(self, n: int = 4, backend: str = "auto", heap_size: int | str = "64MiB",
                 engines: str = "local", timeout: float = 60.0, interrupt_grace: float = 5.0,
                 progress: bool = True, start_timeout: float = 300.0, check: str | None = None, hosts=None):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"the number of ranks must be a positive int, got {n!r}")
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
        if hosts is not None and engines != "local":
            raise ValueError(f"hosts= simulates several hosts with local engines; engines={engines!r} starts ranks "
                             "on real hosts already: leave hosts out")
        self.simulated_hosts = simulated_hosts(hosts, n) if hosts is not None else None
        self.n, self.backend, self.engines = n, backend, engines
        self.heap_size = parse_size(heap_size)
        self.timeout, self.interrupt_grace, self.progress = float(timeout), float(interrupt_grace), progress
        self.start_timeout = float(start_timeout)
        self.check = check
        self.engine_ids: list[int] = []
        self.rank_info: list[dict] = []
        self.broken: str | None = None
        self.hang_channel: str | None = None  # where the ranks answer "where are you?" (a hang report)
        self.before_stop: list = []  # callables the next stop calls first (a stepped run's stop)
        self.held_by: str | None = None  # what keeps every engine busy (a stepped run): other requests would queue
        self.last_stop: StopReport | None = None
        self.cluster_log: collections.deque[str] = collections.deque(maxlen=CLUSTER_LOG_RECORDS)
        self._cluster = None
        self._launchers: dict[int, object] = {}
        self.cluster_dir: str | None = None
        self._notebook: dict = {}
        self._watcher: subprocess.Popen | None = None
        self.client = None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return (f"Workbench(n={self.n}, backend={self.backend!r}, heap_size={format_size(self.heap_size)!r}, "
                f"engines={self.engines!r}, {state})")

    @property
    def running(self) -> bool:
        return self.client is not None

    @property
    def world_size(self) -> int:
        return self.n

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> Workbench:
        """Start the controller and the engines, make every engine a rank, create every rank's ``Iris``."""
        if self.running:
            raise WorkbenchError(f"{self!r} is already running: stop() or restart() it")
        import ipyparallel as ipp
        from traitlets.config import Config

        local = self.engines == "local"
        if local:  # said before any process starts; engines elsewhere check their own host
            room.check_room(self.n, self.heap_size, _backend_to_come(self.backend))
        config = Config()
        config.EngineLauncher.environment = _engine_environment(self.backend, local)
        config.LocalProcessLauncher.stop_seconds_until_kill = STOP_SECONDS_UNTIL_KILL
        config.LocalEngineSetLauncher.delay = 0.0  # start engines at once: ranks are assigned explicitly
        config.EngineLauncher.engine_args = _engine_args(self.start_timeout, local)
        bar = StartProgress(total=2 * self.n + 1, show=self.progress)
        try:
            bar.set_description("controller")
            # A local cluster lives in a folder of its own: its profile (connection files, logs) and its sockets.
            self.cluster_dir = tempfile.mkdtemp(prefix="iris-cluster-") if local else None
            self._cluster = ipp.Cluster(
                n=self.n, engines=self.engines, config=config, shutdown_atexit=False, log=self._ipyparallel_log(),
                controller_args=[f"--HeartMonitor.period={HEARTBEAT_MS}", *_socket_args(self.cluster_dir)],
                # Engines on other hosts connect over TCP: the controller listens on every interface (its default
                # is 127.0.0.1), and they find it at its host's name (ipcontroller's location).
                **({"profile_dir": self.cluster_dir} if local else {"controller_ip": "*"}),
            )
            self._cluster.start_controller_sync()
            self._notebook = {"host": socket.gethostname(), "pid": os.getpid(),
                              "controller_pid": self._controller_pid()}
            self._watcher = _start_watcher(self._notebook["controller_pid"], self.cluster_dir)
            self._cluster.start_engines_sync(self.n)  # (once the controller has written its connection files)
            if self.cluster_dir is not None:
                _link_socket_names(self.cluster_dir)
            self._launchers = _engine_launchers(self._cluster)
            self.client = self._cluster.connect_client_sync()
            atexit.register(self._stop_at_exit)
            bar.update()
            engines = self._wait_for_engines(bar)
            self._make_ranks(engines, bar)
        except BaseException:
            bar.close()
            report = self.stop()
            if not report.ok:  # e.g. why an engine never registered: the end of its log
                print(report, file=sys.stderr)
            raise
        bar.finish(f"{self.n} ranks ready")
        self.broken = None
        return self

    def _wait_for_engines(self, bar) -> dict[int, dict]:
        """Engine id -> identity of every engine, sending each the imports as soon as it registers.

        Fails at once, saying why, when the controller or an engine this notebook started ends meanwhile;
        otherwise when not every engine registered within :attr:`start_timeout`.
        """
        bar.set_description("engines")
        prepared = {}
        deadline = time.monotonic() + self.start_timeout
        next_check = 0.0
        while len(prepared) < self.n:
            for eid in self.client.ids:
                if eid not in prepared:
                    prepared[eid] = self.client[eid].apply_async(engine.prepare, self.backend, self._notebook)
                    bar.update()
            if time.monotonic() >= next_check:
                self._fail_if_a_process_ended(f"only {len(prepared)} of {self.n} engines had registered")
                next_check = time.monotonic() + START_CHECK_SECONDS
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"only {len(prepared)} of {self.n} engines registered within {self.start_timeout:g} s "
                    "(how the others ended, with the end of their logs, is printed above)"
                )
            time.sleep(0.02)
        bar.set_description("importing iris")
        return execution.gather(prepared, deadline, what="importing torch/triton/iris", key_name="engine")

    def _fail_if_a_process_ended(self, progress: str) -> None:
        """Raise :class:`WorkbenchError` if the controller or an engine that this notebook started has ended."""
        controller = self._cluster.controller
        how = _peek_exit(controller) if isinstance(getattr(controller, "process", None), psutil.Process) else None
        if how is not None:
            log = shutdown.log_excerpt(self._cluster.controller.get_output())
            raise WorkbenchError(f"the cluster's controller ended ({how}) while it started ({progress}); the "
                                 f"end of its log:\n{log}")
        ended = {pid: _peek_exit(launcher) for pid, launcher in self._launchers.items()}
        ended = {pid: how for pid, how in ended.items() if how is not None}
        if ended:
            which = ", ".join(f"pid {pid} ({how})" for pid, how in sorted(ended.items()))
            raise WorkbenchError(f"{len(ended)} of {self.n} engines ended while the cluster started ({progress}): "
                                 f"{which}; how each ended, with the end of its log, is printed above")

    def _make_ranks(self, engines: dict[int, dict], bar) -> None:
        """Assign ranks, rendezvous, and create each rank's context (collectively, all engines at once)."""
        by_launcher = all(info["launcher_rank"] is not None for info in engines.values())
        order = sorted(engines, key=lambda eid: engines[eid]["launcher_rank"] if by_launcher else eid)
        self.engine_ids = order
        self.hang_channel = hang_report.new_channel()
        notebook = {**self._notebook, "hang_channel": self.hang_channel}
        bar.set_description("creating heaps")
        rendezvous = (self.n, self._meeting(engines[order[0]]), self.backend, self.heap_size, notebook)
        hosts = self.simulated_hosts or [engines[eid]["host"] for eid in order]
        setups = {rank: self.client[eid].apply_async(engine.setup, rank, *rendezvous, check=self.check,
                                                     host=hosts[rank] if self.simulated_hosts else None,
                                                     local=local_ranks(hosts)[rank])
                  for rank, eid in enumerate(order)}
        done = execution.gather(setups, time.monotonic() + self.start_timeout, "creating the Iris contexts",
                                on_each=lambda _: bar.update())
        self.rank_info = [{**engines[eid], **done[rank]} for rank, eid in enumerate(order)]
        self.check = self.rank_info[0]["check"]  # (IRIS_CHECK may have decided)

    def _meeting(self, rank0: dict) -> dict:
        """Where the ranks meet (:func:`engine.meeting_store`): on one host, a file in the cluster's 0700 folder,
        which no other user can open; across hosts, a TCP store that rank 0's engine serves on a port it keeps
        bound (no port picked by binding and closing), reachable by whoever reaches that host: see
        docs/classroom.md for how to keep such a cluster private."""
        if self.cluster_dir is not None:
            return {"file": os.path.join(self.cluster_dir, "rendezvous")}
        port = self.client[self.engine_ids[0]].apply_sync(engine.open_store, self.n)
        return {"host": rank0["host"], "port": port}

    def _controller_pid(self) -> int | None:
        """The controller's pid when this notebook started it as a local process, else None."""
        from ipyparallel.cluster.launcher import LocalControllerLauncher

        controller = self._cluster.controller if self._cluster else None
        return controller.process.pid if isinstance(controller, LocalControllerLauncher) else None

    def stop(self, *, stuck=()) -> StopReport:
        """Stop every rank and the controller, and say how it went; idempotent.

        Each rank's engine is asked to exit, which it does with status 0, and gets :data:`EXIT_SECONDS`.
        Only engines still running then, and ranks in ``stuck``, are stopped by ipyparallel, by pid: SIGTERM,
        then SIGKILL after :data:`STOP_SECONDS_UNTIL_KILL` s. Nothing is printed: the report says it.

        Parameters
        ----------
        stuck : iterable of int
            Ranks known to be stuck in code that ignores SIGINT (see :meth:`run`): they would not see the
            request, so they are signalled at once.

        Returns
        -------
        StopReport
            ``str(report)`` is one line when every rank exited with status 0 and no process or heap file is
            left; otherwise it names what went wrong, per rank, with the end of that rank's log.

        Examples
        --------
        >>> print(wb.stop())                       # doctest: +SKIP
        stopped 2 ranks (cpu backend): each exited with status 0; no process and nothing in /dev/shm left
        """
        atexit.unregister(self._stop_at_exit)
        while self.before_stop:  # e.g. a stepped run lets its held ranks go, so that they can hear the stop
            try:
                self.before_stop.pop()()
            except Exception as exc:  # the stop goes on whatever happened there: no process may be left
                self.cluster_log.append(f"WARNING: before the stop: {type(exc).__name__}: {exc}")
        client, cluster = self.client, self._cluster
        if client is None and cluster is None:
            self._remove_leftovers()
            self.last_stop = StopReport(self.backend, [])
            return self.last_stop
        engines, pids, backend = self._engines_to_stop(set(stuck)), self.local_pids(), self._ranks_backend()
        controller = getattr(cluster, "controller", None)
        self.client, self._cluster, self.engine_ids, self.rank_info = None, None, [], []
        self.hang_channel = None
        try:
            _ask_to_exit(client, engines)
        finally:  # whatever happened, no process is left running
            _end_processes(client, cluster, engines)
        self._launchers = {}
        self.last_stop = _report(backend, engines, controller, pids)
        self._remove_leftovers()  # after the report, which reads the logs kept there
        return self.last_stop

    def _remove_leftovers(self) -> None:
        """End the cluster's watcher, which a finished stop no longer needs, and remove the cluster's own folder
        (profile, logs, sockets): nothing of a stopped cluster is left."""
        if self._watcher is not None:
            self._watcher.terminate()
            self._watcher.wait()
            self._watcher = None
        if self.cluster_dir is not None:
            shutil.rmtree(self.cluster_dir, ignore_errors=True)
            self.cluster_dir = None

    def restart(self, *, stuck=()) -> Workbench:
        """Stop (see :meth:`stop`; its report is kept in :attr:`last_stop`) and start again with the same
        settings; every rank's state is lost."""
        self.stop(stuck=stuck)
        return self.start()

    def _stop_at_exit(self) -> None:
        try:
            report = self.stop()
        except Exception as exc:  # at exit there is no one left to raise to
            print(f"workbench: stopping the cluster at exit failed: {exc!r}")
            return
        if not report.ok:
            print(f"workbench at exit: {report}")

    def _ipyparallel_log(self) -> logging.Logger:
        """ipyparallel's logger for this cluster: its messages go to :attr:`cluster_log`, not to the notebook.

        In a notebook ipyparallel prints its warnings into whatever cell runs, among them the last 100 lines
        of an engine's log whenever one exits with a non-zero status; :meth:`stop` and the cell reports say
        instead, concisely, which rank ended how.
        """
        log = logging.Logger(f"workbench.cluster.{id(self):x}", logging.WARNING)  # not registered globally
        log.addHandler(_KeepLines(self.cluster_log))
        return log

    def _engines_to_stop(self, stuck: set[int]) -> list[_Engine]:
        """Every engine of this cluster: the ranks, then local engines that never became ranks (a failed start)."""
        here, launchers = socket.gethostname(), dict(self._launchers)
        engines = []
        for rank, info in enumerate(self.rank_info):
            local = info["host"] == here
            before = "stuck" if rank in stuck else self.exit_status(rank)
            engines.append(_Engine(self.engine_ids[rank], info["pid"], local,
                                   launchers.pop(info["pid"], None) if local else None,
                                   EngineStop(f"rank {rank}", before=before), _children(info["pid"], local)))
        for pid, launcher in launchers.items():
            engines.append(_Engine(None, pid, True, launcher, EngineStop(f"engine pid {pid}", asked=False,
                                   before=_peek_exit(launcher)), _children(pid, True)))
        return engines

    def _ranks_backend(self) -> str:
        backends = {info["backend"] for info in self.rank_info}
        return backends.pop() if len(backends) == 1 else self.backend

    # -- running code -------------------------------------------------------------------------------
    def run(self, code: str, ranks=None, timeout: float | None = None, *, line_offset: int = 0) -> CellReport:
        """Run ``code`` on ``ranks`` (default: all) in each rank's namespace; never blocks past ``timeout``.

        Output is printed live with ``[rank r]`` prefixes. A rank still running at the timeout (default
        :attr:`timeout`) or when Ctrl-C is pressed is first asked where it is (``report.hang``: kernel, line,
        polled flag and values; see :mod:`workbench.hang_report`), then interrupted with SIGINT; if it does
        not stop within :attr:`interrupt_grace` seconds the cluster is restarted (the report says so). A rank
        whose process is stopped by a signal (:meth:`frozen`) cannot take SIGINT: it is ended at once, and the
        report says it died and that ``%iris restart`` is needed. ``line_offset``
        blank lines are put before the code so tracebacks count lines as the notebook cell does.

        Returns
        -------
        CellReport
            Per-rank status, time, output and errors; ``report.ok`` tells whether every rank succeeded.

        Examples
        --------
        >>> wb.run("y = ctx.zeros(8); print(rank)", ranks=[0, 1], timeout=10).ok     # doctest: +SKIP
        [rank 0] 0
        [rank 1] 1
        True
        """
        self._check_usable()
        selected = self._select(ranks)
        source = "\n" * line_offset + code
        filename = cell_filename(source)
        engine.register_source(source, filename)  # here too: the stepper view shows kernels defined in the cell
        return execution.run_cell(self, source, filename, selected, self.timeout if timeout is None else timeout)

    def pull(self, expression: str, ranks=None) -> list:
        """The value of ``expression`` on each rank, in rank order; tensors come back as CPU copies.

        Raises
        ------
        RankError
            Naming the ranks where evaluating failed, with their errors.

        Examples
        --------
        >>> wb.pull("rank * 10")                # doctest: +SKIP
        [0, 10, 20, 30]
        """
        self._check_usable()
        return execution.call_each(self, self._select(ranks), engine.pull, expression)

    def apply(self, function, *args, ranks=None) -> list:
        """``function(*args)`` on each rank's engine at once; results in rank order.

        ``function`` must live in a module the engines can import (it runs with that module's globals
        there): the widgets' engine-side helpers in :mod:`workbench.widgets.probes` are called this way.

        Raises
        ------
        RankError
            Naming the ranks where ``function`` raised, with their errors.

        Examples
        --------
        >>> wb.apply(probes.heap_map, ranks=[0])[0]["size"]     # doctest: +SKIP
        16777216
        """
        self._check_usable()
        return execution.call_each(self, self._select(ranks), function, *args)

    def status(self) -> str:
        """In words, a line for the cluster, then one per rank: alive or how it ended, where its kernels run
        (backend and device), its process and host, its ipyparallel engine.

        Examples
        --------
        >>> print(wb.status())                    # doctest: +SKIP
        2 ranks running, each with a 64 MiB symmetric heap (engines started by the 'local' launcher)
          rank 0: alive; kernels run on the CPU (backend cpu: Triton's interpreter, heap in /dev/shm); process ...
          rank 1: alive; ...
        """
        if not self.running:
            return f"{self!r}: no ranks running; start with %iris start -n N or workbench.start()"
        lines = [f"{self.n} ranks running, each with a {format_size(self.heap_size)} symmetric heap (engines started "
                 f"by the {self.engines!r} launcher)" + (f" BROKEN: {self.broken}" if self.broken else "")]
        for rank, info in enumerate(self.rank_info):
            state = f"ended ({self.exit_status(rank)})" if self.exit_status(rank) else "alive"
            where = ("on the CPU (backend cpu: Triton's interpreter, heap in /dev/shm)" if info["backend"] == "cpu"
                     else f"on GPU {info['device']} (backend {info['backend']})")
            host = info["host"] + (f" (simulated host {self.simulated_hosts[rank]})" if self.simulated_hosts else "")
            lines.append(f"  rank {rank}: {state}; kernels run {where}; process {info['pid']} on {host}, "
                         f"engine {self.engine_ids[rank]}")
        return "\n".join(lines)

    def heap(self) -> list[dict]:
        """Every rank's heap usage (size, used, free, largest_free, allocations), in rank order."""
        self._check_usable()
        return execution.call_each(self, self._select(None), engine.heap_usage)

    def summaries(self, name: str, ranks=None) -> dict[int, str]:
        """Rank -> one-line summary of variable ``name`` (shape, dtype, first values)."""
        selected = self._select(ranks)
        return dict(zip(selected, execution.call_each(self, selected, engine.summarize, name), strict=True))

    # -- ranks and processes ------------------------------------------------------------------------
    def _check_usable(self) -> None:
        if not self.running:
            raise WorkbenchError("the workbench is not running: start it with %iris start -n N or "
                                 "workbench.start()")
        if self.broken:
            raise WorkbenchError(f"{self.broken}; every rank's state is unreliable now: run %iris restart "
                                 "(or Workbench.restart()) to get a working cluster")
        if self.held_by:  # each engine runs that cell until it ends: a request now would wait behind it
            raise WorkbenchError(f"the ranks are held by {self.held_by}: step it to its end or stop it first (the "
                                 "stepper's stop button, run.stop(), or a new stepped cell, which stops it)")

    def _select(self, ranks) -> list[int]:
        if ranks is None:
            return list(range(self.n))
        selected = sorted({int(r) for r in ranks})
        bad = [r for r in selected if not 0 <= r < self.n]
        if bad:
            raise ValueError(f"ranks {bad} do not exist: this workbench has ranks 0..{self.n - 1}")
        return selected

    def view(self, rank: int):
        """The ipyparallel view of ``rank``'s engine."""
        return self.client[self.engine_ids[rank]]

    def interrupt(self, ranks) -> None:
        """Send SIGINT to ``ranks``' engine processes: by pid on this host, through each engine's nanny elsewhere.

        Local engines have no nanny (its socket is a TCP port any local user could connect to). Engines
        elsewhere that the controller no longer knows (it stopped hearing their heartbeat) cannot be reached
        and are skipped: such a rank does not stop, and :func:`execution.run_cell` restarts.
        """
        here, known, targets = socket.gethostname(), set(self.client.ids), []
        for r in ranks:
            info = self.rank_info[r] if r < len(self.rank_info) else None
            if info is not None and info["host"] == here:
                with contextlib.suppress(ProcessLookupError):  # it ended: nothing to interrupt
                    os.kill(info["pid"], signal.SIGINT)
            elif self.engine_ids[r] in known:
                targets.append(self.engine_ids[r])
        if targets:
            self.client.send_signal(signal.SIGINT, targets=targets, block=True)

    def frozen(self, rank: int) -> str | None:
        """How ``rank``'s engine is frozen (its process stopped by a signal: SIGSTOP, or SIGTSTP as Ctrl-Z
        sends), or None when it can run. Only engines on this host are seen."""
        info = self.rank_info[rank] if rank < len(self.rank_info) else None
        if info is None or info["host"] != socket.gethostname():
            return None
        try:
            stopped = psutil.Process(info["pid"]).status() == psutil.STATUS_STOPPED
        except psutil.NoSuchProcess:
            return None
        return "frozen: its process was stopped by a signal (SIGSTOP or SIGTSTP)" if stopped else None

    def kill(self, rank: int) -> str:
        """End ``rank``'s engine process, on this host, at once (SIGKILL, which also ends a stopped process); how it
        ended.

        The rank is lost: its peers cannot reach it, and :meth:`restart` makes a working cluster again.
        """
        os.kill(self.rank_info[rank]["pid"], signal.SIGKILL)
        return self.exit_status(rank, wait=EXIT_SECONDS) or "SIGKILL"

    def exit_status(self, rank: int, wait: float = 0.0) -> str | None:
        """None while ``rank``'s engine runs, else how it ended (``"SIGSEGV"``, ``"exit code 1"``...).

        Only engines on this host are watched; elsewhere ipyparallel reports a dead engine itself. ``wait``
        seconds are spent waiting for a watched engine to end: ipyparallel can learn of a death (from the
        engine's nanny) before this host has ended the process, e.g. while it writes a core dump.
        """
        info = self.rank_info[rank] if rank < len(self.rank_info) else None
        if info is None or info["host"] != socket.gethostname():
            return None
        launcher = self._launchers.get(info["pid"])
        deadline = time.monotonic() + wait
        while True:
            if launcher is None:
                how = None if process_alive(info["pid"]) else "exited"
            else:
                how = _peek_exit(launcher)
            if how is not None or time.monotonic() >= deadline:
                return how
            time.sleep(0.05)

    def _local_processes(self) -> dict:
        """pid -> psutil.Process of engines this notebook started itself (their exit codes are readable)."""
        return {pid: launcher.process for pid, launcher in self._launchers.items()}

    def engine_pids(self) -> list[int]:
        """pids of the ranks' engine processes, in rank order."""
        return [info["pid"] for info in self.rank_info]

    def local_pids(self) -> list[int]:
        """Every process of this cluster on this host: controller, engines and their helpers (nannies...)."""
        roots = {pid for pid in (self._controller_pid(), *self.engine_pids(), *self._launchers) if pid is not None}
        # The controller's own processes (schedulers, heart monitor) name the cluster's folder in their command
        # line: found so even when the controller has died and they are no longer its children.
        watcher = {self._watcher.pid} if self._watcher is not None else set()  # ended by the stop, after the rest
        named = _processes_naming(self.cluster_dir) - watcher
        return sorted(roots.union(*(_children(pid, True) for pid in roots), named))


def simulated_hosts(hosts, n: int) -> list[str]:
    """Rank -> simulated host name for ``hosts`` (a count, or the names) over ``n`` ranks, in blocks of consecutive
    ranks (as a Slurm allocation numbers a node's tasks), as even as ``n`` allows.

    Examples
    --------
    >>> simulated_hosts(2, 4)
    ['host-0', 'host-0', 'host-1', 'host-1']
    >>> simulated_hosts(["a", "b"], 3)
    ['a', 'a', 'b']
    """
    names = [f"host-{i}" for i in range(hosts)] if isinstance(hosts, int) and not isinstance(hosts, bool) else hosts
    if (not isinstance(names, list | tuple) or not 1 <= len(names) <= n
            or not all(isinstance(h, str) and h.strip() for h in names) or len(set(names)) != len(names)):
        raise ValueError(f"hosts= takes a number of hosts from 1 to the {n} ranks, or that many distinct non-empty "
                         f"names, got {hosts!r}")
    return [names[rank * len(names) // n] for rank in range(n)]


def local_ranks(hosts: list[str]) -> list[tuple[int, int]]:
    """Rank -> (its index among the ranks of its host, how many ranks that host has): torchrun's ``LOCAL_RANK`` and
    ``LOCAL_WORLD_SIZE``.

    Examples
    --------
    >>> local_ranks(["a", "a", "b"])
    [(0, 2), (1, 2), (0, 1)]
    """
    return [(hosts[:rank].count(host), hosts.count(host)) for rank, host in enumerate(hosts)]


def cell_filename(source: str) -> str:
    """The name cell source is registered under: the same on every rank and for the same source, so kernels
    defined in the cell get the same Triton cache key everywhere."""
    import hashlib

    return f"{whereabouts.CELL_PREFIX}{hashlib.sha1(source.encode()).hexdigest()[:12]}>"


def _peek_exit(launcher) -> str | None:
    """How the process this notebook started through ``launcher`` ended (``describe_exit``), or None while it runs."""
    try:
        # WNOWAIT reads the status without reaping: ipyparallel's launcher thread reaps the process,
        # and two threads reaping one child race (the loser learns nothing).
        status = os.waitid(os.P_PID, launcher.process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # already reaped by the launcher's thread
        return describe_exit(_reaped_exit_code(launcher))
    if status is None:
        return None
    killed = status.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
    return describe_exit(-status.si_status if killed else status.si_status)


def _reaped_exit_code(launcher, wait: float = REAPED_SECONDS) -> int | None:
    """The exit code of a process that ``launcher``'s thread reaped, None if it is not known after ``wait`` seconds.

    That thread reaps with the ``psutil.Process`` it keeps (``launcher.process``), which keeps the code it read.
    The code is asked for only once ipyparallel's public ``launcher.join`` says the thread has ended: a wait from
    here while that thread is between its ``waitpid`` and storing the code would find no child and answer None
    (seen in CI and under load: an engine's ``exit code 3`` reported as ``exited``).
    """
    try:
        _run_to_end(launcher.join(timeout=wait))
        return launcher.process.wait(0)
    except (TimeoutError, psutil.TimeoutExpired):
        return None


def _run_to_end(coroutine):
    """Run ``coroutine`` from synchronous code, also where this thread runs an event loop (as a notebook does)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _processes_naming(folder: str | None) -> set[int]:
    """pids of this host's processes whose command line names ``folder`` (None: none)."""
    if not folder:
        return set()
    found = set()
    for process in psutil.process_iter(["cmdline"]):
        if any(folder in part for part in process.info["cmdline"] or ()):
            found.add(process.pid)
    return found


def _children(pid: int, local: bool) -> list[int]:
    """pids of the processes that ``pid`` started (recursively), if it runs on this host."""
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)] if local else []
    except psutil.NoSuchProcess:
        return []


def _engine_launchers(cluster) -> dict[int, object]:
    """pid -> ipyparallel launcher of each engine process the cluster started on this host.

    Kept apart from ipyparallel's engine sets, which forget an engine's launcher once it exits (in a notebook,
    where their event loop runs): the launcher holds its exit status and its log.
    """
    return {launcher.process.pid: launcher for engine_set in cluster.engines.values()
            for launcher in getattr(engine_set, "launchers", {}).values() if launcher.process is not None}


@dataclass
class _Engine:
    """One engine as :meth:`Workbench.stop` handles it: how to reach it, and what became of it."""

    engine_id: int | None
    pid: int | None
    local: bool
    launcher: object | None
    outcome: EngineStop
    helpers: list[int] = field(default_factory=list)

    def gone(self, client) -> bool:
        """Exited (an engine on this host), or left the cluster (elsewhere, where its process is out of sight).

        On this host its helpers must be gone too: an engine's nanny tells the controller that the engine
        exited, and waits 3 s before giving up if the controller is stopped first.
        """
        if self.local and self.pid is not None:
            return all(shutdown.process_gone(pid) for pid in (self.pid, *self.helpers))
        return client is None or self.engine_id not in client.ids

    def final_exit(self) -> str | None:
        """How it ended, once ipyparallel's stop has joined the launcher's thread that reaps it."""
        if self.launcher is None:
            return None if self.local else "left the cluster"
        return _exit_of(self.launcher.process)


def _ask_to_exit(client, engines: list[_Engine]) -> None:
    """Ask every live, registered engine to exit and wait up to :data:`EXIT_SECONDS` for them; mark each
    engine with whether it was gone in time (without a client, none can be asked)."""
    registered = set(client.ids) if client is not None else set()
    # Engines that registered but never became ranks (a start that failed) are asked too; which local
    # processes they are is not known, so every such process is waited for.
    unranked = sorted(registered - {e.engine_id for e in engines})
    for e in engines:
        e.outcome.asked = e.outcome.before is None and (
            bool(unranked) if e.engine_id is None else e.engine_id in registered)
    for engine_id in [e.engine_id for e in engines if e.outcome.asked and e.engine_id is not None] + unranked:
        try:
            # The reply is not awaited: the engine may be gone before it is sent.
            client[engine_id].apply_async(engine.exit_cleanly)
        except IndexError:  # "No such engine": it left the cluster since; its exit status tells how
            pass
    asked = [e for e in engines if e.outcome.asked]
    deadline = time.monotonic() + EXIT_SECONDS
    while not all(e.gone(client) for e in asked) and time.monotonic() < deadline:
        time.sleep(0.02)
    for e in engines:
        e.outcome.in_time = e.outcome.before is not None or e.gone(client)


def _end_processes(client, cluster, engines: list[_Engine]) -> None:
    """Close the client, stop the engines still running (by pid: SIGTERM, then SIGKILL after
    :data:`STOP_SECONDS_UNTIL_KILL` s), then the controller."""
    if client is not None:
        client.close()
    if cluster is None:
        return
    cluster.stop_engines_sync()
    # The engines' nannies tell the controller that their engine is gone; they wait 3 s for it if the
    # controller is stopped first.
    shutdown.wait_until_gone([pid for e in engines for pid in e.helpers], NANNY_SECONDS)
    cluster.stop_controller_sync()


def _report(backend: str, engines: list[_Engine], controller, pids: list[int]) -> StopReport:
    """After the stop: how each engine ended (with the end of its log when that was not cleanly), the
    controller's exit, and whatever is left (processes, heap files)."""
    for e in engines:
        e.outcome.final = e.final_exit()
        if e.outcome.problem and e.launcher is not None:
            e.outcome.log = shutdown.log_excerpt(e.launcher.get_output())
    process = getattr(controller, "process", None)  # a local controller's; others are out of sight
    controller_exit = _exit_of(process) if isinstance(process, psutil.Process) else None
    processes_ended, processes_left = shutdown.end_outliving(pids, NANNY_SECONDS)
    removed = remove_stale_heap_files()  # files of ranks killed before they unlinked them (during a start)
    return StopReport(
        backend, [e.outcome for e in engines],
        controller=None if controller_exit in (None, "exit code 0") else controller_exit,
        processes_left=processes_left, processes_ended=processes_ended, heap_files_removed=removed,
        heap_files_left=heap_files_of(e.pid for e in engines if e.local and e.pid is not None),
    )


def _exit_of(process) -> str:
    """How a process this notebook started ended, read from its psutil.Process (which keeps the status of a
    process it reaped), or "still running"."""
    try:
        return describe_exit(process.wait(0))
    except psutil.TimeoutExpired:
        return "still running"


class _KeepLines(logging.Handler):
    """Keeps formatted log records in a bounded deque."""

    def __init__(self, lines: collections.deque):
        super().__init__()
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname}: {self.format(record)}")


def describe_exit(code) -> str:
    """``-11`` -> ``"SIGSEGV"``, ``1`` -> ``"exit code 1"``, None -> ``"exited"``; an engine's exit after its
    controller ended says so."""
    if code is None:
        return "exited"
    if code == engine.CONTROLLER_GONE_EXIT:
        return f"exit code {code}: the cluster's controller had ended"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _engine_args(start_timeout: float, local: bool) -> list[str]:
    """ipengine's arguments: how long it waits for the controller, and whether the controller's silence ends it.

    An engine waits ``start_timeout`` for the controller to answer its registration (ipyparallel's 5 s is too
    short for a controller starting on cores that other clusters keep busy); the notebook gives up at the same
    time and stops it. A local engine does not end itself when the controller's heartbeat stops (ipyparallel's
    default: after 50 missed beats): a busy controller is no reason to lose a rank, and the watchdog started
    by :func:`engine.prepare` ends the engine when the notebook dies. Engines elsewhere keep that check, their
    only way to end when the notebook is gone.
    """
    args = [f"--IPEngine.timeout={start_timeout:g}"]
    # A local engine has no nanny: the nanny's socket is a TCP port on 127.0.0.1 that any user of the machine
    # can connect to (and a zeromq DEALER hands it a share of the engine's control messages); the notebook
    # signals local engines by pid itself (Workbench.interrupt).
    return [*args, "--IPEngine.max_heartbeat_misses=0", "--IPEngine.enable_nanny=False"] if local else args


def _socket_args(private_dir: str | None) -> list[str]:
    """ipcontroller's arguments making its sockets Unix-domain sockets in ``private_dir`` (None: TCP, for
    engines on other hosts).

    Over TCP the controller picks its ~20 ports by binding port 0 and closing the socket, and binds them for
    real a second later, in several processes (ipyparallel's ``select_random_ports``). Controllers starting
    at the same moment pick the same port (in a quarter of the rounds of 4 on a 2-core machine), and the one
    that binds it second loses that socket: when it is a heartbeat socket, the controller's heart monitor dies
    ("Address already in use"), its engines register but are never pinged, and each shuts itself down after
    50 missed beats while the notebook waits for them. Socket files in a folder of the cluster's own cannot be
    taken by another cluster.
    """
    if private_dir is None:
        return []
    return ["--IPController.transport=ipc", f"--IPController.ip={os.path.join(private_dir, 'zmq')}"]


# Run by the watcher (python -c, so that it imports little): waits for its parent, the notebook, to end, then
# ends the controller (SIGTERM; SIGKILL for what is left after 5 s) and removes the cluster's folder.
_WATCHER = """
import os, shutil, sys, time
import psutil
notebook, controller, folder = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
try:
    controller = psutil.Process(controller)  # (kept: it knows the process, should its pid be reused)
except psutil.NoSuchProcess:
    controller = None
while os.getppid() == notebook:
    time.sleep(0.5)
if controller is not None:
    try:
        family = [controller, *controller.children(recursive=True)]
        controller.terminate()  # it ends its own processes (schedulers, heart monitor)
        for process in psutil.wait_procs(family, timeout=5)[1]:
            process.kill()
    except psutil.NoSuchProcess:  # it had ended
        pass
if folder:
    shutil.rmtree(folder, ignore_errors=True)
"""


def _start_watcher(controller_pid: int | None, cluster_dir: str | None) -> subprocess.Popen | None:
    """A small process that ends the controller and removes ``cluster_dir`` if this notebook dies first.

    The engines' watchdogs (:func:`engine.prepare`) end the engines then, but a notebook can die after its
    engines have stopped and before the controller has: Jupyter kills a kernel that takes more than 5 s to
    shut down, which a stop at exit on loaded cores can. :meth:`Workbench.stop` ends the watcher when done.
    It has a session of its own, so that a Ctrl-C in a terminal does not end it with the notebook.
    """
    if controller_pid is None:  # a controller started elsewhere is not this notebook's to end
        return None
    return subprocess.Popen([sys.executable, "-c", _WATCHER, str(os.getpid()), str(controller_pid), cluster_dir or ""],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)


def _link_socket_names(private_dir: str) -> None:
    """Make the controller's Unix-domain sockets reachable under the names its engines and clients use.

    ipyparallel's controller binds socket ``N`` of an ``ipc://PATH`` interface at ``PATH-N``, but its engines
    and clients connect to ``PATH:N``: a symbolic link under the second name makes both meet (zeromq retries
    a connection until the name exists, so the links may come after the engines have started).
    """
    security = os.path.join(private_dir, "security")
    for name in os.listdir(security):
        if not name.endswith(("-engine.json", "-client.json")):
            continue
        with open(os.path.join(security, name)) as f:
            info = json.load(f)
        transport, _, path = info["interface"].partition("://")
        if transport != "ipc":
            continue
        for value in info.values():
            for port in value if isinstance(value, list) else [value]:
                if isinstance(port, int) and not isinstance(port, bool):
                    link = f"{path}:{port}"
                    if not os.path.lexists(link):
                        os.symlink(f"{os.path.basename(path)}-{port}", link)


def _engine_environment(backend: str, local: bool) -> dict:
    """What engines start with: this package on their path (functions go by reference, so engines import
    ``workbench.engine``), and ``IRIS_BACKEND`` unless the backend is ``"auto"``.

    Why the backend here and not only in :func:`engine.prepare`: unpickling the first function an engine is sent
    imports ``workbench``, which imports ``iris``, before ``prepare`` runs. On a GPU machine that import chose
    the cuda backend, so iris's ``DeviceContext`` was built for the GPU compiler, and a ``--backend cpu`` rank
    then failed in every kernel that calls its methods (``store() missing 1 required positional argument:
    'to_rank'``).

    Ranks on one host (``local``) talk over the loopback interface only: gloo's and NCCL's sockets listen on
    it rather than on an address the network reaches (unless the notebook's environment chose an interface).
    """
    path = os.environ.get("PYTHONPATH", "")
    environment = {"PYTHONPATH": _PACKAGE_ROOT + (os.pathsep + path if path else "")}
    if backend != "auto":
        environment["IRIS_BACKEND"] = backend
    if local:
        loopback = _loopback_interface()
        for variable in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            if loopback is not None and variable not in os.environ:
                environment[variable] = loopback
    return environment


def _backend_to_come(backend: str) -> str:
    """The backend local ranks will use for ``backend`` ("auto": cuda when a GPU is visible, as each rank decides)."""
    return backend if backend != "auto" else ("cuda" if gpu_visible() else "cpu")


def _loopback_interface() -> str | None:
    """The name of this host's loopback network interface (``lo`` on Linux), None if it has none."""
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address.startswith("127.") for a in addresses):
            return name
    return None


__all__ = ["CellReport", "RankError", "Workbench", "WorkbenchError", "cell_filename", "describe_exit", "local_ranks",
           "simulated_hosts"]
