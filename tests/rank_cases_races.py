"""Code that runs inside each rank for tests/test_races.py: the buggy and the correct corpus of
tests/race_kernels.py under ``check="races"``, scenario after scenario, each closed by a host barrier after which
every rank hands in the races it found (a race is found by the rank whose access comes second).

Results are JSON: ``{"races": {scenario: [race as a dict, ...]}, ...}``.
"""

from __future__ import annotations

import dataclasses
import warnings

import torch

import iris
from iris.ccl import Config
from iris.language import sync

from . import race_kernels as k

HEAP = "8MiB"


def _as_dict(race: iris.Race) -> dict:
    return dataclasses.asdict(race) | {"text": str(race)}


class _Scenarios:
    """Runs scenarios one after another; each ends with a host barrier and this rank's races."""

    def __init__(self):
        self.ctx = iris.iris(HEAP, backend="cpu", check="races")
        self.rank, self.world = self.ctx.get_rank(), self.ctx.get_num_ranks()
        self.races: dict[str, list] = {}

    def run(self, name, scenario):
        self.ctx.barrier()
        scenario(self.ctx, self.rank, self.world)
        self.ctx.barrier()
        self.races[name] = [_as_dict(race) for race in self.ctx.races()]


# ============================================================================ buggy corpus

def _message(ctx, rank, producer_sem, consumer, consumer_sem=None):
    data, flag, out = ctx.zeros(16, name="data"), ctx.zeros(1, dtype=torch.int32, name="flag"), ctx.zeros(16)
    ctx.barrier()
    if rank == 0:
        k.produce[(1,)](data, flag, rank, 1, ctx.get_heap_bases(), SEM=producer_sem, BLOCK=16)
    elif rank == 1:
        extra = {} if consumer_sem is None else {"SEM": consumer_sem}
        consumer[(1,)](data, flag, out, BLOCK=16, **extra)


def relaxed_flag(ctx, rank, world):
    _message(ctx, rank, "relaxed", k.consume, "relaxed")


def volatile_flag(ctx, rank, world):
    _message(ctx, rank, "release", k.consume_volatile)


def missing_barrier(ctx, rank, world):
    src, inbox, out = ctx.ones(16), ctx.zeros(16, name="inbox"), ctx.zeros(16)
    ctx.barrier()
    if rank == 0:
        k.put_block[(1,)](src, inbox, rank, 1, ctx.get_heap_bases(), BLOCK=16)
    elif rank == 1:
        k.read_block[(1,)](inbox, out, BLOCK=16)


def two_writers(ctx, rank, world):
    target = ctx.zeros(4, name="target")
    ctx.barrier()
    k.both_write[(1,)](target, rank, ctx.get_heap_bases())


def two_programs(ctx, rank, world):
    shared = ctx.zeros(2, 3, name="shared")
    ctx.barrier()
    if rank == 0:
        k.programs_write_one[(2,)](shared[1, 2:])


def read_before_written(ctx, rank, world):
    data, done, out = ctx.zeros(16, name="data"), ctx.zeros(1, dtype=torch.int32, name="done"), ctx.zeros(16)
    ctx.barrier()
    if rank == 1:
        k.read_then_signal[(1,)](data, done, out, BLOCK=16)
    elif rank == 0:
        k.wait_then_write[(1,)](data, done, rank, 1, ctx.get_heap_bases(), BLOCK=16)


def _gluon_message(ctx, rank, produce_sem, consume_sem):
    """Gluon message passing from rank 0 to rank 1 with these semantics on the flag."""
    from iris.gluon import IrisDeviceCtx

    data, flag, out = ctx.zeros(128, name="gdata"), ctx.zeros(1, dtype=torch.int32, name="gflag"), ctx.zeros(128)
    ctx.barrier()
    if rank == 0:
        k.gluon_produce[(1,)](IrisDeviceCtx, ctx.get_device_context(), data, flag, 1, SEM=produce_sem, BLOCK=128)
    elif rank == 1:
        k.gluon_consume[(1,)](IrisDeviceCtx, ctx.get_device_context(), data, flag, out, SEM=consume_sem, BLOCK=128)


def gluon_relaxed_flag(ctx, rank, world):
    _gluon_message(ctx, rank, "relaxed", "relaxed")


BUGGY = {
    "relaxed_flag": relaxed_flag, "volatile_flag": volatile_flag, "missing_barrier": missing_barrier,
    "two_writers": two_writers, "two_programs": two_programs, "read_before_written": read_before_written,
    "gluon_relaxed_flag": gluon_relaxed_flag,
}


def buggy_corpus():
    """Every buggy scenario; also the RaceWarnings this rank issued."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scenarios = _Scenarios()
        for name, scenario in BUGGY.items():
            scenarios.run(name, scenario)
    found = [str(w.message) for w in caught if issubclass(w.category, iris.RaceWarning)]
    return {"rank": scenarios.rank, "races": scenarios.races, "warnings": found}


# ============================================================================ correct corpus

def release_acquire(ctx, rank, world):
    _message(ctx, rank, "release", k.consume, "acquire")
    _message(ctx, rank, "acq_rel", k.consume, "acq_rel")  # Triton's default semantics


def gluon_release_acquire(ctx, rank, world):
    _gluon_message(ctx, rank, "release", "acquire")


def _write_then_read(ctx, rank, sync):
    data, out = ctx.zeros(16, name="data"), ctx.zeros(16)
    ctx.barrier()
    for _ in range(2):  # and again after the reads: the writes must be ordered after them too
        if rank == 0:
            k.fill_peer[(1,)](data, rank, 1, ctx.get_heap_bases(), BLOCK=16)
        sync()
        if rank == 1:
            k.read_block[(1,)](data, out, BLOCK=16)
        sync()


def host_barrier(ctx, rank, world):
    _write_then_read(ctx, rank, ctx.barrier)


def device_barrier(ctx, rank, world):
    _write_then_read(ctx, rank, ctx.device_barrier)


def launch_order_and_counted_programs(ctx, rank, world):
    data, out = ctx.zeros(16, name="data"), ctx.zeros(16)
    k.fill_peer[(1,)](data, rank, rank, ctx.get_heap_bases(), BLOCK=16)   # this rank's own data ...
    k.read_block[(1,)](data, out, BLOCK=16)                                # ... read by its next launch
    counter, partial, total = ctx.zeros(1, dtype=torch.int32), ctx.zeros(4, name="partial"), ctx.zeros(1)
    k.counted_programs[(4,)](counter, partial, total, BLOCK=4)
    assert total.item() == 10, total


def lesson_02(ctx, rank, world):
    n, heap_bases, peer = 100, ctx.get_heap_bases(), (rank + 1) % world
    mine = ctx.arange(n, dtype=torch.float32, name="mine")
    mine += 1000 * rank
    pulled, pushed, doubled = ctx.zeros(n, name="pulled"), ctx.zeros(n, name="pushed"), ctx.zeros(n, name="doubled")
    ctx.barrier()
    grid = (triton_cdiv(n, 64),)
    k.get_and_put[grid](mine, pulled, pushed, n, rank, peer, heap_bases, BLOCK=64)
    ctx.barrier()
    k.double_remote[grid](mine, doubled, n, rank, peer, heap_bases, BLOCK=64)
    ctx.barrier()
    ctx.barrier()
    if rank == 0:
        k.copy_between[grid](mine, pushed, n, 1, 1, rank, heap_bases, BLOCK=64)
    ctx.barrier()
    pulled_again = ctx.zeros(n, name="pulled_again")
    k.get_with_context[grid](ctx.get_device_context(), mine, pulled_again, n, rank, world, BLOCK=64)
    gathered = ctx.zeros(world, n, name="gathered")
    ctx.barrier()
    k.gather[grid](mine, gathered, n, rank, heap_bases, WORLD=world, BLOCK=64)


def lesson_03(ctx, rank, world):
    heap_bases = ctx.get_heap_bases()
    counter = ctx.zeros(1, dtype=torch.int32, name="counter")
    ctx.barrier()
    k.count[(8,)](counter, rank, heap_bases, PER_PROGRAM=16)
    ctx.barrier()
    lock, total = ctx.zeros(1, dtype=torch.int32, name="lock"), ctx.zeros(1, dtype=torch.int32, name="total")
    ctx.barrier()
    k.locked_increments[(1,)](lock, total, rank, heap_bases, ITERATIONS=10)
    ctx.barrier()
    assert rank != 0 or total.item() == 10 * world, total
    mailbox, flag = ctx.zeros(64, name="mailbox"), ctx.zeros(1, dtype=torch.int32, name="flag")
    received = ctx.zeros(64, name="received")
    ctx.barrier()
    if rank == 0:
        k.lesson_produce[(1,)](mailbox, flag, rank, 1, heap_bases, BLOCK=64)
    elif rank == 1:
        k.lesson_consume[(1,)](mailbox, flag, received, BLOCK=64)
    ctx.barrier()
    score = ctx.full((1,), 7 * rank + 3, dtype=torch.int32, name="score")
    best = ctx.zeros(1, dtype=torch.int32, name="best")
    ctx.barrier()
    k.global_max[(1,)](score, best, rank, heap_bases)


def lesson_04(ctx, rank, world):
    buf = ctx.full((4, 16), float(rank + 1), name="buf")
    ctx.barrier()
    right_buf = ctx.as_remote(buf, (rank + 1) % world)
    ctx.barrier()
    k.scale[(1,)](right_buf[1], 10.0, 16, BLOCK=16)
    ctx.barrier()
    chunks, block, peer = 8, 32, (rank + 1) % world
    data = ctx.arange(chunks * block, dtype=torch.float32, name="data")
    data += 1000 * rank
    sums = ctx.zeros(2, block, name="sums")
    ctx.barrier()
    k.sum_translating_each_time[(1,)](data, sums[0], rank, peer, ctx.get_heap_bases(), CHUNKS=chunks, BLOCK=block)
    k.sum_translating_once[(1,)](ctx.get_device_context(), data, sums[1], rank, world, peer, CHUNKS=chunks,
                                 BLOCK=block)
    address = torch.zeros(1, dtype=torch.int64)
    k.remote_address[(1,)](ctx.get_device_context(), buf, address, rank, world, peer)


def lesson_05(ctx, rank, world):
    from iris.gluon import IrisDeviceCtx

    buf = ctx.arange(256, dtype=torch.float32, name="buf")
    buf += 1000 * rank
    out = ctx.zeros(256, name="out")
    ctx.barrier()
    peer = (rank + 1) % world
    k.read_from_peer[(2,)](IrisDeviceCtx, ctx.get_device_context(), buf, out, peer, 128, num_warps=4)
    tile, arrivals = ctx.zeros(16, 32, name="tile"), ctx.zeros(1, dtype=torch.int32, name="arrivals")
    ctx.barrier()
    k.put_tile[(1,)](IrisDeviceCtx, ctx.get_device_context(), tile, arrivals, peer, ROWS=16, COLS=32, num_warps=4)
    ctx.barrier()
    got = ctx.zeros(256, name="got")
    ctx.barrier()
    k.get_from_peer[(1,)](IrisDeviceCtx, ctx.get_device_context(), buf, got, peer, BLOCK=256)


def lesson_06(ctx, rank, world):
    n, heap_bases = 1000, ctx.get_heap_bases()
    x = ctx.zeros(n, name="x")
    x.copy_(torch.randn(n, generator=torch.Generator().manual_seed(rank)))
    summed = ctx.zeros(n, name="summed")
    ctx.barrier()
    k.one_shot_all_reduce[(triton_cdiv(n, 256),)](x, summed, n, rank, heap_bases, WORLD=world, BLOCK=256)
    ctx.barrier()
    library_sum = ctx.zeros(n, name="library_sum")
    ctx.ccl.all_reduce(library_sum, x)
    two_shot_sum = ctx.zeros(n, name="two_shot_sum")
    ctx.ccl.all_reduce(two_shot_sum, x, config=Config(all_reduce_variant="two_shot"))
    gathered = ctx.zeros(world * n, name="gathered")
    ctx.ccl.all_gather(gathered, x)
    mine_gathered = ctx.zeros(world * n, name="mine_gathered")
    ctx.barrier()
    k.one_shot_all_gather[(triton_cdiv(n, 256),)](x, mine_gathered, n, rank, heap_bases, WORLD=world, BLOCK=256)


def lesson_07(ctx, rank, world):
    m, n, kk = 64, 128, 64
    n_local = n // world if n % world == 0 else None
    if n_local is None:  # 3 ranks: the lesson's N must split evenly
        m, n, kk = 64, 96, 64
        n_local = n // world
    generator = torch.Generator().manual_seed(0)
    a_full, b_full = torch.randn(m, kk, generator=generator), torch.randn(kk, n, generator=generator)
    a = ctx.zeros(m, kk, name="A")
    a.copy_(a_full)
    b_local = ctx.zeros(kk, n_local, name="B_local")
    b_local.copy_(b_full[:, rank * n_local:(rank + 1) * n_local])
    c = ctx.zeros(m, n, name="C")
    ctx.barrier()
    block = 32
    grid = (triton_cdiv(m, block), triton_cdiv(n_local, block))
    k.gemm_all_scatter[grid](a, b_local, c, m, n, kk, n_local, rank, ctx.get_heap_bases(), WORLD=world,
                             BLOCK_M=block, BLOCK_N=block, BLOCK_K=32)
    ctx.barrier()
    assert torch.allclose(c, a_full @ b_full, rtol=1e-2, atol=5e-2)
    d = ctx.zeros(m, n, name="D")
    ctx.barrier()
    k.gemm_bias_relu_all_scatter[grid](a, b_local, d, m, n, kk, n_local, rank, ctx.get_heap_bases(), WORLD=world,
                                       BLOCK_M=block, BLOCK_N=block, BLOCK_K=32)


def collectives(ctx, rank, world):
    """Every collective, each called three times back to back (workspace reuse, call parity wrapping round)."""
    n = 300
    inp = ctx.zeros(n, name="inp")
    inp.copy_(torch.randn(n, generator=torch.Generator().manual_seed(rank)))
    small = Config(block_size=64)
    ctx.barrier()
    for variant in ("one_shot", "two_shot", "ring", "atomic"):
        out = ctx.zeros(n, name=f"all_reduce_{variant}")
        for _ in range(3):
            ctx.ccl.all_reduce(out, inp, config=Config(all_reduce_variant=variant, block_size=64))
    for variant in ("push", "pull"):
        gathered = ctx.zeros(world * n, name=f"all_gather_{variant}")
        for _ in range(3):
            ctx.ccl.all_gather(gathered, inp, config=Config(all_gather_variant=variant, block_size=64))
    scattered = ctx.zeros(n, name="reduce_scatter")
    exchanged = ctx.zeros(4, 8 * world, name="all_to_all_out")
    to_exchange = ctx.zeros(4, 8 * world, name="all_to_all_in")
    to_exchange.fill_(rank)
    ctx.barrier()
    for _ in range(3):
        ctx.ccl.reduce_scatter(scattered, inp, config=small)
        ctx.ccl.all_to_all(exchanged, to_exchange, config=Config(block_size_m=4, block_size_n=8))
        ctx.device_barrier()


CORRECT = {
    "release_acquire": release_acquire, "gluon_release_acquire": gluon_release_acquire,
    "host_barrier": host_barrier, "device_barrier": device_barrier,
    "launch_order_and_counted_programs": launch_order_and_counted_programs,
    "lesson_02": lesson_02, "lesson_03": lesson_03, "lesson_04": lesson_04, "lesson_05": lesson_05,
    "lesson_06": lesson_06, "lesson_07": lesson_07, "collectives": collectives,
}


def correct_corpus():
    """Every correct scenario: each must come back with no race. Then a buggy one, which must: the checker was
    still watching after them all."""
    scenarios = _Scenarios()
    for name, scenario in CORRECT.items():
        scenarios.run(name, scenario)
    scenarios.run("control", two_programs)
    return {"rank": scenarios.rank, "races": scenarios.races}


def triton_cdiv(a, b):
    return (a + b - 1) // b


# ============================================================================ the rooted collectives and p2p

def _rooted_and_p2p(ctx, rank, world):
    """broadcast, scatter, gather, reduce (both variants), point-to-point around the ring, all_gather's ring and
    all_to_all_v, three calls each (two at 8 ranks); what a
    root gathered or reduced is read by the next collective's kernel (what each protocol's closing signal orders)."""
    n = 40
    small = Config(block_size=16)
    mine = ctx.zeros(n, name="mine")
    mine.fill_(rank + 1)
    broadcast_out = ctx.zeros(n, name="broadcast_out")
    scatter_in, scatter_out = ctx.zeros(world * n, name="scatter_in"), ctx.zeros(n, name="scatter_out")
    gather_out = ctx.zeros(world * n, name="gather_out")
    reduced = {v: ctx.zeros(n, name=f"reduce_{v}") for v in ("push", "two_shot")}
    ctx.ccl.init_p2p(max_numel=n, dtype=torch.float32, config=small)
    ring_out = torch.zeros(n)
    ring_gathered = ctx.zeros(world * n, name="ring_gathered")
    widths = [rank + 1 + j for j in range(world)]  # rank r sends rank j r + j + 1 columns
    v_in = ctx.zeros(2, 2 * world * world, name="v_in")
    v_out = ctx.zeros(2, 2 * world * world, name="v_out")
    ctx.barrier()
    # 3 calls: push's inbox halves come round again; 8 ranks on two cores run 2 (their race is the world's size)
    for call in range(3 if world <= 4 else 2):
        root = call % world
        ctx.ccl.broadcast(broadcast_out, mine, src=root, config=small)
        ctx.ccl.scatter(scatter_out, scatter_in, src=root, config=small)
        ctx.ccl.gather(gather_out, mine, dst=root, config=small)
        ctx.ccl.scatter(scatter_out, gather_out, src=root, config=small)  # the root reads what it gathered
        for variant, out in reduced.items():
            ctx.ccl.reduce(out, mine, root=0, config=Config(reduce_variant=variant, block_size=16))
            ctx.ccl.broadcast(out, src=0, config=small)  # the root reads the sum
        ctx.ccl.sendrecv(mine, ring_out, dst=(rank + 1) % world, src=(rank - 1) % world)
        ctx.ccl.all_gather(ring_gathered, mine, config=Config(all_gather_variant="ring", block_size=16))
        ctx.ccl.scatter(scatter_out, ring_gathered, src=root, config=small)  # the root reads what the ring brought
        ctx.ccl.all_to_all_v(v_out[:, :sum(s + 1 + rank for s in range(world))], v_in[:, :sum(widths)],
                             [s + 1 + rank for s in range(world)], widths, config=Config(block_size_m=2,
                                                                                          block_size_n=4))


def rooted_and_p2p_race_free(relaxed: bool):
    """The rooted collectives and p2p, race-checked: no race; with ``relaxed``, then the same with every flag's release
    weakened, which must race."""
    scenarios = _Scenarios()
    scenarios.run("rooted_and_p2p", _rooted_and_p2p)
    if relaxed:
        with sync.relaxed_signals(), warnings.catch_warnings():
            warnings.simplefilter("ignore", iris.RaceWarning)
            scenarios.run("relaxed", _rooted_and_p2p)
    return {"rank": scenarios.rank, "races": scenarios.races}
