"""all_gather as Gluon kernels: what :func:`iris.ccl.all_gather` runs with ``Config(use_gluon=True)``.

The same two algorithms as the Triton kernels of :mod:`iris.ccl.all_gather`, with the same arguments,
workspaces, flags and results (push through inboxes for small inputs, pull for large ones, picked by the same
size rule), written in Gluon: every block has an explicit layout of 16 contiguous bytes per thread
(:func:`iris.ccl.gluon_layouts.flat_layout`). On the CPU backend the Triton interpreter runs them, layouts
ignored (:mod:`iris.interpret.gluon`).

Remote addresses come from :class:`iris.ccl.groups.GroupContext`, the Triton kernels' device context (a
``@gluon.jit`` kernel may call ``@triton.jit`` code, whose operations keep their operands' layouts), not from
:class:`iris.language.gluon.IrisDeviceCtx`: the group's numbering must be constexpr anyway, and with this rank a
constexpr too, a translation reads its heap base at a fixed offset instead of first loading the rank from the
context tensor, one dependent load fewer ahead of every kernel's first remote access. The kernels then compile to
the memory instructions of their Triton twins, one for one (tests/test_gluon_sm90.py).

Upstream Iris's Gluon all_gather writes 2-D tiles of ``block_size_m x block_size_n`` into every peer's output
and leaves the ordering to a host barrier after the kernel. Here the tensors are contiguous, so blocks are flat
(``Config.block_size``; ``block_size_m``/``block_size_n`` have no effect on all_gather), and the ranks order
their accesses through flags on the heap, with no host round trip, as every collective here does.

Examples
--------
>>> ctx.ccl.all_gather(out, inp, config=iris.ccl.Config(use_gluon=True))      # doctest: +SKIP
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .flag_slots import ARRIVED, DONE
from .gluon_sync import deliver, exchange
from .groups import GroupContext
from .inbox import row


@gluon.jit
def copy_blocks(src, dst, n, pid, num_programs, BLOCK: gl.constexpr, LAYOUT: gl.constexpr):
    """This program's blocks of ``src[:n]`` into ``dst[:n]``, both local."""
    for block in range(pid, gl.cdiv(n, BLOCK), num_programs):
        offs = block * BLOCK + gl.arange(0, BLOCK, layout=LAYOUT)
        mask = offs < n
        gl.store(dst + offs, gl.load(src + offs, mask=mask), mask=mask)


@gluon.jit
def gluon_push_kernel(context, inp, out, inbox, flags, epochs, n, stride, rank: gl.constexpr,
                      world: gl.constexpr, rank_start: gl.constexpr, rank_stride: gl.constexpr,
                      num_ranks: gl.constexpr, BLOCK: gl.constexpr, HINT: gl.constexpr, LAYOUT: gl.constexpr):
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    epoch = gl.load(epochs + pid) + 1
    box = deliver(ctx, inp, inbox, flags, epoch, n, stride, pid, num_programs, BLOCK, HINT, LAYOUT)
    for source in gl.static_range(world):  # in place, this rank's row copies onto itself
        copy_blocks(row(ctx, inp, box, stride, source), out + source * n, n, pid, num_programs, BLOCK, LAYOUT)
    gl.store(epochs + pid, epoch)


@gluon.jit
def gluon_pull_kernel(context, src, src_step, out, flags, epochs, n, rank: gl.constexpr, world: gl.constexpr,
                      rank_start: gl.constexpr, rank_stride: gl.constexpr, num_ranks: gl.constexpr,
                      BLOCK: gl.constexpr, WAIT_DONE: gl.constexpr, HINT: gl.constexpr, LAYOUT: gl.constexpr):
    # Member s's input is at src + s * src_step (see iris.ccl.all_gather.pull_kernel).
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    epoch = gl.load(epochs + pid) + 1
    exchange(ctx, flags, ARRIVED, epoch, pid, num_programs, LAYOUT)
    for i in gl.static_range(world):
        source = (rank + i) % world  # every member starts with a different peer
        for block in range(pid, gl.cdiv(n, BLOCK), num_programs):
            offs = block * BLOCK + gl.arange(0, BLOCK, layout=LAYOUT)
            mask = offs < n
            value = gl.load(ctx.as_remote(src + source * src_step + offs, source, mask, HINT), mask=mask)
            gl.store(out + source * n + offs, value, mask=mask)
    if WAIT_DONE:  # nobody reads this rank's input any more
        exchange(ctx, flags, DONE, epoch, pid, num_programs, LAYOUT)
    gl.store(epochs + pid, epoch)
