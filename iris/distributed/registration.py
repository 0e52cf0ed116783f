"""``"iris"`` as a torch.distributed backend: its registration, its options, and what its groups share.

``import iris`` registers the backend (:func:`register`); then ``dist.init_process_group("iris")`` makes this
rank's :class:`iris.Iris` context over the rendezvous that call made, and every group on the backend
(``dist.new_group(ranks, backend="iris")``, or any group when the default is iris) runs on that context's heap.
A program that made its own context first (``ctx = iris.iris(...)``, which starts gloo) gives it to the groups
it makes afterwards with ``iris.distributed.register(ctx)``.

Examples
--------
>>> import iris, torch.distributed as dist
>>> dist.init_process_group("iris")                                          # torchrun's variables  # doctest: +SKIP
>>> dist.init_process_group("iris", pg_options=iris.distributed.Options(heap_size="2GiB"))  # doctest: +SKIP
>>> iris.distributed.context()            # the context the groups run on     # doctest: +SKIP
"""

from __future__ import annotations

import datetime
import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..base.distributed import StoreHostGroup
from ..ccl import p2p
from ..runtime.context import Iris
from .process_group import IrisProcessGroup
from .staging import Staging

NAME = "iris"


@dataclass
class Options:
    """What ``dist.init_process_group("iris", pg_options=Options(...))`` can ask of the context it makes.

    Attributes
    ----------
    heap_size : int or str, optional
        Bytes of heap per rank; None reads ``IRIS_HEAP_SIZE``, else 1 GiB on a GPU and 256 MiB on the CPU.
    allocator_type : str, optional
        As :func:`iris.iris`'s.
    p2p_bytes : int
        The largest piece of a point-to-point message; longer ones go as several pieces. Each rank keeps two
        such slots per peer on its heap.
    """

    heap_size: int | str | None = None
    allocator_type: str | None = None
    p2p_bytes: int = 2 << 20


class Backend:
    """What the iris groups of one context share: the context, its staging buffers, point-to-point state.

    Attributes
    ----------
    ctx : iris.Iris
    staging : iris.distributed.staging.Staging
    p2p : iris.ccl.p2p.P2PState or None
        Made when the first group over every rank is made (it allocates on every rank's heap); sends and
        receives of every group use it, with global ranks.
    """

    def __init__(self, ctx: Iris, options: Options, store=None):
        across = getattr(ctx.ccl, "across", None)
        if across is not None:
            raise NotImplementedError(
                f"rank {ctx.cur_rank}: the iris backend runs inside one domain (host), and these ranks span "
                f"{len(across.domains)} ({', '.join(str(d) for d in across.domains)}): use gloo or nccl across hosts; "
                "ctx.ccl's collectives cross them (docs/hosts.md)")
        self.ctx = ctx
        self.options = options
        self.staging = Staging(ctx)
        self.p2p: p2p.P2PState | None = None
        self._store = store
        self._rounds: dict[tuple, int] = {}

    def world_group_made(self) -> None:
        """Allocate the point-to-point state, once (collective over every rank: a group of all ranks is being made)."""
        if self.p2p is None:
            self.p2p = p2p.init_p2p(self.ctx, self.options.p2p_bytes, torch.uint8)

    def _pieces(self, tensor: torch.Tensor):
        """The slot-sized pieces of ``tensor``'s bytes, each as 4-byte words where it can be (a quarter of the
        elements to copy); sender and receiver cut alike, and a piece's bytes are what the receiver checks."""
        flat = tensor.view(-1).view(torch.uint8)
        step = self.p2p.slot_bytes
        pieces = [flat[start:start + step] for start in range(0, flat.numel(), step)]
        return [piece.view(torch.int32) if piece.numel() % 4 == 0 and piece.data_ptr() % 4 == 0 else piece
                for piece in pieces]

    def _p2p_state(self, what: str):
        if self.p2p is None:
            raise RuntimeError(f"rank {self.ctx.cur_rank}: {what} on the iris backend needs an iris group over every "
                               "rank first (dist.init_process_group('iris'), or dist.new_group(backend='iris') of "
                               "all ranks), which makes the point-to-point state on every heap")
        return self.p2p

    def send(self, tensor: torch.Tensor, dst: int, tag: int) -> None:
        """Send ``tensor`` to global rank ``dst``, in pieces of a slot each (iris.ccl.p2p)."""
        state = self._p2p_state("send")
        data = tensor.to(self.ctx.get_device()).contiguous()
        for piece in self._pieces(data):
            p2p.send(self.ctx, piece, dst, state, None, tag)

    def recv(self, tensor: torch.Tensor, src: int, tag: int) -> None:
        """Receive into ``tensor`` the next message of global rank ``src``."""
        state = self._p2p_state("recv")
        device = self.ctx.get_device()
        into = tensor if tensor.is_contiguous() and tensor.device == device else torch.empty_like(
            tensor, device=device, memory_format=torch.contiguous_format)
        for piece in self._pieces(into):
            p2p.recv(self.ctx, piece, src, state, None, tag)
        if into is not tensor:
            tensor.copy_(into)

    def monitored_barrier(self, ranks: tuple, me: int, timeout, wait_all_ranks: bool) -> None:
        """A host barrier over the store: the group's first member names who did not arrive within ``timeout``."""
        store = self._store
        if store is None:
            raise RuntimeError(f"rank {self.ctx.cur_rank}: monitored_barrier needs the group's store; this context "
                               "was given to the backend by iris.distributed.register(ctx), which has none")
        number = self._rounds[ranks] = self._rounds.get(ranks, 0) + 1
        key = f"iris-monitored/{','.join(map(str, ranks))}/{number}"
        store.set(f"{key}/{me}", "1")
        if me != 0:
            store.wait([f"{key}/done"], timeout)
            return
        deadline = time.monotonic() + timeout.total_seconds()
        missing = []
        for member in range(1, len(ranks)):
            left = max(deadline - time.monotonic(), 0.001)
            try:
                store.wait([f"{key}/{member}"], datetime.timedelta(seconds=left))
            except RuntimeError:  # torch's store timeout
                missing.append(ranks[member])
                if not wait_all_ranks:
                    break
        if missing:
            raise RuntimeError(f"rank {ranks[0]}: monitored_barrier: rank(s) {missing} did not reach the barrier "
                               f"within {timeout}")
        store.set(f"{key}/done", "1")


