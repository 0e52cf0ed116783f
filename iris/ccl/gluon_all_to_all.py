"""all_to_all as a Gluon kernel: what :func:`iris.ccl.all_to_all` runs with ``Config(use_gluon=True)``.

The algorithm of the Triton kernel of :mod:`iris.ccl.all_to_all`, with the same arguments, workspace, flags and
results: after one flag exchange each rank pulls its column chunk from every member's input, tile by tile
(``Config.block_size_m x block_size_n``), starting with a different member on every rank; a second exchange
says that nobody reads the inputs any more. Written in Gluon: tiles have an explicit layout of 16 contiguous
bytes of a row per thread (:func:`iris.ccl.gluon_layouts.tile_layout`); remote addresses come from
:class:`iris.ccl.groups.GroupContext`, as in :mod:`iris.ccl.gluon_all_gather` (which says why). On the CPU
backend the Triton interpreter runs it, layouts ignored.

Upstream Iris's Gluon all_to_all pushes each row of a tile into the peers' outputs, one row at a time, with a
host barrier after the kernel; here whole tiles are pulled and the ranks order their accesses through flags on
the heap, as the Triton kernel does.

Examples
--------
>>> ctx.ccl.all_to_all(out, inp, config=iris.ccl.Config(use_gluon=True))      # doctest: +SKIP
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .flag_slots import ARRIVED, DONE
from .gluon_sync import exchange
from .groups import GroupContext


@gluon.jit
def gluon_all_to_all_kernel(context, inp, out, flags, epochs, M, N, stride_m, rank: gl.constexpr,
                            world: gl.constexpr, rank_start: gl.constexpr, rank_stride: gl.constexpr,
                            num_ranks: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                            WAIT_DONE: gl.constexpr, WIDE: gl.constexpr, LAYOUT: gl.constexpr):
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    epoch = gl.load(epochs + pid) + 1
    exchange(ctx, flags, ARRIVED, epoch, pid, num_programs, LAYOUT)
    tiles_n = gl.cdiv(N, BLOCK_N)
    for i in gl.static_range(world):
        source = (rank + i) % world
        for tile in range(pid, gl.cdiv(M, BLOCK_M) * tiles_n, num_programs):
            rows = (tile // tiles_n) * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, LAYOUT))
            cols = (tile % tiles_n) * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, LAYOUT))
            mask = gl.expand_dims(rows < M, 1) & gl.expand_dims(cols < N, 0)
            src = inp + gl.expand_dims(rows * stride_m, 1) + gl.expand_dims(rank * N + cols, 0)
            if WIDE:  # rows of 16 aligned contiguous elements: remote loads may be vectorised
                remote = ctx.as_remote(src, source, mask, (1, 16))
            else:
                remote = ctx.as_remote(src, source, mask)
            value = gl.load(remote, mask=mask)
            gl.store(out + gl.expand_dims(rows * stride_m, 1) + gl.expand_dims(source * N + cols, 0), value,
                     mask=mask)
    if WAIT_DONE:  # nobody reads this rank's input any more
        exchange(ctx, flags, DONE, epoch, pid, num_programs, LAYOUT)
    gl.store(epochs + pid, epoch)
