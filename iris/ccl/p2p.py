"""Point-to-point: send, recv, sendrecv, isend/irecv and batch_isend_irecv, with upstream Iris's names.

A message goes through the receiver's heap: :func:`init_p2p` (collective, once) allocates on every rank a staging
area with, for every sender, ``DEPTH`` slots of ``max_numel`` elements of ``dtype`` (any dtype whose bytes fit may
be sent), and flags. A send writes its tensor into the next slot of the receiver's row for it (posted remote stores)
and signals the receiver; a receive waits for that signal, copies the slot into its tensor and signals the sender
that the slot is free. So the tensors themselves need not be on the heap (as upstream's ``p2p_state``), and a send
waits for its receiver only when the receiver has not yet taken the message ``DEPTH`` sends back: sends are eager,
and two ranks that send to each other before receiving do not deadlock (at most ``DEPTH`` messages ahead).

Every program of a launch moves its blocks and keeps its own flags and message counters, the counters on the device:
nothing is decided on the host per message, so calls can be captured in a CUDA graph and replayed (upstream's
cannot: its epochs are host integers). One kernel a send and one a receive, on the caller's stream: ``isend`` and
``irecv`` return a :class:`P2PWork` whose ``wait()`` is stream order (already given; ``synchronize()`` blocks the
host). Peers are ranks *of the group* (``group=None``: of the world), as upstream's. A peer on another host
(outside this rank's domain, :mod:`iris.ccl.across_domains`) is reached through torch.distributed's send and recv.

Examples
--------
>>> p2p = ctx.ccl.init_p2p(max_numel=1 << 20, dtype=torch.float32)      # every rank   # doctest: +SKIP
>>> if ctx.cur_rank == 0:
...     ctx.ccl.send(x, dst=1)                                          # x anywhere on rank 0's device
... elif ctx.cur_rank == 1:
...     ctx.ccl.recv(y, src=0)
>>> works = ctx.ccl.batch_isend_irecv([P2POp(isend, x, right), P2POp(irecv, y, left)])
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.distributed as dist
import triton
import triton.language as tl

from ..language.core import DeviceContext
from ..language.sync import flag_of, signal, wait_for
from .config import Config
from .fast_path import call_key, launch, replay
from .flag_slots import FREE, FULL
from .gluon_layouts import flat_layout, warp_threads
from .groups import members
from .launch import block_size, cdiv, programs

DEPTH = 2  # slots per sender on every receiver: how many messages a sender may be ahead of its receiver


class P2POp(NamedTuple):
    """One operation of :func:`batch_isend_irecv`, as ``torch.distributed.P2POp``: ``op`` is a send (``isend``,
    ``send``, ``ctx.ccl.isend``, ``torch.distributed.isend``...) or a receive (by its name), ``peer`` a rank of
    ``group``."""

    op: object
    tensor: torch.Tensor
    peer: int
    group: object = None
    tag: int = 0


class P2PWork:
    """What ``isend``/``irecv`` return. Our kernel runs on the caller's stream, so work queued after the call
    already comes after it: :meth:`wait` has nothing more to wait for (as a NCCL work's wait on the same stream);
    :meth:`synchronize` blocks the host until it finished. A message to or from another host goes through
    torch.distributed, whose work :meth:`wait` waits for.

    Examples
    --------
    >>> work = ctx.ccl.irecv(y, src=0); work.wait()           # doctest: +SKIP
    True
    """

    def __init__(self, ctx, network_work=None):
        self._event, self._network = None, network_work
        if ctx.backend == "cuda" and network_work is None and not torch.cuda.is_current_stream_capturing():
            self._event = torch.cuda.Event()
            self._event.record()

    def wait(self, timeout=None) -> bool:
        if self._network is not None:
            self._network.wait()
        return True

    def is_completed(self) -> bool:
        if self._network is not None:
            return self._network.is_completed()
        return self._event is None or self._event.query()

    def synchronize(self) -> None:
        if self._network is not None:
            self._network.wait()
        elif self._event is not None:
            self._event.synchronize()


class P2PState:
    """The staging slots, flags and counters of the point-to-point operations of one context; made collectively
    by :func:`init_p2p` (upstream Iris's ``p2p_state``).

    Attributes
    ----------
    max_numel, dtype : int, torch.dtype
        The largest message, in elements of ``dtype``; a message of another dtype may take as many bytes.
    slot_bytes : int
        Bytes of one slot (``max_numel`` elements, rounded up to 16).
    programs : int
        Programs of every send and receive kernel (the sender's program p fills what the receiver's program p
        empties).
    stage : torch.Tensor
        uint8 on the heap, ``[world (sender), DEPTH, slot_bytes]``.
    flags : torch.Tensor
        int32 on the heap, ``[2 (FULL, FREE), world, programs]``.
    sizes : torch.Tensor
        int64 on the heap, ``[world (sender), DEPTH]``: the bytes of the message in each slot.
    counts : torch.Tensor
        int32 on the device, ``[2 (SENT, RECEIVED), world, programs]``: messages per peer, counted by the kernels.
    arrived : torch.Tensor
        int64 on the device, ``[1]``: the size word of the message received last (read by the CPU backend's check).
    """

    def __init__(self, ctx, max_numel: int = 2 ** 20, dtype=None, config: Config | None = None):
        dtype = torch.bfloat16 if dtype is None else dtype  # upstream's default
        if isinstance(max_numel, bool) or not isinstance(max_numel, int) or max_numel < 1:
            raise ValueError(f"rank {ctx.cur_rank}: init_p2p(max_numel={max_numel!r}): give the largest message's "
                             "element count, a positive int")
        self.ctx, self.max_numel, self.dtype = ctx, max_numel, dtype
        self.config = (config or Config()).with_defaults()
        self.slot_bytes = cdiv(max_numel * dtype.itemsize, 16) * 16
        self.programs = programs(ctx, self.config, cdiv(max_numel, block_size(ctx, self.config)))
        world = ctx.num_ranks
        self.stage = ctx.zeros(world * DEPTH * self.slot_bytes, dtype=torch.uint8, name="ccl.p2p.stage")
        self.flags = ctx.zeros(2, world, self.programs, dtype=torch.int32, name="ccl.p2p.flags")
        self.sizes = ctx.zeros(world, DEPTH, dtype=torch.int64, name="ccl.p2p.sizes")
        self.counts = torch.zeros(2, world, self.programs, dtype=torch.int32, device=ctx.device)
        self.arrived = torch.zeros(1, dtype=torch.int64, device=ctx.device)  # the last message's size word
        self.launches: dict = {}  # replays (iris.ccl.fast_path)
        self._stages: dict = {}

    def kernel(self, kernel, element_size: int) -> tuple:
        """``(kernel, extra options)``: the Triton kernel, or with ``config.use_gluon`` its Gluon twin
        (:mod:`iris.ccl.gluon_p2p`, defined on first use) and the twin's ``LAYOUT``."""
        if not self.config.use_gluon:
            return kernel, {}
        from . import gluon_p2p

        layout = flat_layout(element_size, block_size(self.ctx, self.config), self.config.num_warps,
                             warp_threads(self.ctx))
        return getattr(gluon_p2p, f"gluon_{kernel.__name__}"), {"LAYOUT": layout}

    def stage_as(self, dtype: torch.dtype) -> tuple[torch.Tensor, int]:
        """The staging area as ``dtype`` elements, and one slot's length in them."""
        if dtype not in self._stages:
            if self.slot_bytes % dtype.itemsize:
                raise ValueError(f"rank {self.ctx.cur_rank}: p2p slots of {self.slot_bytes} bytes do not hold whole "
                                 f"{dtype} elements")
            self._stages[dtype] = self.stage.view(dtype)
        return self._stages[dtype], self.slot_bytes // dtype.itemsize


def init_p2p(ctx, max_numel: int = 2 ** 20, dtype=None, config: Config | None = None) -> P2PState:
    """Allocate the point-to-point state on every rank's heap; collective (every rank, in the same order).

    Parameters
    ----------
    ctx : iris.Iris
    max_numel : int
        The largest message, in elements of ``dtype``.
    dtype : torch.dtype, optional
        Default bfloat16 (upstream's); messages of other dtypes may take as many bytes.
    config : Config, optional
        ``block_size``, ``comm_sms`` (programs of every transfer) and ``num_warps``; ``use_gluon=True`` runs the
        Gluon twins of the kernels (:mod:`iris.ccl.gluon_p2p`).

    Examples
    --------
    >>> p2p = iris.ccl.init_p2p(ctx, max_numel=4096, dtype=torch.float32)      # doctest: +SKIP
    """
    return P2PState(ctx, max_numel, dtype, config)


@triton.jit
def send_kernel(context, src, n, nbytes, stage, slot_numel, flags, counts, sizes, peer: tl.constexpr,
                rank: tl.constexpr, world: tl.constexpr, DEPTH_: tl.constexpr, BLOCK: tl.constexpr,
                HINT: tl.constexpr):
    ctx = DeviceContext.initialize(context, rank, world)
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    counter = counts + peer * num_programs + pid  # SENT row
    k = tl.load(counter) + 1  # this message's number, to this peer
    wait_for(flag_of(flags, FREE, peer, pid, num_programs, world), k - DEPTH_)  # its slot was emptied
    slot = (rank * DEPTH_ + k % DEPTH_).to(tl.int64)
    box = stage + slot * slot_numel
    for block in range(pid, tl.cdiv(n, BLOCK), num_programs):
        offs = block * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(ctx.as_remote(box + offs, peer, mask, HINT), tl.load(src + offs, mask=mask), mask=mask)
    if pid == 0:
        ctx.store(sizes + slot, nbytes, peer)
    tl.debug_barrier()  # on a GPU: every thread's stores before the release
    signal(ctx, flag_of(flags, FULL, rank, pid, num_programs, world), k, peer)
    tl.store(counter, k)


@triton.jit
def recv_kernel(context, dst, n, stage, slot_numel, flags, counts, sizes, arrived, peer: tl.constexpr,
                rank: tl.constexpr, world: tl.constexpr, DEPTH_: tl.constexpr, BLOCK: tl.constexpr):
    # ``arrived`` (local): the bytes the message said it holds, read before its slot is given back (after that the
    # sender may put the next message there, size word included)
    ctx = DeviceContext.initialize(context, rank, world)
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    counter = counts + (world + peer) * num_programs + pid  # RECEIVED row
    k = tl.load(counter) + 1
    wait_for(flag_of(flags, FULL, peer, pid, num_programs, world), k)  # its program pid's blocks landed
    slot = (peer * DEPTH_ + k % DEPTH_).to(tl.int64)
    box = stage + slot * slot_numel
    for block in range(pid, tl.cdiv(n, BLOCK), num_programs):
        offs = block * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(dst + offs, tl.load(box + offs, mask=mask), mask=mask)
    if pid == 0:  # program 0's signal carried the size word (the sender's program 0 wrote it)
        tl.store(arrived, tl.load(sizes + slot))
    tl.debug_barrier()  # on a GPU: every thread's loads before the slot is given back
    signal(ctx, flag_of(flags, FREE, rank, pid, num_programs, world), k, peer)
    tl.store(counter, k)


def _state(ctx, p2p_state: P2PState | None, what: str) -> P2PState:
    state = p2p_state if p2p_state is not None else getattr(getattr(ctx, "ccl", None), "p2p_state", None)
    if state is None:
        raise ValueError(f"rank {ctx.cur_rank}: {what} needs the point-to-point state: call "
                         "ctx.ccl.init_p2p(max_numel=..., dtype=...) on every rank first (it allocates on the heap, "
                         "which is collective), then send and receive with or without p2p_state=")
    if state.ctx is not ctx:
        raise ValueError(f"rank {ctx.cur_rank}: {what} got a p2p_state made by another context; use the one "
                         "this context's init_p2p returned")
    return state


def _peer(ctx, what: str, peer, group, name: str) -> int:
    """``peer`` (a rank of ``group``) as a global rank, checked."""
    found = members(ctx, group, what)
    if isinstance(peer, bool) or not isinstance(peer, int) or not 0 <= peer < found.size:
        raise ValueError(f"rank {ctx.cur_rank}: {what} {name}={peer!r}: give a rank of the "
                         f"{'group' if found.group is not None else 'world'} ({found.size} ranks, 0 to "
                         f"{found.size - 1}); wildcard receives (src=None) are not supported")
    rank = found.ranks[peer]
    if rank == ctx.cur_rank:
        raise ValueError(f"rank {ctx.cur_rank}: {what} {name}={peer} is this rank itself; copy the tensor instead")
    return rank


def _checked(ctx, state: P2PState, what: str, tensor) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"rank {ctx.cur_rank}: {what} takes a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device != ctx.get_device():
        raise ValueError(f"rank {ctx.cur_rank}: {what} tensor is on {tensor.device}, this rank's kernels run on "
                         f"{ctx.get_device()}: move it there")
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes > state.slot_bytes:
        raise ValueError(f"rank {ctx.cur_rank}: {what} of {tensor.numel()} {tensor.dtype} elements ({nbytes} bytes) "
                         f"is over the {state.slot_bytes} bytes a p2p slot holds (init_p2p(max_numel="
                         f"{state.max_numel}, dtype={state.dtype})): call init_p2p with a larger max_numel")


def _elsewhere(ctx, peer: int) -> bool:
    """Whether ``peer`` is on another host than this rank (its heap not mapped here)."""
    across = getattr(getattr(ctx, "ccl", None), "across", None)
    return across is not None and across.domain_index[peer] != across.domain_index[ctx.cur_rank]


def isend(ctx, tensor, dst: int, p2p_state: P2PState | None = None, group=None, tag: int = 0) -> P2PWork:
    """Send ``tensor`` to rank ``dst`` of ``group``; returns at once (eager, see the module). ``tag`` is accepted
    and not matched (as NCCL's): messages between two ranks arrive in the order sent.

    Examples
    --------
    >>> work = iris.ccl.isend(ctx, x, dst=1)            # doctest: +SKIP
    """
    peer = _peer(ctx, "send", dst, group, "dst")
    if _elsewhere(ctx, peer):
        return P2PWork(ctx, dist.isend(tensor.contiguous(), peer))
    state = _state(ctx, p2p_state, "send")
    call = call_key(f"send:{peer}", (tensor,), None, False)
    if tensor.is_contiguous() and replay(ctx, state, call, (tensor,)):
        return P2PWork(ctx)
    _checked(ctx, state, "send", tensor)
    src = tensor.contiguous()
    stage, slot_numel = state.stage_as(src.dtype)
    block = block_size(ctx, state.config)
    kernel, extra = state.kernel(send_kernel, src.element_size())
    launch(state, call if src is tensor else None, (tensor,), kernel, (state.programs,),
           ctx.get_device_context(), src, src.numel(), src.numel() * src.element_size(), stage, slot_numel,
           state.flags, state.counts, state.sizes, peer=peer, rank=ctx.cur_rank, world=ctx.num_ranks,
           DEPTH_=DEPTH, BLOCK=block, HINT=16 if state.slot_bytes % 16 == 0 else None,
           num_warps=state.config.num_warps, **extra)
    return P2PWork(ctx)


def irecv(ctx, tensor, src: int, p2p_state: P2PState | None = None, group=None, tag: int = 0) -> P2PWork:
    """Receive into ``tensor`` (contiguous, of the message's size and dtype) the next message of rank ``src`` of
    ``group``. On the CPU backend a message of another size is a ValueError once it arrived; on a GPU it is not
    checked.

    Examples
    --------
    >>> work = iris.ccl.irecv(ctx, y, src=0)            # doctest: +SKIP
    """
    peer = _peer(ctx, "recv", src, group, "src")
    if _elsewhere(ctx, peer):
        return P2PWork(ctx, dist.irecv(tensor, peer))
    state = _state(ctx, p2p_state, "recv")
    call = call_key(f"recv:{peer}", (tensor,), None, False)
    if not replay(ctx, state, call, (tensor,)):
        _checked(ctx, state, "recv", tensor)
        if not tensor.is_contiguous():
            raise ValueError(f"rank {ctx.cur_rank}: recv writes its tensor in place: give a contiguous one "
                             "(receive into a buffer, then copy it where it goes)")
        stage, slot_numel = state.stage_as(tensor.dtype)
        kernel, extra = state.kernel(recv_kernel, tensor.element_size())
        launch(state, call, (tensor,), kernel, (state.programs,), ctx.get_device_context(), tensor,
               tensor.numel(), stage, slot_numel, state.flags, state.counts, state.sizes, state.arrived, peer=peer,
               rank=ctx.cur_rank,
               world=ctx.num_ranks, DEPTH_=DEPTH, BLOCK=block_size(ctx, state.config),
               num_warps=state.config.num_warps, **extra)
    if ctx.backend == "cpu":  # the kernel ran: what arrived can be compared with what was expected
        _check_size(ctx, state, peer, tensor)
    return P2PWork(ctx)


def _check_size(ctx, state: P2PState, peer: int, tensor) -> None:
    sent, expected = int(state.arrived[0]), tensor.numel() * tensor.element_size()
    if sent != expected:
        raise ValueError(f"rank {ctx.cur_rank}: recv from rank {peer} got a message of {sent} bytes into a tensor of "
                         f"{expected} bytes ({tensor.numel()} {tensor.dtype}): send and receive tensors of one size "
                         "and dtype")


def send(ctx, tensor, dst: int, p2p_state: P2PState | None = None, group=None, tag: int = 0) -> None:
    """:func:`isend`, waited for (upstream's blocking spelling; in stream order on this rank's stream)."""
    isend(ctx, tensor, dst, p2p_state, group, tag).wait()


def recv(ctx, tensor, src: int, p2p_state: P2PState | None = None, group=None, tag: int = 0) -> None:
    """:func:`irecv`, waited for."""
    irecv(ctx, tensor, src, p2p_state, group, tag).wait()


def sendrecv(ctx, send_tensor, recv_tensor, dst: int, src: int, p2p_state: P2PState | None = None,
             group=None) -> None:
    """Send ``send_tensor`` to ``dst`` and receive ``recv_tensor`` from ``src`` (a ring's step): the send first,
    which never waits for a receiver that is itself sending (see the module), then both waited for."""
    works = [isend(ctx, send_tensor, dst, p2p_state, group), irecv(ctx, recv_tensor, src, p2p_state, group)]
    for work in works:
        work.wait()


def batch_isend_irecv(ctx, p2p_op_list, p2p_state: P2PState | None = None) -> list[P2PWork]:
    """Run a list of :class:`P2POp`: every send first, in the list's order, then every receive (as upstream); one
    work per operation, in that order.

    Examples
    --------
    >>> works = iris.ccl.batch_isend_irecv(ctx, [P2POp(isend, x, 1), P2POp(irecv, y, 1)])   # doctest: +SKIP
    """
    kinds = [_kind(ctx, op) for op in p2p_op_list]
    works = [isend(ctx, op.tensor, op.peer, p2p_state, op.group, op.tag)
             for op, kind in zip(p2p_op_list, kinds, strict=True) if kind == "send"]
    return works + [irecv(ctx, op.tensor, op.peer, p2p_state, op.group, op.tag)
                    for op, kind in zip(p2p_op_list, kinds, strict=True) if kind == "recv"]


def _kind(ctx, op) -> str:
    name = getattr(op.op, "__name__", None) if isinstance(op, P2POp) or hasattr(op, "op") else None
    if name in ("isend", "send"):
        return "send"
    if name in ("irecv", "recv"):
        return "recv"
    raise ValueError(f"rank {ctx.cur_rank}: batch_isend_irecv takes P2POp(op, tensor, peer) with op a send or a "
                     f"receive (isend, irecv, send, recv), got {op!r}")