_shared: Backend | None = None


def context() -> Iris:
    """The :class:`iris.Iris` context this process's iris groups run on.

    Raises
    ------
    RuntimeError
        When no iris group was made and no context registered.
    """
    if _shared is None:
        raise RuntimeError("no iris group yet: call dist.init_process_group('iris') (or iris.distributed."
                           "register(ctx) with a context of yours, then dist.new_group(backend='iris'))")
    return _shared.ctx


def register(ctx: Iris | None = None, options: Options | None = None) -> None:
    """Register ``"iris"`` with torch.distributed (``import iris`` does it); with ``ctx``, the groups made from now on
    run on that context instead of one made for them.

    Examples
    --------
    >>> ctx = iris.iris("1GiB")                                        # doctest: +SKIP
    >>> iris.distributed.register(ctx)
    >>> tp = dist.new_group([0, 1], backend="iris")                     # runs on ctx's heap
    """
    global _shared
    if not dist.is_available():  # a torch built without torch.distributed: nothing to register with
        return
    if ctx is not None:
        _shared = Backend(ctx, options or Options())
    if NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu", "cuda"])


def group_of(ctx: Iris, options: Options | None = None):
    """An iris group over every rank of ``ctx``, for a program whose torch.distributed already runs another backend
    (a workbench engine's gloo, a script's NCCL): ``ctx`` is registered, and the group runs on its heap. Collective.

    Examples
    --------
    >>> group = iris.distributed.group_of(ctx)                                   # doctest: +SKIP
    >>> model = DistributedDataParallel(net, process_group=group)                 # its buckets on our kernels
    """
    register(ctx, options)
    return dist.new_group(backend=NAME)


def _default_heap(options: Options) -> int | str:
    if options.heap_size is not None:
        return options.heap_size
    return os.environ.get("IRIS_HEAP_SIZE") or ("1GiB" if torch.cuda.is_available() else "256MiB")


def _create(backend_options, pg_options) -> IrisProcessGroup:
    """torch.distributed's call for each new group on the backend (its members only)."""
    global _shared
    options = pg_options if isinstance(pg_options, Options) else Options()
    store, rank, size = backend_options.store, backend_options.group_rank, backend_options.group_size
    ranks = tuple(backend_options.global_ranks_in_group) or tuple(range(size))
    if not dist.is_initialized():  # the default group: its context is made now, over this rendezvous
        host_group = StoreHostGroup(store, rank, size)
        ctx = Iris(_default_heap(options), options.allocator_type, host_group=host_group)
        _shared = Backend(ctx, options, store)
    elif _shared is None:
        if len(ranks) != dist.get_world_size():
            raise RuntimeError(f"rank {dist.get_rank()}: dist.new_group({list(ranks)}, backend='iris') needs an iris "
                               "context over every rank: make the default group iris (dist.init_process_group("
                               "'iris')), or make a context (ctx = iris.iris()) and call "
                               "iris.distributed.register(ctx)")
        _shared = Backend(Iris(_default_heap(options), options.allocator_type), options, store)
    elif _shared._store is None:
        _shared._store = store
    group = IrisProcessGroup(_shared, ranks, rank, backend_options.group_id)
    if len(ranks) == _shared.ctx.num_ranks:
        _shared.world_group_made()
    return group
