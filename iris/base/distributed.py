"""The host-side process group iris uses to exchange small Python objects between ranks (gloo), and upstream
Iris's host helper :func:`distributed_allgather_multidim`.

``torch.distributed`` is initialised from the torchrun variables (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``) when it is not yet initialised, or as a world of one. When the user
already initialised it with another backend (NCCL), iris makes a gloo group of its own beside it, because
its exchanges are of host objects.

Examples
--------
>>> group = HostGroup.from_environment()          # doctest: +SKIP
>>> group.all_gather_object(group.rank)           # doctest: +SKIP
[0, 1, 2, 3]
"""

from __future__ import annotations

import atexit
import os
import pickle
from datetime import timedelta

import numpy as np
import torch.distributed as dist

_TIMEOUT = timedelta(seconds=float(os.environ.get("IRIS_TIMEOUT", "1800")))


class HostGroup:
    """A gloo process group over all ranks, for collective exchange of small host objects."""

    def __init__(self, group, rank: int, world_size: int):
        self.group = group
        self.rank = rank
        self.world_size = world_size

    @classmethod
    def from_environment(cls) -> HostGroup:
        """Initialise torch.distributed if needed and return the group iris exchanges over."""
        if not dist.is_initialized():
            if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
                return cls._initialise(init_method="env://")
            # A world of one needs no rendezvous: an in-process store is enough.
            return cls._initialise(store=dist.HashStore(), rank=0, world_size=1)
        group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo", timeout=_TIMEOUT)
        if group is not None:
            atexit.register(_destroy_at_exit, group)
        return cls(group, dist.get_rank(), dist.get_world_size())

    @classmethod
    def join(cls, store, rank: int, world_size: int) -> HostGroup:
        """Initialise torch.distributed's default group (gloo) over ``store``, as rank ``rank`` of ``world_size``.

        For launchers that meet their ranks through a store of their own rather than ``MASTER_ADDR`` and
        ``MASTER_PORT``: the workbench's local clusters use a ``dist.FileStore`` in the cluster's private
        folder, which no other user can open. An ``Iris`` context made afterwards uses this group.

        Examples
        --------
        >>> store = dist.FileStore("/tmp/iris-cluster-x/rendezvous", 2)          # doctest: +SKIP
        >>> group = HostGroup.join(store, rank, 2)                                 # doctest: +SKIP
        """
        if dist.is_initialized():
            raise RuntimeError(f"rank {rank}: torch.distributed is initialised already: HostGroup.join makes the "
                               "default group itself; use HostGroup.from_environment() to join an existing one")
        return cls._initialise(store=store, rank=rank, world_size=world_size)

    @classmethod
    def _initialise(cls, **rendezvous) -> HostGroup:
        """Make the default group (gloo) iris owns, and destroy it at exit."""
        dist.init_process_group("gloo", timeout=_TIMEOUT, **rendezvous)
        atexit.register(_destroy_at_exit, None)  # None: the default group, and with it every other
        return cls(None, dist.get_rank(), dist.get_world_size())

    def all_gather_object(self, obj) -> list:
        """Every rank's ``obj``, in rank order."""
        out = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def broadcast_object(self, obj, src: int = 0):
        """``src``'s ``obj`` on every rank."""
        box = [obj]
        dist.broadcast_object_list(box, src=src, group=self.group)
        return box[0]

    def barrier(self) -> None:
        """Wait until every rank reaches this point."""
        dist.barrier(group=self.group)


