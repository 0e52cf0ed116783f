"""CPU heaps: one file in /dev/shm per rank, mapped by every rank, so kernels on the Triton interpreter read
and write other ranks' heaps through plain addresses (real cross-process memory, real CPU atomics).

Files are created with mode 0600 and unlinked as soon as every rank has mapped them: the mappings stay
valid, and nothing is left in /dev/shm even if a rank is killed with SIGKILL afterwards. A rank killed in
the few milliseconds before that leaves a file named after its pid; the next heap created on the machine
removes such files of dead processes. The race checker's shadow state (:mod:`iris.instruments.checking.shadow`) lives in
files of the same kind, one per rank too, named here with the role ``shadow``.

Examples
--------
>>> memory = ShmHeapMemory(size=1 << 20, group=group, reachable=[True, True])    # doctest: +SKIP
>>> memory.bases                                                                  # doctest: +SKIP
[139872512000000, 139872494174208]

Ranks on other hosts (``reachable[r]`` False, see :meth:`iris.heap.topology.TopologyMap.can_map`) are not mapped:
their files are neither opened nor looked for, and their base is 0.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import re
import secrets

import torch

from .chunks import DEFAULT_CHUNK_SIZE, chunk_size_for

SHM_DIR = "/dev/shm"
PREFIX = "iris-workbench-heap"
ROLES = ("heap", "shadow")  # what a file holds: a heap, or the race checker's shadow state of one
_NAME = re.compile(rf"^{PREFIX}-u(\d+)-p(\d+)-[0-9a-f]+-r\d+(-shadow)?$")


def heap_file_name(session: str, rank: int, role: str = "heap") -> str:
    """Name of rank's heap file (or of its shadow, ``role="shadow"``): says it is ours, whose (uid) and which
    process (pid) created it."""
    if role not in ROLES:
        raise ValueError(f"unknown heap file role {role!r}: use one of {ROLES}")
    suffix = "" if role == "heap" else f"-{role}"
    return f"{PREFIX}-u{os.getuid()}-p{os.getpid()}-{session}-r{rank}{suffix}"


def _heap_files() -> list[tuple[str, int]]:
    """This user's heap files in /dev/shm, each with the pid of the process that created it."""
    try:
        names = os.listdir(SHM_DIR)
    except FileNotFoundError:
        return []
    matches = ((name, _NAME.match(name)) for name in names)
    return [(name, int(m.group(2))) for name, m in matches
            if m and int(m.group(1)) == os.getuid() and _owned(os.path.join(SHM_DIR, name))]


def _owned(path: str) -> bool:
    """Whether this user owns ``path``: the name says whose a file is, but anyone may create any name in
    /dev/shm, and a file named like ours by another user is not ours to count or remove."""
    try:
        return os.lstat(path).st_uid == os.getuid()
    except FileNotFoundError:
        return False


def heap_files_of(pids) -> list[str]:
    """This user's heap files created by processes ``pids`` (e.g. a cluster's engines), sorted."""
    pids = set(pids)
    return sorted(name for name, pid in _heap_files() if pid in pids)


def remove_stale_heap_files() -> list[str]:
    """Unlink this user's heap files whose creating process is gone; return their names."""
    removed = []
    for name, pid in _heap_files():
        if process_alive(pid):
            continue
        try:
            os.unlink(os.path.join(SHM_DIR, name))
            removed.append(name)
        except FileNotFoundError:
            pass
    return removed


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (one owned by another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def shm_free_bytes() -> int:
    """Bytes free in /dev/shm now: what the heaps of this host's ranks must fit in.

    Heap files are sparse: creating them always succeeds, but touching a page that /dev/shm has no room for kills
    the process with SIGBUS. So heaps are refused up front when they do not fit (a container's /dev/shm is often
    64 MiB), here by each rank and, before any rank starts, by the workbench.
    """
    stats = os.statvfs(SHM_DIR)
    return stats.f_bavail * stats.f_frsize


def _check_room(nbytes: int, rank: int) -> None:
    room = shm_free_bytes()
    if nbytes > room:
        raise MemoryError(
            f"rank {rank}: the heaps need {nbytes} bytes of /dev/shm but it has {room} free: ask for a smaller "
            "heap_size, or give the machine (container) a larger /dev/shm"
        )


def _address_of(mapping: mmap.mmap) -> int:
    probe = ctypes.c_uint8.from_buffer(mapping)
    address = ctypes.addressof(probe)
    del probe  # releases the export so the mapping can be closed later
    return address


class ShmHeapMemory:
    """Every rank's heap, mapped into this process. Collective: every rank constructs it together.

    Parameters
    ----------
    size : int
        Bytes per rank (rounded up to whole pages).
    group : iris.base.distributed.HostGroup
        The ranks that share heaps.
    reachable : list of bool, optional
        ``reachable[r]``: this rank maps rank r's heap (ranks of this host); an unmapped rank's base is 0.
        None: every rank.
    """

    device = torch.device("cpu")
    granularity = mmap.PAGESIZE  # what a mapping is made of

    def __init__(self, size: int, group, reachable=None):
        self.size = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
        self._map_files(self.size, group, reachable)

    def _map_files(self, mapped: int, group, reachable) -> None:
        """Map every reachable rank's file of ``mapped`` bytes (sparse: only :attr:`size` is checked for room)."""
        self.rank = group.rank
        remove_stale_heap_files()
        reachable = reachable or [True] * group.world_size
        self._reachable_count = sum(reachable)
        _check_room(self.size * self._reachable_count, group.rank)
        self._mappings: list[mmap.mmap | None] = []
        for fd in open_rank_files(mapped, group, "heap", reachable):
            if fd is None:
                self._mappings.append(None)
                continue
            try:
                self._mappings.append(mmap.mmap(fd, mapped))
            finally:
                os.close(fd)
        self.bases = [0 if m is None else _address_of(m) for m in self._mappings]

    @property
    def chunks(self) -> list[tuple[int, int]]:
        """The pieces the heap is made of, ``(offset, bytes)``: one file, one piece."""
        return [(0, self.size)]

    def view(self, rank: int, offset: int, nbytes: int):
        """``(tensor, owner)``: a 1-D uint8 tensor over ``nbytes`` of rank's heap from ``offset``.

        The tensor has a storage of its own that keeps ``owner`` alive; ``owner`` keeps the mapping
        alive, so the memory outlives the heap object as long as a tensor uses it.
        """
        owner = (ctypes.c_uint8 * nbytes).from_address(self.bases[rank] + offset)
        owner.memory = self
        return torch.frombuffer(owner, dtype=torch.uint8), owner

    def synchronize(self) -> None:
        """Nothing to wait for: the interpreter runs kernels synchronously."""

    def copy_2d(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """``dst.copy_(src)`` (on a GPU, one ``cudaMemcpy2DAsync``; here, torch's)."""
        dst.copy_(src)


class ShmChunkedHeapMemory(ShmHeapMemory):
    """Upstream Iris's ``allocator_type="vmem_chunked"`` on the CPU backend: a heap that grows a chunk at a time, at
    fixed bases. Collective: every rank constructs it, and grows it, together.

    What is honest here: a GPU's chunked heap maps physical memory a chunk at a time into an address range reserved
    up front, so that it grows without moving. /dev/shm gives the same with one sparse file per rank, mapped whole at
    the start at the size of /dev/shm itself (address space, not memory: a tmpfs page takes memory only once touched),
    of which the heap uses ``size`` bytes: growing is taking more chunks of that mapping, after checking that
    /dev/shm has the room for them on every rank (touching a page /dev/shm has no room for would kill the process
    with SIGBUS). So ``chunk_size``, the chunk count, growth and the bases behave as upstream's; what differs is
    that a chunk's memory is taken when its pages are first written, not when it is mapped, and that the most a
    heap can grow to is /dev/shm's size (:attr:`reservation`), shared with every other rank of this host.

    Parameters
    ----------
    size : int
        Bytes per rank to start with, rounded up to whole chunks.
    group : iris.base.distributed.HostGroup
        The ranks that share heaps.
    reachable : list of bool, optional
        As :class:`ShmHeapMemory`'s.
    chunk_size : int
        Upstream's: what the heap grows by (:func:`iris.heap.chunks.chunk_size_for`: capped at ``size``, a power of
        two, whole pages).
    """

    def __init__(self, size: int, group, reachable=None, chunk_size: int | None = None):
        self.chunk_size = chunk_size_for(size, self.granularity, chunk_size or DEFAULT_CHUNK_SIZE)
        self.size = max(1, -(-size // self.chunk_size)) * self.chunk_size
        stats = os.statvfs(SHM_DIR)
        self.reservation = max(self.size, stats.f_blocks * stats.f_frsize // self.chunk_size * self.chunk_size)
        self._group = group
        self._map_files(self.reservation, group, reachable)

    @property
    def chunks(self) -> list[tuple[int, int]]:
        """The chunks the heap uses, ``(offset, bytes)``, in order."""
        return [(offset, self.chunk_size) for offset in range(0, self.size, self.chunk_size)]

    def grow(self, new_size: int) -> None:
        """Take whole chunks up to ``new_size`` bytes (collective: every rank passes the same size). Beyond
        :attr:`reservation`, or more than /dev/shm has room for on any rank, is a ``MemoryError`` on every rank, the
        heap unchanged."""
        new_size = -(-new_size // self.chunk_size) * self.chunk_size
        failure = None
        if new_size > self.reservation:
            failure = (f"rank {self.rank}: a heap of {new_size} bytes is beyond this heap's reservation of "
                       f"{self.reservation} bytes (the size of /dev/shm, the most it can grow to)")
        else:
            try:
                _check_room((new_size - self.size) * self._reachable_count, self.rank)
            except MemoryError as error:
                failure = str(error)
        failures = [f for f in self._group.all_gather_object(failure) if f]
        if failures:
            raise MemoryError("; ".join(failures))
        self.size = max(self.size, new_size)


def open_rank_files(size: int, group, role: str, reachable=None) -> list[int | None]:
    """Every reachable rank's file of ``role``, ``size`` bytes (sparse), open read-write; collective.

    Each rank creates its own file (mode 0600), opens every other rank's that ``reachable`` names (None:
    every rank; ranks on other hosts have their files in another /dev/shm), and unlinks its own once every
    rank has opened what it needs, so that nothing is left in /dev/shm whatever happens to the ranks later.

    Returns
    -------
    list of int or None
        File descriptors in rank order, None for a rank not reachable; the caller maps and closes them.

    Examples
    --------
    >>> fds = open_rank_files(1 << 20, group, "shadow")     # doctest: +SKIP
    """
    session = group.broadcast_object(secrets.token_hex(4) if group.rank == 0 else None)
    own_path = os.path.join(SHM_DIR, heap_file_name(session, group.rank, role))
    try:
        opened = {group.rank: os.open(own_path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)}
        try:
            os.ftruncate(opened[group.rank], size)
            paths = group.all_gather_object(own_path)
            for rank, path in enumerate(paths):
                if rank != group.rank and (reachable is None or reachable[rank]):
                    opened[rank] = _open(path, rank, group.rank)
            group.barrier()  # every rank has opened every file: the names are no longer needed
        except BaseException:
            for fd in opened.values():
                os.close(fd)
            raise
    finally:
        _unlink_quietly(own_path)
    return [opened.get(rank) for rank in range(len(paths))]


def _open(path: str, rank: int, own_rank: int) -> int:
    try:
        return os.open(path, os.O_RDWR)
    except FileNotFoundError as err:
        raise RuntimeError(
            f"rank {own_rank}: rank {rank}'s heap file {path} is missing: ranks that map each other's heaps must "
            "run on one machine and share /dev/shm; ranks on other hosts must say so (their hosts differ, or "
            "IRIS_HOST does when simulating several hosts on one machine)"
        ) from err


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
