"""Is one student's cluster out of another's reach? The check whoever runs a class runs on their server, as root.

::

    sudo .venv/bin/python -m workbench.classroom_check                # as a throwaway user, removed afterwards
    sudo .venv/bin/python -m workbench.classroom_check --user alice   # as an existing student account

It starts a cluster of the invoking user (CPU ranks unless ``--backend cuda``), checks a cell's numbers, and then,
as the other user (:mod:`workbench.classroom_attack`: a process that drops root's rights to that user's at once),
tries everything a student could against it: list and open the cluster's folder, its files and its sockets; open
its heaps in /dev/shm; signal its engines and read their memory; ask its ranks where they are on their abstract
sockets; connect to every TCP port its processes listen on and send junk there; read its cache files. While that
user holds loopback ports and names in /dev/shm made like the owner's (what a colliding cluster would take), the
owner runs the cell again, restarts the cluster, runs it a third time and stops it. Every attempt must be refused
or have no effect, and every cell must give the same, right numbers.

Root is needed to become another user, not by the cluster: root itself sees everything, which no check can change.

Examples
--------
>>> report = run_check(user=None, n=2)          # doctest: +SKIP
>>> print(report)                               # doctest: +SKIP
the other user (iris-check-3f9a, uid 998) tried 41 things against a 2-rank cpu cluster of root: ...
>>> report.ok                                   # doctest: +SKIP
True
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from .cluster import Workbench
from .report import WorkbenchError
from .whereabouts import address

ATTACKER = Path(__file__).with_name("classroom_attack.py")
ATTACK_SECONDS = 300.0

# The owner's cell: the host group (gloo; a group made after the other user's connections, too) and the heaps
# (every rank reads every other rank's tensor). ``expected(n)`` says what each rank must answer.
CELL = """
import torch.distributed as dist
_t = torch.full((8,), float(rank + 1)); dist.all_reduce(_t)
_g = dist.new_group(); _u = torch.full((4,), float(rank)); dist.all_reduce(_u, group=_g); dist.destroy_process_group(_g)
_x = ctx.full((16,), float(10 * (rank + 1)), dtype=torch.float32); ctx.barrier()
_seen = [float(ctx.as_remote(_x, r).sum()) if r != rank else float(_x.sum()) for r in range(world_size)]
classroom_numbers = (float(_t[0]), float(_u[0]), _seen)
"""


def expected(n: int) -> tuple:
    """What every rank's ``classroom_numbers`` must be after :data:`CELL`."""
    return (float(n * (n + 1) // 2), float(n * (n - 1) // 2), [160.0 * (r + 1) for r in range(n)])


@dataclass
class CheckReport:
    """What the other user tried and what came of it, and whether the owner's cells kept their numbers."""

    user: str
    uid: int
    owner: str
    n: int
    backend: str
    attempts: list[dict] = field(default_factory=list)
    owner_checks: list[tuple[str, bool, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (bool(self.attempts) and all(a["outcome"] != "REACHED" for a in self.attempts)
                and bool(self.owner_checks) and all(ok for _, ok, _ in self.owner_checks))

    def table(self) -> str:
        """The attempts and the owner's checks, a line each."""
        rows = [f"{'outcome':9}  {'attempt':44}  target (detail)"]
        rows += [f"{a['outcome']:9}  {a['attempt'][:44]:44}  {a['target']}" + (f" ({a['detail']})" if a["detail"]
                                                                            else "") for a in self.attempts]
        rows += [f"{'ok' if ok else 'FAILED':9}  {'the owner: ' + what:44}  {detail}"
                 for what, ok, detail in self.owner_checks]
        return "\n".join(rows)

    def __str__(self) -> str:
        reached = [a for a in self.attempts if a["outcome"] == "REACHED"]
        failed = [what for what, ok, _ in self.owner_checks if not ok]
        verdict = ("nothing of the owner's was reached and every cell kept its numbers" if self.ok else
                   f"{len(reached)} attempts REACHED the owner's cluster; owner checks failed: {failed or 'none'}")
        return (f"the other user ({self.user}, uid {self.uid}) tried {len(self.attempts)} things against a "
                f"{self.n}-rank {self.backend} cluster of {self.owner}: {verdict}\n{self.table()}")


def run_check(user: str | None = None, n: int = 2, backend: str = "cpu", heap_size: str = "16MiB") -> CheckReport:
    """Start a cluster, attack it as ``user`` (None: a throwaway user made and removed here), and report.

    Raises :class:`WorkbenchError` when not run as root (only root can act as another user) or when ``user`` is
    root (root reaches everything: not a student).
    """
    if os.geteuid() != 0:
        raise WorkbenchError("the classroom check must run as root (sudo): it acts as another user against a "
                             "cluster of yours, and only root can become another user")
    with _other_user(user) as (name, uid, gid):
        wb = Workbench(n=n, backend=backend, heap_size=heap_size, progress=False)
        report = CheckReport(name, uid, pwd.getpwuid(os.getuid()).pw_name, n, backend)
        try:
            wb.start()
            _owner_cell(wb, report, "a cell before the other user acts")
            with tempfile.TemporaryDirectory(prefix="iris-classroom-check-") as folder:
                os.chmod(folder, 0o755)  # the other user reads the description from here
                description = os.path.join(folder, "cluster.json")
                cluster = describe(wb)
                exposed = [f"{host}:{port} ({owner})" for host, port, owner in cluster["tcp_listeners"]
                           if not _loopback(host)]
                report.owner_checks.append(("every TCP port of the cluster on loopback", not exposed,
                                            f"{len(cluster['tcp_listeners'])} ports, all on loopback" if not exposed
                                            else f"reachable from the network: {', '.join(exposed)}"))
                Path(description).write_text(json.dumps(cluster))
                os.chmod(description, 0o644)
                attacker = subprocess.Popen(
                    [sys.executable, str(ATTACKER), "--uid", str(uid), "--gid", str(gid), description],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                try:
                    line = attacker.stdout.readline()
                    if not line:
                        raise WorkbenchError(f"the other user's attempts ended without a result: "
                                             f"{attacker.communicate(timeout=ATTACK_SECONDS)[1][-2000:]}")
                    report.attempts = json.loads(line)
                    _owner_cell(wb, report, "a cell after the attempts (ports held)")
                    wb.restart()
                    _owner_cell(wb, report, "restart while the other user holds ports and names")
                finally:
                    _, errors = attacker.communicate(timeout=ATTACK_SECONDS)  # closes its stdin: it lets go
                report.owner_checks.append(("the other user's process", attacker.returncode == 0,
                                            f"exit code {attacker.returncode} {errors.strip()[-300:]}".strip()))
        finally:
            stopped = wb.stop()
        report.owner_checks.append(("stop: nothing left, nothing of the other user's counted", stopped.ok,
                                    str(stopped).splitlines()[0]))
    return report


def describe(wb: Workbench) -> dict:
    """What the owner knows of ``wb`` that another user might try: folder, files, sockets, pids, ports, channels."""
    files, sockets = [], []
    for root, _, names in os.walk(wb.cluster_dir):
        for name in names:
            path = os.path.join(root, name)
            mode = os.lstat(path).st_mode
            (sockets if stat.S_ISSOCK(mode) else files if stat.S_ISREG(mode) else []).append(path)
    engines = {info["pid"]: f"rank {rank}" for rank, info in enumerate(wb.rank_info)}
    listeners = []
    for pid in wb.local_pids():
        with contextlib.suppress(psutil.Error):
            for c in psutil.Process(pid).net_connections("inet"):
                if c.status == psutil.CONN_LISTEN:
                    owner = f"{engines.get(pid, 'a cluster process')}, pid {pid}"
                    for host in _addresses_reaching(c.laddr.ip):
                        listeners.append((host, c.laddr.port, owner))
    from iris.ccl.tuning import cache_path

    return {
        "uid": os.getuid(), "folder": wb.cluster_dir, "files": files, "socket_files": sockets,
        "pids": list(engines), "shm_files": [], "tcp_listeners": listeners,
        "abstract_sockets": [address(wb.hang_channel, rank)[1:] for rank in range(wb.n)] if wb.hang_channel else [],
        "private_files": [str(p) for p in (cache_path().parent, cache_path()) if p.exists()],
    }


def _addresses_reaching(ip: str) -> list[str]:
    """Where another user would connect to a socket bound to ``ip``: loopback, and the host's own address when it
    is bound to every interface."""
    if ip in ("0.0.0.0", "::"):
        return ["127.0.0.1", socket.gethostbyname(socket.gethostname())]
    return [ip]


def _loopback(host: str) -> bool:
    return host == "::1" or host.startswith("127.")


def _owner_cell(wb: Workbench, report: CheckReport, what: str) -> None:
    result = wb.run(CELL, timeout=120)
    if not result.ok:
        report.owner_checks.append((what, False, str(result)[:300]))
        return
    answers, want = wb.pull("classroom_numbers"), expected(wb.n)
    wrong = [rank for rank, got in enumerate(answers) if tuple(got) != want]
    report.owner_checks.append((what, not wrong, "every rank's numbers right" if not wrong else
                                f"ranks {wrong} wrong: {[answers[r] for r in wrong]}, expected {want}"))


@contextlib.contextmanager
def _other_user(name: str | None):
    """(name, uid, gid) of the account to act as: ``name``, or a system account made now and removed after."""
    if name is not None:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise WorkbenchError(f"there is no user {name!r} on this machine: name a student's account, or leave "
                                 "--user out to use a throwaway one") from None
        if entry.pw_uid == 0:
            raise WorkbenchError(f"{name!r} is root, who reaches everything: name a student's account")
        yield name, entry.pw_uid, entry.pw_gid
        return
    if shutil.which("useradd") is None:
        raise WorkbenchError("useradd is not on this machine: name an existing student account with --user")
    name = f"iris-check-{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True,
                   capture_output=True)
    try:
        entry = pwd.getpwnam(name)
        yield name, entry.pw_uid, entry.pw_gid
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workbench.classroom_check", description=__doc__.split("\n")[0])
    parser.add_argument("--user", help="a student's account to act as (default: a throwaway one)")
    parser.add_argument("-n", type=int, default=2, help="ranks of the owner's cluster (default 2)")
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--heap", default="16MiB", help="heap per rank (default 16MiB)")
    args = parser.parse_args(argv)
    try:
        report = run_check(args.user, args.n, args.backend, args.heap)
    except WorkbenchError as err:
        print(f"classroom check: {err}", file=sys.stderr)
        return 2
    print(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
