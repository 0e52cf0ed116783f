"""``IrisProcessGroup``: torch.distributed's operations, each run by our kernels on the symmetric heap.

A process group written in Python, as torch's own tests write them (``dist.ProcessGroup`` subclassed, its
methods overridden): torch.distributed's functions, DDP's reducer, FSDP, DTensor and the functional collectives
(eager and under ``torch.compile``) call these methods, and each maps onto :mod:`iris.ccl`. Tensors come from the
caller's own memory, so each operation stages them through heap buffers (:mod:`iris.distributed.staging`) and
keeps a workspace per shape (:mod:`iris.ccl.workspace`), allocated at its first call: DDP's buckets, FSDP's
parameter groups and a tensor-parallel layer's activations repeat their shapes every step, so later steps
allocate nothing.

Ranks in the options torch passes (``rootRank``, ``dstRank``, ``srcRank``) are the group's, as ``iris.ccl``
takes them. On a GPU every operation runs on the backend's stream, after the caller's (:mod:`iris.distributed.streams`,
:mod:`iris.distributed.work`).

Every operation is named while it runs (:func:`iris.instruments.operations.operation`: torch.distributed's name of
it, the bytes this rank puts in, the group's ranks, the root), so that the traffic matrix, the race checker, the
stepper and the timeline say which collective of a training step each kernel belongs to; what it carries (a DDP
bucket, an FSDP module) is said around the call by :func:`iris.distributed.name_collectives`.

Examples
--------
>>> dist.init_process_group("iris")                       # doctest: +SKIP
>>> dist.all_reduce(grad)                                  # our all_reduce kernel, grad staged through the heap
>>> dist.get_backend()
'iris'
"""

from __future__ import annotations

import datetime
import math

import torch
import torch.distributed as dist

from .. import ccl
from ..ccl.chunks import chunk_size
from ..ccl.tuning import untuned
from ..instruments import operations
from . import reductions
from .streams import streamed
from .work import IrisWork


class IrisProcessGroup(dist.ProcessGroup):
    """The ``iris`` backend of one torch.distributed group (upstream Iris's name for it).

    Parameters
    ----------
    shared : iris.distributed.registration.Backend
        The context this process's iris groups share (heap, staging, point-to-point state).
    ranks : tuple of int
        The group's global ranks, ascending.
    rank : int
        This process's rank in the group.
    name : str
        torch.distributed's name of the group.
    """

    def __init__(self, shared, ranks: tuple, rank: int, name: str):
        super().__init__(rank, len(ranks))
        self._shared = shared
        self._ctx = shared.ctx
        self._ranks = tuple(ranks)
        self._name = name
        self._workspaces: dict[tuple, object] = {}

    # -- what torch asks of every group ---------------------------------------------------------------------
    def getBackendName(self) -> str:  # noqa: N802  (torch's name)
        return "iris"

    @property
    def group_name(self) -> str:
        return self._name

    @property
    def ctx(self):
        """The :class:`iris.Iris` context whose heap and kernels this group uses."""
        return self._ctx

    def __repr__(self) -> str:
        return f"IrisProcessGroup(rank={self.rank()}, size={self.size()}, ranks={list(self._ranks)})"

    # -- helpers ----------------------------------------------------------------------------------------------
    @property
    def _group(self):
        """What iris.ccl takes as ``group=``: None over every rank, else this (registered) group."""
        return None if len(self._ranks) == self._ctx.num_ranks else self

    def _named(self, name: str, tensors=(), root: int | None = None):
        """The body as one named operation (:mod:`iris.instruments.operations`): ``name``, the bytes of ``tensors``
        that this rank puts in, the group's ranks and the root's position among them."""
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        return operations.operation(name, nbytes, self._ranks, root)

    def _done(self, result: list, blocking: bool = False) -> IrisWork:
        return IrisWork(result, self._ctx.get_device(), blocking)

    def _call(self, collective, key: tuple, *args, **kwargs):
        """Run ``collective`` with this group and the workspace kept for ``key`` (made by its first call)."""
        key = (collective.__name__, *key)
        with untuned():  # a tuning exchanges over torch.distributed: here, over this very backend
            workspace = collective(*args, ctx=self._ctx, group=self._group, workspace=self._workspaces.get(key),
                                   **kwargs)
        self._workspaces[key] = workspace
        return workspace

    def _check(self, what: str, tensors) -> None:
        """Tensors on this rank's device, or on the CPU (staged through the device's heap, as torch's object
        collectives and ``cpu:iris,cuda:iris`` groups pass them); a tensor on another GPU is refused."""
        device = self._ctx.get_device()
        for tensor in tensors:
            if tensor.device != device and tensor.device.type != "cpu":
                raise ValueError(f"rank {self._ctx.cur_rank}: {what} on the iris backend got a tensor on "
                                 f"{tensor.device}; this rank's heap and kernels are on {device}: move it there")

    def _words(self, nbytes: int) -> torch.dtype:
        """The widest word that divides ``nbytes``: copies of any dtype run as words of it."""
        return torch.int32 if nbytes % 4 == 0 else torch.uint8

    def _staged_words(self, flat: torch.Tensor, word: torch.dtype) -> torch.Tensor:
        """The bytes ``flat`` in the input staging buffer, seen as ``word``s (copied as bytes: a slice of a float16
        tensor may start 2 bytes into its storage, where no int32 view of it exists)."""
        staged = self._shared.staging.view("input", (flat.numel() // word.itemsize,), word)
        staged.view(torch.uint8).copy_(flat)
        return staged

    def _all_gather_bytes(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every member's ``tensor`` (one size on every member), as a (members, bytes...) heap tensor in rank order."""
        flat = tensor.contiguous().view(-1).view(torch.uint8)
        word = self._words(flat.numel())
        staged = self._staged_words(flat, word)
        out = self._shared.staging.view("output", (self.size(), staged.numel()), word)
        self._call(_all_gather, (staged.numel(), word), out.view(-1), staged)
        return out.view(torch.uint8)

    def _rows(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every member's ``tensor`` as rows of ``tensor``'s dtype and shape: (members, *tensor.shape)."""
        gathered = self._all_gather_bytes(tensor)
        return gathered.view(tensor.dtype).view(self.size(), *tensor.shape)

    # -- all_reduce -------------------------------------------------------------------------------------------
    @streamed
    def allreduce(self, tensors, opts=None):
        opts = opts or dist.AllreduceOptions()
        self._check("all_reduce", tensors)
        for tensor in tensors:
            with self._named("all_reduce", [tensor]):
                self._all_reduce(tensor, opts.reduceOp)
        return self._done(list(tensors))

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts or dist.AllreduceCoalescedOptions())

    def _all_reduce(self, tensor: torch.Tensor, op) -> None:
        plan = reductions.plan(op, tensor.dtype, self._ctx.cur_rank)
        if tensor.numel() == 0:
            return
        if plan.kind == "gathered":
            tensor.copy_(reductions.reduce_rows(self._rows(tensor), plan))
            return
        staged = reductions.premultiplied(self._shared.staging.put("input", tensor, (tensor.numel(),)), plan)
        out = self._shared.staging.view("output", (tensor.numel(),), tensor.dtype)
        self._call(_all_reduce, (tensor.numel(), tensor.dtype), out, staged)
        tensor.copy_(reductions.finish(out, plan, self.size()).view(tensor.shape))

    # -- all_gather -------------------------------------------------------------------------------------------
    @streamed
    def allgather(self, output_tensors, input_tensors, opts=None):
        self._check("all_gather", input_tensors)
        for outputs, tensor in zip(output_tensors, input_tensors, strict=True):
            with self._named("all_gather", [tensor]):
                self._gather_into(outputs, tensor, "all_gather")
        return self._done([t for outputs in output_tensors for t in outputs])

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        return self.allgather(output_lists, input_tensors, opts)

    @streamed
    def all_gather_single(self, output_tensor, input_tensor, opts=None):
        self._check("all_gather_into_tensor", [input_tensor, output_tensor])
        if output_tensor.numel() != self.size() * input_tensor.numel():
            raise ValueError(f"rank {self._ctx.cur_rank}: all_gather_into_tensor: the output holds "
                             f"{output_tensor.numel()} elements, not group size {self.size()} x input's "
                             f"{input_tensor.numel()}")
        with self._named("all_gather_into_tensor", [input_tensor]):
            rows = self._rows(input_tensor)
            output_tensor.copy_(rows.reshape(output_tensor.shape))
        return self._done([output_tensor])

    _allgather_base = all_gather_single  # torch before 2.12

    def all_gather_single_coalesced(self, output_tensors, input_tensors, opts=None):
        for output_tensor, input_tensor in zip(output_tensors, input_tensors, strict=True):
            self.all_gather_single(output_tensor, input_tensor, opts)
        return self._done(list(output_tensors))

    allgather_into_tensor_coalesced = all_gather_single_coalesced  # torch before 2.12

    def _gather_into(self, outputs, tensor, what: str) -> None:
        if len(outputs) != self.size():
            raise ValueError(f"rank {self._ctx.cur_rank}: {what} needs one output tensor per rank of the group "
                             f"({self.size()}), got {len(outputs)}")
        rows = self._rows(tensor)
        for output, row in zip(outputs, rows, strict=True):
            if output.numel() != tensor.numel():
                raise ValueError(f"rank {self._ctx.cur_rank}: {what}: an output tensor holds {output.numel()} "
                                 f"elements, the input {tensor.numel()}: give every rank's tensor one size")
            output.copy_(row.view(output.shape))

    # -- reduce_scatter ---------------------------------------------------------------------------------------
    @streamed
    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        self._check("reduce_scatter", output_tensors)
        for output, inputs in zip(output_tensors, input_tensors, strict=True):
            if len(inputs) != self.size() or any(t.numel() != output.numel() for t in inputs):
                raise ValueError(f"rank {self._ctx.cur_rank}: reduce_scatter needs {self.size()} input tensors of "
                                 f"the output's {output.numel()} elements")
            with self._named("reduce_scatter", inputs):
                self._reduce_scatter(output, torch.cat([t.reshape(-1) for t in inputs]), opts.reduceOp)
        return self._done(list(output_tensors))

    @streamed
    def reduce_scatter_single(self, output_tensor, input_tensor, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        self._check("reduce_scatter_tensor", [output_tensor, input_tensor])
        if input_tensor.numel() != self.size() * output_tensor.numel():
            raise ValueError(f"rank {self._ctx.cur_rank}: reduce_scatter_tensor: the input holds "
                             f"{input_tensor.numel()} elements, not group size {self.size()} x output's "
                             f"{output_tensor.numel()}")
        with self._named("reduce_scatter_tensor", [input_tensor]):
            self._reduce_scatter(output_tensor, input_tensor.reshape(-1), opts.reduceOp)
        return self._done([output_tensor])

    _reduce_scatter_base = reduce_scatter_single  # torch before 2.12

    def reduce_scatter_single_coalesced(self, output_tensors, input_tensors, opts=None):
        for output_tensor, input_tensor in zip(output_tensors, input_tensors, strict=True):
            self.reduce_scatter_single(output_tensor, input_tensor, opts)
        return self._done(list(output_tensors))

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced  # torch before 2.12

    def _reduce_scatter(self, output: torch.Tensor, flat: torch.Tensor, op) -> None:
        plan = reductions.plan(op, flat.dtype, self._ctx.cur_rank)
        n, world, me = output.numel(), self.size(), self.rank()
        if n == 0:
            return
        if plan.kind == "gathered":
            rows = self._rows(flat)[:, me * n:(me + 1) * n]
            output.copy_(reductions.reduce_rows(rows, plan).view(output.shape))
            return
        # Our kernel's chunks are 16-element aligned (iris.ccl.chunks): each rank's block is padded to that, so
        # that member r's chunk is exactly block r.
        padded = chunk_size(world * n, world)
        staged = self._shared.staging.view("input", (world, padded), flat.dtype)
        staged[:, :n].copy_(flat.view(world, n))
        if padded > n:
            staged[:, n:].zero_()
        reductions.premultiplied(staged, plan)
        out = self._shared.staging.view("output", (world * padded,), flat.dtype)
        self._call(_reduce_scatter, (world * padded, flat.dtype), out, staged.view(-1))
        mine = reductions.finish(out[me * padded:me * padded + n], plan, world)
        output.copy_(mine.view(output.shape))

    # -- all_to_all -------------------------------------------------------------------------------------------
    @streamed
    def all_to_all_single(self, output_tensor, input_tensor, output_split_sizes, input_split_sizes, opts=None):
        self._check("all_to_all_single", [output_tensor, input_tensor])
        world = self.size()
        row_in = math.prod(input_tensor.shape[1:]) if input_tensor.dim() > 1 else 1
        row_out = math.prod(output_tensor.shape[1:]) if output_tensor.dim() > 1 else 1
        sent = list(input_split_sizes) or [input_tensor.shape[0] // world] * world if input_tensor.dim() else []
        got = list(output_split_sizes) or [output_tensor.shape[0] // world] * world if output_tensor.dim() else []
        if len(sent) != world or len(got) != world or sum(sent) * row_in != input_tensor.numel() \
                or sum(got) * row_out != output_tensor.numel():
            raise ValueError(f"rank {self._ctx.cur_rank}: all_to_all_single: split sizes {sent} (input) and {got} "
                             f"(output) must each have one entry per rank of the group ({world}) and add up to "
                             f"the tensors' first dimensions ({input_tensor.shape[0] if input_tensor.dim() else 0}, "
                             f"{output_tensor.shape[0] if output_tensor.dim() else 0})")
        esize = input_tensor.element_size()
        with self._named("all_to_all_single", [input_tensor]):
            self._exchange(output_tensor, input_tensor, [s * row_in * esize for s in sent],
                           [s * row_out * esize for s in got])
        return self._done([output_tensor])

    alltoall_base = all_to_all_single  # torch before 2.12

    @streamed
    def alltoall(self, output_tensors, input_tensors, opts=None):
        self._check("all_to_all", [*output_tensors, *input_tensors])
        if len(output_tensors) != self.size() or len(input_tensors) != self.size():
            raise ValueError(f"rank {self._ctx.cur_rank}: all_to_all needs one input and one output tensor per rank "
                             f"of the group ({self.size()})")
        inp = torch.cat([t.contiguous().view(-1).view(torch.uint8) for t in input_tensors])
        out = torch.empty(sum(t.numel() * t.element_size() for t in output_tensors), dtype=torch.uint8,
                          device=inp.device)
        with self._named("all_to_all", input_tensors):
            self._exchange(out, inp, [t.numel() * t.element_size() for t in input_tensors],
                           [t.numel() * t.element_size() for t in output_tensors])
        offset = 0
        for tensor in output_tensors:
            nbytes = tensor.numel() * tensor.element_size()
            tensor.copy_(out[offset:offset + nbytes].view(tensor.dtype).view(tensor.shape))
            offset += nbytes
        return self._done(list(output_tensors))

    def _exchange(self, output: torch.Tensor, inp: torch.Tensor, sent: list, got: list) -> None:
        """Bytes ``sent[j]`` of ``inp`` to member j, member s's ``got[s]`` bytes into ``output``, in order."""
        src = inp.contiguous().view(-1).view(torch.uint8)
        if len(set(sent)) == 1 and sent == got:  # equal chunks: our all_to_all kernel, chunk j of a row to member j
            word = self._words(sent[0])
            staged = self._staged_words(src, word).view(1, -1)
            out = self._shared.staging.view("output", staged.shape, word)
            self._call(_all_to_all, (staged.numel(), word), out, staged)
            output.view(-1).view(torch.uint8).copy_(out.view(-1).view(torch.uint8))
            return
        # Split sizes: all_to_all_v over one row of bytes per member, each as wide as its own input and output;
        # the staging buffers hold the widest of any member, so that every member grows them alike. The members
        # learn it from each other with our all_gather (over this group's members only, as the call is).
        sizes = torch.tensor([sum(sent), sum(got)], dtype=torch.int64, device=self._ctx.get_device())
        width = int(self._rows(sizes).max())
        staged = self._shared.staging.view("input", (1, width), torch.uint8)[:, :sum(sent)]
        staged[0].copy_(src)
        out = self._shared.staging.view("output", (1, width), torch.uint8)[:, :sum(got)]
        self._call(_all_to_all_v, (), out, staged, output_split_sizes=got, input_split_sizes=sent)
        output.view(-1).view(torch.uint8).copy_(out[0])

    # -- the collectives with a root ----------------------------------------------------------------------------
    @streamed
    def broadcast(self, tensors, opts=None):
        opts = opts or dist.BroadcastOptions()
        self._check("broadcast", tensors)
        for tensor in tensors:
            with self._named("broadcast", [tensor], root=opts.rootRank):
                flat = tensor.contiguous().view(-1).view(torch.uint8)
                word = self._words(flat.numel())
                staged = self._staged_words(flat, word)
                self._call(_broadcast, (staged.numel(), word, opts.rootRank), staged, src=opts.rootRank)
                tensor.copy_(staged.view(torch.uint8).view(tensor.dtype).view(tensor.shape))
        return self._done(list(tensors))

    @streamed
    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        self._check("reduce", tensors)
        root = opts.rootRank
        for tensor in tensors:
            with self._named("reduce", [tensor], root=root):
                self._reduce(tensor, opts.reduceOp, root)
        return self._done(list(tensors))

    def _reduce(self, tensor: torch.Tensor, op, root: int) -> None:
        plan = reductions.plan(op, tensor.dtype, self._ctx.cur_rank)
        if plan.kind == "gathered":
            rows = self._rows(tensor)
            if self.rank() == root:
                tensor.copy_(reductions.reduce_rows(rows, plan))
            return
        staged = reductions.premultiplied(self._shared.staging.put("input", tensor, (tensor.numel(),)), plan)
        out = self._shared.staging.view("output", (tensor.numel(),), tensor.dtype)
        self._call(_reduce, (tensor.numel(), tensor.dtype, root), out, staged, dst=root)
        if self.rank() == root:
            tensor.copy_(reductions.finish(out, plan, self.size()).view(tensor.shape))

    @streamed
    def gather(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.GatherOptions()
        self._check("gather", input_tensors)
        for index, tensor in enumerate(input_tensors):
            with self._named("gather", [tensor], root=opts.rootRank):
                self._gather(output_tensors[index] if self.rank() == opts.rootRank else None, tensor, opts.rootRank)
        return self._done([t for outputs in output_tensors for t in outputs])

    def _gather(self, outputs, tensor: torch.Tensor, root: int) -> None:
        flat = tensor.contiguous().view(-1).view(torch.uint8)
        word = self._words(flat.numel())
        staged = self._staged_words(flat, word)
        out = self._shared.staging.view("output", (self.size() * staged.numel(),), word)
        self._call(_gather, (staged.numel(), word, root), out, staged, dst=root)
        if outputs is not None:
            rows = out.view(torch.uint8).view(self.size(), -1)
            if len(outputs) != self.size():
                raise ValueError(f"rank {self._ctx.cur_rank}: gather's root needs a gather_list of one tensor "
                                 f"per rank of the group ({self.size()}), got {len(outputs)}")
            for output, row in zip(outputs, rows, strict=True):
                output.copy_(row.view(output.dtype).view(output.shape))

    @streamed
    def scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.ScatterOptions()
        self._check("scatter", output_tensors)
        for index, output in enumerate(output_tensors):
            with self._named("scatter", [output], root=opts.rootRank):
                self._scatter(output, input_tensors[index] if self.rank() == opts.rootRank else None, opts.rootRank)
        return self._done(list(output_tensors))

    def _scatter(self, output: torch.Tensor, pieces, root: int) -> None:
        nbytes = output.numel() * output.element_size()
        word = self._words(nbytes)
        staged = self._shared.staging.view("input", (self.size() * nbytes // word.itemsize,), word)
        if pieces is not None:
            if len(pieces) != self.size() or any(p.numel() != output.numel() for p in pieces):
                raise ValueError(f"rank {self._ctx.cur_rank}: scatter's root needs a scatter_list of one tensor "
                                 f"per rank of the group ({self.size()}), each of the output's {output.numel()} "
                                 "elements")
            rows = staged.view(torch.uint8).view(self.size(), nbytes)
            for row, piece in zip(rows, pieces, strict=True):
                row.copy_(piece.contiguous().view(-1).view(torch.uint8))
        out = self._shared.staging.view("output", (nbytes // word.itemsize,), word)
        self._call(_scatter, (out.numel(), word, root), out, staged, src=root)
        output.copy_(out.view(torch.uint8).view(output.dtype).view(output.shape))

    # -- point-to-point -----------------------------------------------------------------------------------------
    @streamed
    def send(self, tensors, dst_rank: int, tag: int = 0):
        self._check("send", tensors)
        me = self._ranks[self.rank()]
        for tensor in tensors:  # named with (sender, receiver) as its ranks, as the receive is
            with operations.operation("send", tensor.numel() * tensor.element_size(), (me, self._ranks[dst_rank])):
                self._shared.send(tensor, self._ranks[dst_rank], tag)
        return self._done(list(tensors))

    @streamed
    def recv(self, tensors, src_rank: int, tag: int = 0):
        self._check("recv", tensors)
        me = self._ranks[self.rank()]
        for tensor in tensors:
            with operations.operation("recv", tensor.numel() * tensor.element_size(), (self._ranks[src_rank], me)):
                self._shared.recv(tensor, self._ranks[src_rank], tag)
        return self._done(list(tensors))

    def recv_anysource(self, tensors, tag: int = 0):
        raise ValueError(f"rank {self._ctx.cur_rank}: recv without src (from any rank) is not supported by the iris "
                         "backend (nor by NCCL's): give src=")

    # -- barriers -----------------------------------------------------------------------------------------------
    @streamed
    def barrier(self, opts=None):
        """Every member reaches this point: our device barrier; its work's ``wait`` blocks the host, as NCCL's."""
        with self._named("barrier"):
            self._workspaces[("barrier",)] = ccl.device_barrier(self._ctx, self._group,
                                                                self._workspaces.get(("barrier",)))
        return self._done([], blocking=True)

    def monitored_barrier(self, timeout=None, wait_all_ranks: bool = False):
        """A host barrier that names the members that did not arrive within ``timeout``.

        torch.distributed's ``dist.monitored_barrier`` refuses every backend but gloo before it reaches the group,
        so call it on the group: ``group.monitored_barrier(timedelta(seconds=30))``.
        """
        timeout = timeout or datetime.timedelta(seconds=1800)
        self._shared.monitored_barrier(self._ranks, self.rank(), timeout, wait_all_ranks)


def _all_reduce(out, inp, *, ctx, group, workspace):
    return ccl.all_reduce(out, inp, ctx, None, group, False, None, workspace)


def _all_gather(out, inp, *, ctx, group, workspace):
    return ccl.all_gather(out, inp, ctx, group, False, None, workspace)


def _reduce_scatter(out, inp, *, ctx, group, workspace):
    return ccl.reduce_scatter(out, inp, ctx, None, group, False, None, workspace)


def _all_to_all(out, inp, *, ctx, group, workspace):
    return ccl.all_to_all(out, inp, ctx, group, False, None, workspace)


def _all_to_all_v(out, inp, *, ctx, group, workspace, output_split_sizes, input_split_sizes):
    return ccl.all_to_all_v(out, inp, output_split_sizes, input_split_sizes, ctx, group, False, None, workspace)


def _broadcast(tensor, *, ctx, group, workspace, src):
    return ccl.broadcast(tensor, ctx=ctx, src=src, group=group, workspace=workspace)


def _reduce(out, inp, *, ctx, group, workspace, dst):
    return ccl.reduce(out, inp, ctx=ctx, dst=dst, group=group, workspace=workspace)


def _gather(out, inp, *, ctx, group, workspace, dst):
    return ccl.gather(out, inp, ctx, dst, group, False, None, workspace)


def _scatter(out, inp, *, ctx, group, workspace, src):
    return ccl.scatter(out, inp, ctx, src, group, False, None, workspace)
