"""A class on one machine: another user cannot reach a student's cluster, and limits are said before they bite.

The two-user test needs root (to make a throwaway user and act as it); CI runs as root. Elsewhere it is skipped,
saying why. It runs :func:`workbench.classroom_check.run_check`, the same check a class's admin runs
(``sudo .venv/bin/python -m workbench.classroom_check``), and prints the table of what was tried.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import psutil
import pytest

from iris.heap.cpu import SHM_DIR, heap_file_name, remove_stale_heap_files, shm_free_bytes
from workbench import Workbench, WorkbenchError
from workbench.classroom_check import run_check

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT or shutil.which("useradd") is None,
                                reason="acting as a second user needs root and useradd (CI runs as root)")


@needs_root
def test_another_user_reaches_nothing_of_a_running_cluster(capsys):
    report = run_check(user=None, n=2, backend="cpu")
    with capsys.disabled():  # the table of attempts goes into CI's log, passed or not
        print(f"\n{report}")
    assert report.ok, str(report)
    tried = {a["attempt"] for a in report.attempts}
    # Each channel between the ranks, and each thing of theirs, was tried (the table names each target).
    for attempt in ("list the cluster's folder", "open to read", "open to write", "connect to a controller socket",
                    "send SIGINT", "send SIGSTOP", "read", "ask a rank where it is"):
        assert attempt in tried, (attempt, sorted(tried))
    assert any(a["attempt"].startswith("connect and send junk") for a in report.attempts), "no TCP port was tried"
    assert any("rendezvous" in a["target"] for a in report.attempts), "the rendezvous store was not tried"
    checks = {what for what, _, _ in report.owner_checks}
    assert {"a cell after the attempts (ports held)", "restart while the other user holds ports and names",
            "every TCP port of the cluster on loopback"} <= checks


def test_the_check_says_what_it_cannot_do_and_starts_nothing():
    if not ROOT:
        done = subprocess.run([sys.executable, "-m", "workbench.classroom_check"], capture_output=True, text=True)
        assert done.returncode == 2, done
        assert "must run as root" in done.stderr
        return
    with pytest.raises(WorkbenchError, match="reaches everything"):
        run_check(user="root")
    with pytest.raises(WorkbenchError, match="there is no user 'no-such-student-x'"):
        run_check(user="no-such-student-x")


def test_a_cluster_whose_heaps_cannot_fit_is_refused_before_any_process_starts():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    too_big = 2 * shm_free_bytes() + (1 << 30)
    wb = Workbench(n=2, backend="cpu", heap_size=too_big, progress=False)
    with pytest.raises(WorkbenchError) as caught:
        wb.start()
    message = str(caught.value)
    assert "cannot start 2 ranks" in message and SHM_DIR in message and "free" in message, message
    assert "per rank fits now" in message and "--heap" in message, message
    assert not wb.running and wb.cluster_dir is None
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_heap_files_named_like_ours_but_owned_by_another_user_are_neither_counted_nor_removed(tmp_path):
    if not ROOT:
        pytest.skip("making a file owned by another user needs root")
    # A dead pid in the name: the clean-up of stale files would remove it if it trusted the name.
    forged = os.path.join(SHM_DIR, heap_file_name("00000000", 0).replace(f"-p{os.getpid()}-", "-p4194303-"))
    with open(forged, "w"):
        pass
    try:
        os.chown(forged, 65534, 65534)
        assert os.path.basename(forged) not in remove_stale_heap_files()
        assert os.path.exists(forged)
    finally:
        os.unlink(forged)


def test_a_cluster_across_hosts_meets_on_a_port_its_rank_0_keeps_bound():
    """No port is picked by binding and closing one: rank 0's engine serves the store on the port it bound."""
    from workbench import engine

    port = engine.open_store(2)
    served = engine.meeting_store({"host": "127.0.0.1", "port": port}, 2)
    assert served.port == port
    listening = {c.laddr.port for c in psutil.Process().net_connections("inet") if c.status == psutil.CONN_LISTEN}
    assert port in listening
    peer = (f"import torch.distributed as dist, datetime; s = dist.TCPStore('127.0.0.1', {port}, 2, "
            "is_master=False, timeout=datetime.timedelta(seconds=30)); s.set('from rank 1', 'hello')")
    subprocess.run([sys.executable, "-c", peer], check=True, timeout=60)
    assert served.get("from rank 1") == b"hello"


def test_a_cluster_on_one_host_meets_through_a_file_in_its_private_folder(tmp_path):
    from workbench import engine

    store = engine.meeting_store({"file": str(tmp_path / "rendezvous")}, 1)
    store.set("k", "v")
    assert store.get("k") == b"v" and (tmp_path / "rendezvous").exists()
