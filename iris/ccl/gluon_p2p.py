"""send and recv as Gluon kernels: what :mod:`iris.ccl.p2p` runs when its state was made with
``init_p2p(config=Config(use_gluon=True))``.

The twins of :func:`iris.ccl.p2p.send_kernel` and :func:`iris.ccl.p2p.recv_kernel`: the same staging slots, flags
and device-side message counters, blocks in an explicit layout of 16 contiguous bytes per thread
(:func:`iris.ccl.gluon_layouts.flat_layout`).

Examples
--------
>>> gluon = iris.ccl.Config(use_gluon=True)
>>> p2p = ctx.ccl.init_p2p(max_numel=4096, dtype=torch.float32, config=gluon)      # doctest: +SKIP
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ..language.core import DeviceContext
from ..language.sync import flag_of
from .flag_slots import FREE, FULL
from .gluon_sync import signal, wait_for


@gluon.jit
def gluon_send_kernel(context, src, n, nbytes, stage, slot_numel, flags, counts, sizes, peer: gl.constexpr,
                      rank: gl.constexpr, world: gl.constexpr, DEPTH_: gl.constexpr, BLOCK: gl.constexpr,
                      HINT: gl.constexpr, LAYOUT: gl.constexpr):
    ctx = DeviceContext.initialize(context, rank, world)
    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    counter = counts + peer * num_programs + pid
    k = gl.load(counter) + 1
    wait_for(flag_of(flags, FREE, peer, pid, num_programs, world), k - DEPTH_)
    slot = (rank * DEPTH_ + k % DEPTH_).to(gl.int64)
    box = stage + slot * slot_numel
    for block in range(pid, gl.cdiv(n, BLOCK), num_programs):
        offs = block * BLOCK + gl.arange(0, BLOCK, layout=LAYOUT)
        mask = offs < n
        gl.store(ctx.as_remote(box + offs, peer, mask, HINT), gl.load(src + offs, mask=mask), mask=mask)
    if pid == 0:
        ctx.store(sizes + slot, nbytes, peer)
    signal(ctx, flag_of(flags, FULL, rank, pid, num_programs, world), k, peer)
    gl.store(counter, k)


@gluon.jit
def gluon_recv_kernel(context, dst, n, stage, slot_numel, flags, counts, sizes, arrived, peer: gl.constexpr,
                      rank: gl.constexpr, world: gl.constexpr, DEPTH_: gl.constexpr, BLOCK: gl.constexpr,
                      LAYOUT: gl.constexpr):
    ctx = DeviceContext.initialize(context, rank, world)
    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    counter = counts + (world + peer) * num_programs + pid
    k = gl.load(counter) + 1
    wait_for(flag_of(flags, FULL, peer, pid, num_programs, world), k)
    slot = (peer * DEPTH_ + k % DEPTH_).to(gl.int64)
    box = stage + slot * slot_numel
    for block in range(pid, gl.cdiv(n, BLOCK), num_programs):
        offs = block * BLOCK + gl.arange(0, BLOCK, layout=LAYOUT)
        mask = offs < n
        gl.store(dst + offs, gl.load(box + offs, mask=mask), mask=mask)
    if pid == 0:  # the size word, before the slot is given back (see iris.ccl.p2p.recv_kernel)
        gl.store(arrived, gl.load(sizes + slot))
    signal(ctx, flag_of(flags, FREE, rank, pid, num_programs, world), k, peer)
    gl.store(counter, k)