class StoreHostGroup(HostGroup):
    """A :class:`HostGroup` that exchanges through a torch.distributed store instead of a process group.

    For a context made while torch.distributed is still starting: the ``iris`` backend
    (:mod:`iris.distributed`) builds its heap inside ``dist.init_process_group("iris")``, before any group
    exists, over the store that call made. Each exchange writes one key per rank; the last rank to read a
    round's keys deletes them, so the store does not grow with the exchanges. ``group`` is None: code that
    calls torch.distributed itself (``iris.perf``) uses the default group, which is then iris's own.

    Examples
    --------
    >>> group = StoreHostGroup(store, rank, world_size)        # doctest: +SKIP
    >>> group.all_gather_object(rank)                          # doctest: +SKIP
    [0, 1]
    """

    def __init__(self, store, rank: int, world_size: int):
        super().__init__(None, rank, world_size)
        self._store = dist.PrefixStore("iris-host-group/", store)
        self._round = 0

    def all_gather_object(self, obj) -> list:
        """Every rank's ``obj``, in rank order."""
        key = self._next_round()
        self._store.set(f"{key}/{self.rank}", pickle.dumps(obj))
        out = [pickle.loads(self._store.get(f"{key}/{r}")) for r in range(self.world_size)]
        self._done_reading(key, [f"{key}/{r}" for r in range(self.world_size)])
        return out

    def broadcast_object(self, obj, src: int = 0):
        """``src``'s ``obj`` on every rank."""
        key = self._next_round()
        if self.rank == src:
            self._store.set(f"{key}/value", pickle.dumps(obj))
        value = pickle.loads(self._store.get(f"{key}/value"))
        self._done_reading(key, [f"{key}/value"])
        return value

    def barrier(self) -> None:
        """Wait until every rank reaches this point."""
        self.all_gather_object(None)

    def _next_round(self) -> str:
        self._round += 1  # every rank makes the same exchanges in the same order, so rounds agree
        return str(self._round)

    def _done_reading(self, key: str, keys: list[str]) -> None:
        if self._store.add(f"{key}/read", 1) == self.world_size:  # the last reader: nobody needs them now
            for name in [*keys, f"{key}/read"]:
                self._store.delete_key(name)


def distributed_allgather_multidim(data, group=None) -> np.ndarray:
    """Every rank's ``data`` (an array of the same shape and dtype on every rank), flattened: row ``r`` of the
    ``(world, data.size)`` numpy result is rank ``r``'s. Collective over ``group`` (default: the whole world).

    Upstream Iris's host helper (``iris.host.distributed.helpers``), for small host-side tables such as a
    paged-attention block table. The arrays travel as Python objects, so any backend (gloo or NCCL) carries them.

    Examples
    --------
    >>> tables = distributed_allgather_multidim(np.arange(6).reshape(2, 3) + 10 * rank)   # doctest: +SKIP
    >>> tables.shape                                                                       # doctest: +SKIP
    (2, 6)
    """
    if not dist.is_initialized():
        raise RuntimeError("distributed_allgather_multidim: torch.distributed is not initialised: call "
                           "dist.init_process_group (or make an iris context, which does) first")
    array = np.asarray(data)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    arrays = [None] * world
    dist.all_gather_object(arrays, array, group=group)
    different = [r for r, other in enumerate(arrays) if other.shape != array.shape or other.dtype != array.dtype]
    if different:
        raise ValueError(f"rank {rank}: distributed_allgather_multidim: this rank's array is {array.shape} "
                         f"{array.dtype} but rank {different[0]}'s is {arrays[different[0]].shape} "
                         f"{arrays[different[0]].dtype}: every rank must pass the same shape and dtype")
    return np.stack(arrays).reshape(world, -1)


def _destroy_at_exit(group) -> None:
    """Destroy the group iris made (``None``: the default group it initialised) while Python is still whole.

    Left to interpreter shutdown, gloo's worker threads may still hold the tensors of the last exchange, and
    freeing them then aborts the process ("terminate called without an active exception", SIGABRT): seen
    when a rank exited right after sending a broadcast. A group the user destroyed already is left alone.
    """
    if not dist.is_initialized():
        return
    try:
        dist.destroy_process_group(group)  # None: the default group, and with it every other
    except ValueError:  # the user destroyed this sub-group already
        pass
