"""Kernels for the race checker's tests (tests/rank_cases_races.py): a buggy corpus, each kernel with a known race,
and a correct corpus, the lessons' kernels (notebooks/02-07, copied as they are there) and correct synchronisation.

A line the checker must name carries a ``# race: <tag>`` comment; :func:`tagged_lines` finds them, so the tests do
not depend on line numbers.
"""

from __future__ import annotations

import re

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris  # noqa: F401  (switches Triton to the interpreter before the kernels below are decorated)


def tagged_lines() -> dict[str, list[int]]:
    """``{tag: [line, ...]}`` of the ``# race: tag`` comments of this file."""
    tags: dict[str, list[int]] = {}
    with open(__file__) as source:
        for number, text in enumerate(source, start=1):
            match = _TAG.search(text.rstrip())
            if match:
                tags.setdefault(match.group(1), []).append(number)
    return tags


_TAG = re.compile(r"\S  # race: ([a-z0-9-]+)$")  # after code, at the end of the line


# ============================================================================ buggy corpus

@triton.jit
def produce(data, flag, cur_rank, consumer, heap_bases, SEM: tl.constexpr, BLOCK: tl.constexpr):
    """Store a message into the consumer's ``data``, then raise its ``flag`` with ``SEM``."""
    offs = tl.arange(0, BLOCK)
    iris.store(data + offs, offs.to(tl.float32) + 1, cur_rank, consumer, heap_bases)  # race: message-store
    iris.atomic_xchg(flag, 1, cur_rank, consumer, heap_bases, sem=SEM, scope="sys")  # race: flag-xchg


@triton.jit
def consume(data, flag, out, SEM: tl.constexpr, BLOCK: tl.constexpr):
    """Wait for this rank's ``flag`` with ``SEM``, then read ``data``."""
    while tl.atomic_cas(flag, 1, 1, sem=SEM, scope="sys") != 1:
        pass
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(data + offs))  # race: message-load


@triton.jit
def consume_volatile(data, flag, out, BLOCK: tl.constexpr):
    """Poll the flag with a plain volatile load: it orders nothing (and races with the atomic that sets it)."""
    while tl.load(flag, volatile=True) != 1:  # race: volatile-poll
        pass
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(data + offs))  # race: volatile-load


@triton.jit
def put_block(src, dst, cur_rank, peer, heap_bases, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    iris.put(src + offs, dst + offs, cur_rank, peer, heap_bases)  # race: put


@triton.jit
def read_block(buf, out, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(buf + offs))  # race: read


@triton.jit
def both_write(target, cur_rank, heap_bases):
    """Every rank writes element 0 of rank 0's ``target``."""
    if cur_rank == 0:
        iris.store(target, 1.0, cur_rank, 0, heap_bases)  # race: writer-0
    else:
        iris.store(target, cur_rank.to(tl.float32), cur_rank, 0, heap_bases)  # race: writer-other


@triton.jit
def programs_write_one(out):
    """Every program of the launch writes element 0: they run concurrently on a GPU."""
    tl.store(out, tl.program_id(0).to(tl.float32))  # race: program-write


@triton.jit
def read_then_signal(data, done, out, BLOCK: tl.constexpr):
    """Read ``data`` at once (no waiting), then tell the writer with a relaxed flag."""
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(data + offs))  # race: early-read
    tl.atomic_xchg(done, 1, sem="relaxed", scope="sys")


@triton.jit
def wait_then_write(data, done, cur_rank, reader, heap_bases, BLOCK: tl.constexpr):
    """Wait (relaxed) until the reader has read, then write its ``data``: real time orders them, nothing else."""
    while iris.atomic_cas(done, 1, 1, cur_rank, reader, heap_bases, sem="relaxed", scope="sys") != 1:
        pass
    offs = tl.arange(0, BLOCK)
    iris.store(data + offs, offs.to(tl.float32), cur_rank, reader, heap_bases)  # race: late-write


@gluon.jit
def gluon_produce(IrisDeviceCtx: gl.constexpr, context_tensor, data, flag, consumer, SEM: gl.constexpr,
                  BLOCK: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    offs = gl.arange(0, BLOCK, layout=gl.BlockedLayout([1], [32], [4], [0]))
    ctx.store(data + offs, offs.to(gl.float32) + 1, consumer)  # race: gluon-store
    ctx.atomic_xchg(flag, 1, consumer, sem=SEM, scope="sys")


@gluon.jit
def gluon_consume(IrisDeviceCtx: gl.constexpr, context_tensor, data, flag, out, SEM: gl.constexpr,
                  BLOCK: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    while ctx.atomic_cas(flag, 1, 1, ctx.cur_rank, sem=SEM, scope="sys") != 1:
        pass
    offs = gl.arange(0, BLOCK, layout=gl.BlockedLayout([1], [32], [4], [0]))
    remote = ctx.as_remote(data + offs, ctx.cur_rank)
    gl.store(out + offs, gl.load(remote))  # race: gluon-load


# ============================================================================ correct corpus: synchronisation

@triton.jit
def fill_peer(data, cur_rank, peer, heap_bases, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    iris.store(data + offs, offs.to(tl.float32) + 1, cur_rank, peer, heap_bases)


@triton.jit
def counted_programs(counter, partial, total, BLOCK: tl.constexpr):
    """Programs of one launch hand partial sums to the last one through an acq_rel counter (a GPU idiom)."""
    pid = tl.program_id(0)
    tl.store(partial + pid, pid.to(tl.float32) + 1)
    arrived = tl.atomic_add(counter, 1)  # default sem: acq_rel
    if arrived == tl.num_programs(0) - 1:
        offs = tl.arange(0, BLOCK)
        tl.store(total, tl.sum(tl.load(partial + offs, mask=offs < tl.num_programs(0), other=0.0)))


# ============================================================================ lesson 02: remote memory access

@triton.jit
def get_and_put(mine, pulled, pushed, n, cur_rank, peer, heap_bases, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    iris.get(mine + offs, pulled + offs, cur_rank, peer, heap_bases, mask=mask)   # pulled <- peer's mine
    iris.put(mine + offs, pushed + offs, cur_rank, peer, heap_bases, mask=mask)   # peer's pushed <- mine


@triton.jit
def double_remote(mine, doubled, n, cur_rank, peer, heap_bases, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = iris.load(mine + offs, cur_rank, peer, heap_bases, mask=mask)
    iris.store(doubled + offs, 2 * x, cur_rank, peer, heap_bases, mask=mask)


@triton.jit
def copy_between(src, dst, n, from_rank, to_rank, cur_rank, heap_bases, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    iris.copy(src + offs, dst + offs, from_rank, to_rank, cur_rank, heap_bases, mask=offs < n)


@triton.jit
def get_with_context(context, mine, out, n, rank: tl.constexpr, world_size: tl.constexpr, BLOCK: tl.constexpr):
    dctx = iris.DeviceContext.initialize(context, rank, world_size)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    dctx.get(mine + offs, out + offs, (rank + 1) % world_size, mask=offs < n)


@triton.jit
def gather(mine, gathered, n, cur_rank, heap_bases, WORLD: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    for source in tl.static_range(WORLD):
        iris.get(mine + offs, gathered + source * n + offs, cur_rank, source, heap_bases, mask=offs < n)


# ============================================================================ lesson 03: atomics and synchronisation

@triton.jit
def count(counter, cur_rank, heap_bases, PER_PROGRAM: tl.constexpr):
    ones = tl.full((PER_PROGRAM,), 1, tl.int32)
    iris.atomic_add(counter + tl.zeros((PER_PROGRAM,), tl.int32), ones, cur_rank, 0, heap_bases,
                    sem="relaxed", scope="sys")


@triton.jit
def locked_increments(lock, total, cur_rank, heap_bases, ITERATIONS: tl.constexpr):
    for _ in range(ITERATIONS):
        while iris.atomic_cas(lock, 0, 1, cur_rank, 0, heap_bases, sem="acquire", scope="sys") != 0:
            pass
        value = iris.load(total, cur_rank, 0, heap_bases)          # plain load ...
        iris.store(total, value + 1, cur_rank, 0, heap_bases)      # ... plain store: safe under the lock
        iris.atomic_xchg(lock, 0, cur_rank, 0, heap_bases, sem="release", scope="sys")


@triton.jit
def lesson_produce(mailbox, flag, cur_rank, consumer, heap_bases, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    message = offs.to(tl.float32) * 0.5 + 42
    iris.store(mailbox + offs, message, cur_rank, consumer, heap_bases)
    iris.atomic_xchg(flag, 1, cur_rank, consumer, heap_bases, sem="release", scope="sys")


@triton.jit
def lesson_consume(mailbox, flag, received, BLOCK: tl.constexpr):
    while tl.atomic_cas(flag, 1, 1, sem="acquire", scope="sys") != 1:   # my own flag: plain tl atomics
        pass
    offs = tl.arange(0, BLOCK)
    tl.store(received + offs, tl.load(mailbox + offs))


@triton.jit
def global_max(score, best, cur_rank, heap_bases):
    iris.atomic_max(best, tl.load(score), cur_rank, 0, heap_bases, sem="relaxed", scope="sys")


# ============================================================================ lesson 04: as_remote

@triton.jit
def scale(x, factor, n, BLOCK: tl.constexpr):           # a plain kernel: no iris inside
    offs = tl.arange(0, BLOCK)
    tl.store(x + offs, tl.load(x + offs, mask=offs < n) * factor, mask=offs < n)


@triton.jit
def sum_translating_each_time(data, out, cur_rank, peer, heap_bases, CHUNKS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for c in range(CHUNKS):
        acc += iris.load(data + c * BLOCK + offs, cur_rank, peer, heap_bases)   # translate, load
    tl.store(out + offs, acc)


@triton.jit
def sum_translating_once(context, data, out, rank: tl.constexpr, world: tl.constexpr, peer,
                         CHUNKS: tl.constexpr, BLOCK: tl.constexpr):
    dctx = iris.DeviceContext.initialize(context, rank, world)
    remote = dctx.as_remote(data, peer)                                     # translate once ...
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for c in range(CHUNKS):
        acc += tl.load(remote + c * BLOCK + offs)                            # ... then plain loads
    tl.store(out + offs, acc)


@triton.jit
def remote_address(context, ptr, out, rank: tl.constexpr, world: tl.constexpr, peer):
    dctx = iris.DeviceContext.initialize(context, rank, world)
    tl.store(out, dctx.as_remote(ptr, peer).to(tl.int64))


# ============================================================================ lesson 05: Gluon

@gluon.jit
def read_from_peer(IrisDeviceCtx: gl.constexpr, context_tensor, buf, out, peer: gl.constexpr,
                   BLOCK: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])      # 4 warps of 32 threads
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    mask = offs < 256
    remote_ptr = ctx.as_remote(buf + offs, peer)                      # translate once ...
    gl.store(out + offs, gl.load(remote_ptr, mask=mask), mask=mask)   # ... then plain gl.load / gl.store


@gluon.jit
def put_tile(IrisDeviceCtx: gl.constexpr, context_tensor, tile, arrivals, peer, ROWS: gl.constexpr,
             COLS: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    rows = gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))
    offs = gl.expand_dims(rows, 1) * COLS + gl.expand_dims(cols, 0)
    values = offs.to(gl.float32) + 100.0 * ctx.cur_rank.to(gl.float32)
    ctx.store(tile + offs, values, peer)
    lanes: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    ones = gl.full([4], 1, gl.int32, lanes)
    ctx.atomic_add(arrivals + gl.zeros([4], gl.int32, lanes), ones, 0, sem="release", scope="sys")


@gluon.jit
def get_from_peer(IrisDeviceCtx: gl.constexpr, context_tensor, buf, got, peer, BLOCK: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    offs = gl.arange(0, BLOCK, layout=gl.CoalescedLayout())
    ctx.get(buf + offs, got + offs, peer)


# ============================================================================ lesson 06: collectives

@triton.jit
def one_shot_all_reduce(x, out, n, cur_rank, heap_bases, WORLD: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.zeros((BLOCK,), tl.float32)
    for source in tl.static_range(WORLD):
        acc += iris.load(x + offs, cur_rank, source, heap_bases, mask=mask, other=0.0)
    tl.store(out + offs, acc, mask=mask)


@triton.jit
def one_shot_all_gather(x, out, n, cur_rank, heap_bases, WORLD: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    for source in tl.static_range(WORLD):
        iris.get(x + offs, out + source * n + offs, cur_rank, source, heap_bases, mask=mask)


# ============================================================================ lesson 07: GEMM + all-scatter

@triton.jit
def gemm_all_scatter(A, B, C, M, N, K, N_LOCAL, cur_rank, heap_bases, WORLD: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)                 # columns of this rank's slice
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(A + rows[:, None] * K + (k + ks)[None, :])
        b = tl.load(B + (k + ks)[:, None] * N_LOCAL + cols[None, :])
        acc += tl.dot(a, b)
    # epilogue: scatter the finished tile into every rank's C, at this rank's columns
    c_ptrs = C + rows[:, None] * N + (cur_rank * N_LOCAL + cols)[None, :]
    mask = (rows[:, None] < M) & (cols[None, :] < N_LOCAL)
    for dest in tl.static_range(WORLD):
        iris.store(c_ptrs, acc, cur_rank, dest, heap_bases, mask=mask)


@triton.jit
def gemm_bias_relu_all_scatter(A, B, D, M, N, K, N_LOCAL, cur_rank, heap_bases, WORLD: tl.constexpr,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(A + rows[:, None] * K + (k + ks)[None, :])
        b = tl.load(B + (k + ks)[:, None] * N_LOCAL + cols[None, :])
        acc += tl.dot(a, b)
    acc = tl.maximum(acc + 1.0, 0.0)
    d_ptrs = D + rows[:, None] * N + (cur_rank * N_LOCAL + cols)[None, :]
    for dest in tl.static_range(WORLD):
        iris.store(d_ptrs, acc, cur_rank, dest, heap_bases)
