"""Another user's attempts on a running cluster: run by :mod:`workbench.classroom_check`, never imported.

A script of the standard library alone, started as root with ``--uid``/``--gid``: it imports what it needs, drops
to that user at once (no supplementary groups, no capabilities left), and from then on is that user. It reads the
cluster's description (what the owner knows of it: folder, sockets, pids, ports, channels) from a JSON file, tries
each thing below, prints one JSON list of ``{"target", "attempt", "outcome", "detail"}`` and then holds what a
second cluster of its own would take (loopback ports, names in /dev/shm like the owner's) until its standard input
closes, when it removes what it made.

``outcome`` is ``"refused"`` (the system said no), ``"no effect"`` (it was taken but did nothing: the owner's
next cell checks the numbers) or ``"REACHED"`` (it read or changed something of the owner's).
"""

import encodings.idna  # noqa: F401  (socket's name lookups import it lazily: after the drop it cannot be read)
import errno
import json
import os
import re
import signal
import socket
import struct
import sys

SHM = "/dev/shm"
JUNK = b"\x00" * 8 + b"not yours" * 32
SEQUENCE_NUMBERS = 64  # gloo's listener reads a sequence number from each connection first: try the small ones
HELD_PORTS = 64


def main():
    uid, gid, description = int(sys.argv[2]), int(sys.argv[4]), sys.argv[5]
    with open(description) as f:
        cluster = json.load(f)
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if os.getuid() == 0 or os.geteuid() == 0:
        raise SystemExit("could not drop root's rights")
    results = []
    for attempt in (_folder, _sockets, _shm_files, _processes, _abstract_sockets, _tcp_ports, _files):
        results.extend(attempt(cluster))
    held = _hold(cluster)
    print(json.dumps(results), flush=True)
    sys.stdin.read()  # the owner restarts its cluster meanwhile; its closing our stdin ends the hold
    for sock in held["sockets"]:
        sock.close()
    for path in held["files"]:
        os.unlink(path)


def _result(target, attempt, outcome, detail=""):
    return {"target": target, "attempt": attempt, "outcome": outcome, "detail": detail}


def _refused(target, attempt, err):
    how = errno.errorcode.get(err.errno, str(err.errno)) if isinstance(err, OSError) else type(err).__name__
    return _result(target, attempt, "refused", how)


def _folder(cluster):
    """List the cluster's folder, open each file in it for reading and writing, create a file there."""
    folder, out = cluster["folder"], []
    try:
        os.listdir(folder)
        out.append(_result(folder, "list the cluster's folder", "REACHED"))
    except OSError as err:
        out.append(_refused(folder, "list the cluster's folder", err))
    for path in cluster["files"]:
        for mode, what in ((os.O_RDONLY, "read"), (os.O_WRONLY, "write")):
            try:
                os.close(os.open(path, mode))
                out.append(_result(path, f"open to {what}", "REACHED"))
            except OSError as err:
                out.append(_refused(path, f"open to {what}", err))
    try:
        os.close(os.open(os.path.join(folder, "planted"), os.O_CREAT | os.O_WRONLY, 0o666))
        out.append(_result(folder, "create a file in the cluster's folder", "REACHED"))
    except OSError as err:
        out.append(_refused(folder, "create a file in the cluster's folder", err))
    return out


def _sockets(cluster):
    """Connect to the controller's and the engines' Unix-domain sockets (zeromq over ipc)."""
    out = []
    for path in cluster["socket_files"]:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            out.append(_result(path, "connect to a controller socket", "REACHED"))
        except OSError as err:
            out.append(_refused(path, "connect to a controller socket", err))
        finally:
            sock.close()
    return out


def _shm_files(cluster):
    """Open the owner's files in /dev/shm (heaps, the race checker's shadows): by name, and any seen there."""
    out, pattern = [], re.compile(rf"^iris-workbench-heap-u{cluster['uid']}-")
    names = sorted(set(n for n in os.listdir(SHM) if pattern.match(n)) | set(cluster["shm_files"]))
    if not names:
        out.append(_result(SHM, "find the owner's heap files", "refused",
                           "none there: each is unlinked once every rank has mapped it"))
    for name in names:
        try:
            os.close(os.open(os.path.join(SHM, name), os.O_RDWR))
            out.append(_result(os.path.join(SHM, name), "open a heap file", "REACHED"))
        except OSError as err:
            out.append(_refused(os.path.join(SHM, name), "open a heap file", err))
    return out


def _processes(cluster):
    """Signal the engines (interrupt, freeze), read their memory and environment."""
    out = []
    for pid in cluster["pids"]:
        for sig in (signal.SIGINT, signal.SIGSTOP):
            try:
                os.kill(pid, sig)
                out.append(_result(f"pid {pid}", f"send {sig.name}", "REACHED"))
            except OSError as err:
                out.append(_refused(f"pid {pid}", f"send {sig.name}", err))
        for name in ("mem", "environ"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as f:
                    f.read(1)
                out.append(_result(f"/proc/{pid}/{name}", "read", "REACHED"))
            except OSError as err:
                out.append(_refused(f"/proc/{pid}/{name}", "read", err))
    return out


def _abstract_sockets(cluster):
    """Ask each rank's hang-report thread where it is, as the notebook does (abstract sockets: no file rights),
    and connect to every abstract socket of ours seen in /proc/net/unix."""
    out = []
    names = set(cluster["abstract_sockets"])
    with open("/proc/net/unix") as f:
        names |= {line.split()[-1][1:] for line in f if line.split()[-1].startswith("@iris-workbench")}
    for name in sorted(names):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(3)
        try:
            sock.connect(b"\0" + name.encode())
            sock.sendall(b'{"question": "where"}\n')
            answer = sock.recv(4096)
            outcome = "REACHED" if answer else "no effect"
            out.append(_result(f"@{name}", "ask a rank where it is", outcome,
                               f"answered {answer[:60]!r}" if answer else "closed without an answer"))
        except OSError as err:
            detail = "connected, then closed without an answer" if err.errno in (errno.EPIPE, errno.ECONNRESET) else ""
            out.append(_result(f"@{name}", "ask a rank where it is", "refused",
                               f"{detail} ({errno.errorcode.get(err.errno, err.errno)})".strip()))
        finally:
            sock.close()
    return out


def _tcp_ports(cluster):
    """Connect to each TCP port the cluster's processes listen on, from loopback and from the host's own address;
    send junk, and gloo's first message (a sequence number) for the small numbers, and keep one connection half-sent
    open while the owner works."""
    out = []
    for host, port, owner in cluster["tcp_listeners"]:
        target = f"{host}:{port} ({owner})"
        sent, refused = 0, None
        for number in range(SEQUENCE_NUMBERS):
            try:
                with socket.create_connection((host, port), timeout=2) as sock:
                    sock.sendall(struct.pack("<Q", number) + JUNK)
                    sent += 1
            except OSError as err:
                refused = err
                break
        if sent:
            out.append(_result(target, f"connect and send junk ({sent} connections)", "no effect",
                               "accepted; the owner's next cell checks its numbers"))
        else:
            out.append(_refused(target, "connect", refused))
    return out


def _files(cluster):
    """Read the owner's trace and cache files."""
    out = []
    for path in cluster["private_files"]:
        try:
            with open(path, "rb") as f:
                f.read(1)
            out.append(_result(path, "read", "REACHED"))
        except OSError as err:
            out.append(_refused(path, "read", err))
    return out


def _hold(cluster):
    """What a second cluster of this user would take while the owner starts again: loopback ports (a cluster that
    picked a port by binding and closing it could be given one of these), and names in /dev/shm made like the
    owner's heap files (one of a live engine's pid, one of a dead pid, which a careless clean-up would try to
    remove)."""
    held = {"sockets": [], "files": []}
    for _ in range(HELD_PORTS):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        held["sockets"].append(sock)
    for pid in (cluster["pids"][0], _dead_pid()):
        path = os.path.join(SHM, f"iris-workbench-heap-u{cluster['uid']}-p{pid}-00000000-r0")
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
        held["files"].append(path)
    return held


def _dead_pid():
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid += 1
    return pid


if __name__ == "__main__":
    main()
