"""Hand file descriptors to the other ranks of this host: Unix sockets with ``SCM_RIGHTS``.

A CUDA virtual-memory heap exports its physical memory as file descriptors (``cuMemExportToShareableHandle``);
a peer process can use such a descriptor only once the kernel has copied it into that process. Sockets in
Linux's abstract namespace do that with no file to clean up (the name dies with the socket), and work inside
a container, where ``pidfd_getfd`` is often refused (it needs ptrace rights over the peer). Both ends check
who is on the other side (``SO_PEERCRED``): only the ranks' own processes get or give descriptors.

Examples
--------
>>> received = share_fds(group, [fd], peers=[0, 1])      # doctest: +SKIP
>>> received[1]                                          # rank 1's descriptors, now this process's  # doctest: +SKIP
[17]
"""

from __future__ import annotations

import os
import secrets
import socket
import struct

MAX_FDS_PER_MESSAGE = 250  # the kernel takes at most 253 (SCM_MAX_FD) in one message
TIMEOUT_S = 120.0
_COUNT = struct.Struct("<q")
_PEERCRED = struct.Struct("3i")  # pid, uid, gid


def share_fds(group, fds: list[int], peers) -> dict[int, list[int]]:
    """Give ``fds`` to every rank that asks for this rank's, and receive those of the ranks in ``peers``.

    Collective over the whole group (every rank calls it, with an empty ``peers`` if it wants nothing). The
    caller keeps ``fds`` and owns the descriptors received: close both when done.

    Parameters
    ----------
    group : iris.base.distributed.HostGroup
        The ranks; those that exchange descriptors must run on one host (one network namespace).
    fds : list of int
        This rank's descriptors, given in this order to each rank that asks.
    peers : iterable of int
        The ranks whose descriptors this rank receives (this rank itself is skipped).

    Returns
    -------
    dict
        Rank -> its descriptors in its order, for every rank of ``peers`` but this one.
    """
    me = group.rank
    peers = sorted(set(int(r) for r in peers) - {me})
    token = secrets.token_hex(8)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    received: dict[int, list[int]] = {}
    try:
        listener.bind(_address(token))
        listener.listen(max(1, group.world_size))
        listener.settimeout(TIMEOUT_S)
        everyone = group.all_gather_object((os.getpid(), token, peers))
        askers = {pid: rank for rank, (pid, _, wanted) in enumerate(everyone) if me in wanted}
        clients = {rank: _connect(everyone[rank], rank, me) for rank in peers}
        try:
            for _ in askers:
                connection, _ = listener.accept()
                with connection:
                    rank = askers.get(_peer_pid(connection))
                    if rank is None:
                        raise PermissionError(f"rank {me}: a process that is no rank of this group asked for this "
                                              "rank's heap descriptors; refused")
                    _send(connection, fds)
            for rank, client in clients.items():
                received[rank] = _receive(client, rank, me)
        finally:
            for client in clients.values():
                client.close()
    except BaseException:
        for got in received.values():
            for fd in got:
                os.close(fd)
        raise
    finally:
        listener.close()
    return received


def _address(token: str) -> bytes:
    return b"\0iris-workbench-fds-" + token.encode()  # abstract namespace: no file, gone with the socket


def _connect(peer, rank: int, me: int) -> socket.socket:
    pid, token, _ = peer
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(TIMEOUT_S)
    try:
        client.connect(_address(token))
    except OSError as err:
        client.close()
        raise RuntimeError(
            f"rank {me}: cannot reach rank {rank}'s socket to receive its heap's memory ({err}): ranks that map "
            "each other's CUDA virtual-memory heaps must run on one host, in one network namespace (one container)"
        ) from err
    if _peer_pid(client) != pid:
        client.close()
        raise PermissionError(f"rank {me}: the socket of rank {rank} is held by another process; refused")
    return client


def _peer_pid(connection: socket.socket) -> int:
    pid, _, _ = _PEERCRED.unpack(connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return pid


def _send(connection: socket.socket, fds: list[int]) -> None:
    connection.sendall(_COUNT.pack(len(fds)))
    for start in range(0, len(fds), MAX_FDS_PER_MESSAGE):
        socket.send_fds(connection, [b"f"], fds[start:start + MAX_FDS_PER_MESSAGE])


def _receive(client: socket.socket, rank: int, me: int) -> list[int]:
    header = b""
    while len(header) < _COUNT.size:
        chunk = client.recv(_COUNT.size - len(header))
        if not chunk:
            raise RuntimeError(f"rank {me}: rank {rank} closed its socket before sending its heap's descriptors")
        header += chunk
    (count,) = _COUNT.unpack(header)
    fds: list[int] = []
    try:
        while len(fds) < count:
            _, got, _, _ = socket.recv_fds(client, 1, MAX_FDS_PER_MESSAGE)
            if not got:
                raise RuntimeError(f"rank {me}: rank {rank} sent {len(fds)} of its {count} heap descriptors")
            fds.extend(got)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds
