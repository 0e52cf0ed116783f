"""broadcast, scatter, gather and reduce as Gluon kernels: what they run with ``Config(use_gluon=True)``.

The twins of :func:`iris.ccl.broadcast.root_push_kernel` (broadcast and scatter), :func:`iris.ccl.gather.to_root_kernel`
and :mod:`iris.ccl.reduce`'s two kernels: the same arguments, workspaces, flags and results, with every block in an
explicit layout of 16 contiguous bytes per thread (:func:`iris.ccl.gluon_layouts.flat_layout`), as
:mod:`iris.ccl.gluon_all_gather` does for all_gather. The copy-engine variant runs no kernel, so it has no twin.

Examples
--------
>>> ctx.ccl.broadcast(t, src=0, config=iris.ccl.Config(use_gluon=True))      # doctest: +SKIP
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ..language.sync import flag_of
from .chunks import ARRIVED, DONE
from .gluon_sync import announce, await_all, exchange, signal, wait_for
from .groups import GroupContext


@gluon.jit
def _flat(block, BLOCK: gl.constexpr, LAYOUT: gl.constexpr):
    return block * BLOCK + gl.arange(0, BLOCK, layout=LAYOUT)


@gluon.jit
def gluon_root_push_kernel(context, inp, inp_step, out, flags, epochs, n, root: gl.constexpr, rank: gl.constexpr,
                           world: gl.constexpr, rank_start: gl.constexpr, rank_stride: gl.constexpr,
                           num_ranks: gl.constexpr, BLOCK: gl.constexpr, COPY_OWN: gl.constexpr,
                           HINT: gl.constexpr, LAYOUT: gl.constexpr):
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    epoch = gl.load(epochs + pid) + 1
    signal(ctx, flag_of(flags, ARRIVED, rank, pid, num_programs, world), epoch, root)
    if rank == root:
        await_all(ctx, flags, ARRIVED, epoch, pid, num_programs, LAYOUT)
        # The peers' blocks, then the root's own in a loop of its own: a constexpr ``if`` inside the static loop
        # (the Triton twin's form) stops triton 3.6's Gluon lowering for sm_90 (an assertion in
        # ConvertTritonGPUToLLVM, seen 2026-12-07).
        for block in range(pid, gl.cdiv(n, BLOCK), num_programs):
            offs = _flat(block, BLOCK, LAYOUT)
            mask = offs < n
            for i in gl.static_range(1, world):
                member = (rank + i) % world
                value = gl.load(inp + member * inp_step + offs, mask=mask)
                gl.store(ctx.as_remote(out + offs, member, mask, HINT), value, mask=mask)
        if COPY_OWN:
            for block in range(pid, gl.cdiv(n, BLOCK), num_programs):
                offs = _flat(block, BLOCK, LAYOUT)
                mask = offs < n
                gl.store(out + offs, gl.load(inp + rank * inp_step + offs, mask=mask), mask=mask)
        announce(ctx, flags, DONE, epoch, pid, num_programs, LAYOUT)
    else:
        wait_for(flag_of(flags, DONE, root, pid, num_programs, world), epoch)
    gl.store(epochs + pid, epoch)


@gluon.jit
def gluon_to_root_kernel(context, inp, out, flags, epochs, n, root: gl.constexpr, rank: gl.constexpr,
                         world: gl.constexpr, rank_start: gl.constexpr, rank_stride: gl.constexpr,
                         num_ranks: gl.constexpr, BLOCK: gl.constexpr, COPY_OWN: gl.constexpr, HINT: gl.constexpr,
                         LAYOUT: gl.constexpr):
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    epoch = gl.load(epochs + pid) + 1
    if rank == root:
        announce(ctx, flags, ARRIVED, epoch, pid, num_programs, LAYOUT)
    else:
        wait_for(flag_of(flags, ARRIVED, root, pid, num_programs, world), epoch)
    if rank != root or COPY_OWN:
        for block in range(pid, gl.cdiv(n, BLOCK), num_programs):
            offs = _flat(block, BLOCK, LAYOUT)
            mask = offs < n
            value = gl.load(inp + offs, mask=mask)
            if rank == root:
                gl.store(out + rank * n + offs, value, mask=mask)
            else:
                gl.store(ctx.as_remote(out + rank * n + offs, root, mask, HINT), value, mask=mask)
    signal(ctx, flag_of(flags, DONE, rank, pid, num_programs, world), epoch, root)
    if rank == root:
        await_all(ctx, flags, DONE, epoch, pid, num_programs, LAYOUT)
    gl.store(epochs + pid, epoch)


@gluon.jit
def gluon_reduce_push_kernel(context, inp, out, inbox, flags, epochs, n, stride, root: gl.constexpr,
                             rank: gl.constexpr, world: gl.constexpr, rank_start: gl.constexpr,
                             rank_stride: gl.constexpr, num_ranks: gl.constexpr, BLOCK: gl.constexpr,
                             HINT: gl.constexpr, LAYOUT: gl.constexpr):
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    epoch = gl.load(epochs + pid) + 1
    box = inbox + gl.multiple_of((epoch % 2).to(gl.int64) * world * stride, 16)  # this call's half
    if rank != root:
        wait_for(flag_of(flags, DONE, root, pid, num_programs, world), epoch - 2)
        for block in range(pid, gl.cdiv(n, BLOCK), num_programs):
            offs = _flat(block, BLOCK, LAYOUT)
            mask = offs < n
            dst = ctx.as_remote(box + rank * stride + offs, root, mask, HINT)
            gl.store(dst, gl.load(inp + offs, mask=mask), mask=mask)
    signal(ctx, flag_of(flags, ARRIVED, rank, pid, num_programs, world), epoch, root)
    if rank == root:
        await_all(ctx, flags, ARRIVED, epoch, pid, num_programs, LAYOUT)
        for block in range(pid, gl.cdiv(n, BLOCK), num_programs):
            offs = _flat(block, BLOCK, LAYOUT)
            mask = offs < n
            total = gl.zeros([BLOCK], gl.float32, layout=LAYOUT)
            for source in gl.static_range(world):
                if source == rank:
                    total += gl.load(inp + offs, mask=mask).to(gl.float32)
                else:
                    total += gl.load(box + source * stride.to(gl.int64) + offs, mask=mask).to(gl.float32)
            gl.store(out + offs, total.to(out.dtype.element_ty), mask=mask)
        announce(ctx, flags, DONE, epoch, pid, num_programs, LAYOUT)
    gl.store(epochs + pid, epoch)


@gluon.jit
def gluon_reduce_two_shot_kernel(context, inp, out, flags, epochs, n, chunk, root: gl.constexpr, rank: gl.constexpr,
                                 world: gl.constexpr, rank_start: gl.constexpr, rank_stride: gl.constexpr,
                                 num_ranks: gl.constexpr, BLOCK: gl.constexpr, WAIT_DONE: gl.constexpr,
                                 HINT: gl.constexpr, LAYOUT: gl.constexpr):
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    epoch = gl.load(epochs + pid) + 1
    exchange(ctx, flags, ARRIVED, epoch, pid, num_programs, LAYOUT)
    end = gl.minimum((rank + 1) * chunk, n)
    for block in range(pid, gl.cdiv(chunk, BLOCK), num_programs):
        offs = rank * chunk + _flat(block, BLOCK, LAYOUT)
        mask = offs < end
        total = gl.zeros([BLOCK], gl.float32, layout=LAYOUT)
        for i in gl.static_range(world):
            total += gl.load(ctx.as_remote(inp + offs, i, mask, HINT), mask=mask).to(gl.float32)
        value = total.to(out.dtype.element_ty)
        if rank == root:
            gl.store(out + offs, value, mask=mask)
        else:
            gl.store(ctx.as_remote(out + offs, root, mask, HINT), value, mask=mask)
    if WAIT_DONE:
        exchange(ctx, flags, DONE, epoch, pid, num_programs, LAYOUT)
    gl.store(epochs + pid, epoch)
