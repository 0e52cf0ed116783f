"""Code that runs inside each rank for tests/test_ccl.py and tests/gpu/test_ccl_cuda.py.

Every rank makes its inputs from a generator seeded by (rank, call), so each rank can also rebuild every
peer's inputs and check its results against a torch reference without exchanging data. A failed check
raises in the rank (the test shows its log). Backend: env ``IRIS_TEST_BACKEND`` ("cpu" by default).
"""

from __future__ import annotations

import os
from dataclasses import replace

import torch
import torch.distributed as dist

import iris
from iris.ccl import ALL_GATHER_VARIANTS, ALL_REDUCE_VARIANTS, ALL_TO_ALL_VARIANTS, Config, ReduceOp
from iris.ccl.all_reduce import IN_PLACE_VARIANTS
from iris.ccl.config import REDUCE_SCATTER_VARIANTS

BACKEND = os.environ.get("IRIS_TEST_BACKEND", "cpu")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SENTINEL = -1234.0


def _ctx(heap="256MiB" if BACKEND == "cuda" else "64MiB"):
    return iris.iris(heap, backend=BACKEND)


def _values(rank, call, shape, dtype):
    """Rank ``rank``'s input of call ``call``, as the dtype holds it."""
    generator = torch.Generator().manual_seed(7919 * call + rank)
    return torch.randn(shape, generator=generator).to(dtype)


def _fill(ctx, tensor, rank, call):
    tensor.copy_(_values(rank, call, tuple(tensor.shape), tensor.dtype).to(ctx.device))


def _sum_reference(world, call, shape, dtype):
    return sum(_values(r, call, shape, dtype).double() for r in range(world))


def _tolerance(dtype, world):
    # fp16/bf16 outputs round once (ring: once per hop); fp32 sums in another order (atomic).
    return {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3 * world, 2e-3),
            torch.bfloat16: (2e-2 * world, 2e-2)}[dtype]


def _check_close(what, actual, expected, dtype, world):
    atol, rtol = _tolerance(dtype, world)
    actual = actual.detach().cpu().double()
    if not torch.allclose(actual, expected, atol=atol, rtol=rtol):
        worst = (actual - expected).abs().max().item()
        raise AssertionError(f"{what}: max error {worst} over atol={atol}, rtol={rtol}")


def _check_equal(what, actual, expected):
    actual = actual.detach().cpu()
    if not torch.equal(actual, expected):
        where = f"rank {dist.get_rank()}: " if dist.is_initialized() else ""
        raise AssertionError(f"{where}{what}: got {actual.flatten()[:8].tolist()}..., "
                             f"expected {expected.flatten()[:8].tolist()}...")


def _raises(kind, fragment, fn):
    try:
        fn()
    except kind as error:
        if fragment not in str(error):
            raise AssertionError(f"expected {kind.__name__} mentioning {fragment!r}, got: {error}") from error
        return str(error)
    raise AssertionError(f"expected {kind.__name__} mentioning {fragment!r}, nothing raised")


# ------------------------------------------------------------------ all_reduce

def every_variant_checks(calls: int) -> int:
    """Checks :func:`all_reduce_every_variant` makes per shape and dtype: every variant and the size rule ``calls``
    times, then each variant that runs in place once more."""
    return (len(ALL_REDUCE_VARIANTS) + 1) * calls + len(IN_PLACE_VARIANTS)


def back_to_back_cases() -> int:
    """Cases :func:`back_to_back` queues: every all_reduce variant (and one_shot in place), every all_gather variant
    (and in place), every reduce_scatter variant, every all_to_all variant."""
    return (len(ALL_REDUCE_VARIANTS) + 1 + 2 * len(ALL_GATHER_VARIANTS) + len(REDUCE_SCATTER_VARIANTS)
            + len(ALL_TO_ALL_VARIANTS))


def all_reduce_every_variant(shapes, block_size, calls=2):
    """Every variant (and the size rule) x fp32/fp16/bf16 x ``shapes``: ``calls`` calls on one workspace with
    new inputs each time, inputs left intact, then in place where allowed; all ranks agree bit for bit
    where the summation order is fixed."""
    ctx = _ctx()
    r, world = ctx.cur_rank, ctx.num_ranks
    checked = 0
    for shape in map(tuple, shapes):
        for dtype in DTYPES:
            for variant in (*ALL_REDUCE_VARIANTS, None):
                # spinlock's tiles (one lock each) are block_size_m x block_size_n: as many elements as block_size
                tile = {} if block_size is None else {"block_size_m": 1, "block_size_n": block_size}
                config = Config(all_reduce_variant=variant, block_size=block_size, **tile)
                inp, out = ctx.zeros(shape, dtype=dtype), ctx.zeros(shape, dtype=dtype)
                workspace = None
                for call in range(calls):
                    _fill(ctx, inp, r, call)
                    before = inp.clone()
                    returned = ctx.ccl.all_reduce(out, inp, config=config, workspace=workspace)
                    if workspace is not None and returned is not workspace:
                        raise AssertionError(f"{variant}: the workspace was not reused on call {call}")
                    workspace = returned
                    ctx.barrier()
                    what = f"all_reduce {variant} {dtype} {shape} call {call}"
                    _check_close(what, out, _sum_reference(world, call, shape, dtype), dtype, world)
                    _check_equal(f"{what}: input left intact", inp, before.cpu())
                    if variant in ("one_shot", "two_shot", "two_shot_push", "ring"):
                        everyone = ctx.group.all_gather_object(out.cpu())
                        if any(not torch.equal(o, everyone[0]) for o in everyone):
                            raise AssertionError(f"{what}: ranks disagree")
                    checked += 1
                if variant in IN_PLACE_VARIANTS:
                    _fill(ctx, inp, r, calls)
                    ctx.barrier()
                    ctx.ccl.all_reduce(inp, inp, config=config)
                    ctx.barrier()
                    _check_close(f"all_reduce {variant} {dtype} {shape} in place", inp,
                                 _sum_reference(world, calls, shape, dtype), dtype, world)
                    checked += 1
                ctx.barrier()
    return {"rank": r, "checked": checked, "variant_of_1KiB": iris.ccl.choose_variant(1024, world)}


def spinlock_locks_per_tile(n=1000):
    """The spinlock all-reduce's workspace holds one lock per tile of the tiles it was prepared for: a call with
    larger tiles reuses it, one with smaller tiles (more of them) is refused with upstream's words, on every
    rank (no hang), and the workspace still serves the calls it fits afterwards."""
    ctx = _ctx()
    r, world = ctx.cur_rank, ctx.num_ranks
    inp, out = ctx.zeros(n, dtype=torch.float32), ctx.zeros(n, dtype=torch.float32)
    small, large = (Config(all_reduce_variant="spinlock", block_size_m=m, block_size_n=16) for m in (2, 8))
    workspace = iris.ccl.all_reduce_preamble(out, inp, ctx, config=small)  # 32 locks: ceil(1000 / 32)
    for call, config in enumerate((large, small)):
        _fill(ctx, inp, r, call)
        ctx.barrier()
        if ctx.ccl.all_reduce(out, inp, config=config, workspace=workspace) is not workspace:
            raise AssertionError(f"call {call}: a workspace with enough locks was not reused")
        ctx.barrier()
        _check_close(f"spinlock call {call}", out, _sum_reference(world, call, (n,), torch.float32), torch.float32,
                     world)
    prepared_large = iris.ccl.all_reduce_preamble(out, inp, ctx, config=large)  # 8 locks
    message = _raises(ValueError, "Lock array too small: have 8 but need 32",
                      lambda: ctx.ccl.all_reduce(out, inp, config=small, workspace=prepared_large))
    ctx.barrier()
    return {"rank": r, "message": message}


def back_to_back(numel, calls, block_size=None):
    """``calls`` calls of every all_reduce and all_gather variant (also in place where allowed), of reduce_scatter
    and of all_to_all, queued with no host synchronisation in between: each call's input is refilled on the
    device and its output copied aside in stream order, so a rank that reuses a flag, an inbox or a peer's
    output too early shows up as a wrong call. Inputs are small integers: every sum is exact in bf16 (up to
    8 ranks). Returns how many calls were checked."""
    ctx = _ctx()
    r, world = ctx.cur_rank, ctx.num_ranks
    dtype = torch.bfloat16
    inp, out = ctx.zeros(numel, dtype=dtype), ctx.zeros(numel, dtype=dtype)
    gathered = ctx.zeros(world * numel, dtype=dtype)
    mine = gathered[r * numel:(r + 1) * numel]  # all_gather in place: the input is this rank's slice
    lo, hi = iris.ccl.owned_range(numel, r, world)
    # all_to_all: chunks of 16 columns, about numel elements; column chunk j of a rank's input adds j to its value
    exchanged_in = ctx.zeros(max(1, numel // (16 * world)), 16 * world, dtype=dtype)
    exchanged_out = ctx.zeros_like(exchanged_in)
    chunk_of_column = (torch.arange(16 * world, device=exchanged_in.device) // 16).to(dtype)

    def value(rank, call):  # rank's input of a call
        return float((rank + 1) * (call % 7 + 1))

    def run(kind, variant, in_place, workspace):  # one call: (its workspace, a copy of the result it left)
        if kind == "all_reduce":
            config = Config(all_reduce_variant=variant, block_size=block_size)
            workspace = iris.ccl.all_reduce(inp if in_place else out, inp, ctx, config=config, workspace=workspace)
            return workspace, (inp if in_place else out).clone()
        if kind == "all_gather":
            config = Config(all_gather_variant=variant, block_size=block_size)
            workspace = iris.ccl.all_gather(gathered, mine if in_place else inp, ctx, config=config,
                                            workspace=workspace)
            return workspace, gathered.clone()
        if kind == "all_to_all":
            config = Config(all_to_all_variant=variant)
            workspace = iris.ccl.all_to_all(exchanged_out, exchanged_in, ctx, config=config, workspace=workspace)
            return workspace, exchanged_out.clone()
        config = Config(reduce_scatter_variant=variant, block_size=block_size)
        return iris.ccl.reduce_scatter(out, inp, ctx, config=config, workspace=workspace), out[lo:hi].clone()

    def refill(kind, in_place, call):  # on the device, in stream order
        if kind == "all_to_all":
            exchanged_in.copy_((value(r, call) + chunk_of_column).expand_as(exchanged_in))
        else:
            (mine if kind == "all_gather" and in_place else inp).fill_(value(r, call))

    def expected(kind, call):
        if kind == "all_to_all":  # rank s's chunk r, for every s
            rows = exchanged_in.shape[0]
            return torch.cat([torch.full((rows, 16), value(s, call) + r, dtype=dtype) for s in range(world)], dim=1)
        if kind == "all_gather":
            return torch.cat([torch.full((numel,), value(s, call), dtype=dtype) for s in range(world)])
        total = torch.full((numel,), sum(value(s, call) for s in range(world)), dtype=dtype)
        return total if kind == "all_reduce" else total[lo:hi]

    cases = [("all_reduce", v, False) for v in ALL_REDUCE_VARIANTS] + [("all_reduce", "one_shot", True)]
    cases += [("all_gather", v, in_place) for v in ALL_GATHER_VARIANTS for in_place in (False, True)]
    checked = 0
    cases += [("reduce_scatter", v, False) for v in REDUCE_SCATTER_VARIANTS]
    cases += [("all_to_all", v, False) for v in ALL_TO_ALL_VARIANTS]
    for kind, variant, in_place in cases:
        history, workspace = [], None
        ctx.barrier()
        for call in range(calls):
            refill(kind, in_place, call)
            kept = workspace
            workspace, result = run(kind, variant, in_place, workspace)
            history.append(result)
            # the copy engines' steps keep their barriers' flags in a workspace of their own, reused, that names them
            if variant == "copy_engines" and (workspace.key[:2] != (kind, variant) or call and workspace is not kept):
                raise AssertionError(f"{kind} copy_engines call {call}: workspace {workspace.key[:2]}, "
                                     f"{'the last call' if workspace is kept else 'a new one'}'s")
        for call, got in enumerate(history):
            what = f"{kind} {variant}{' in place' if in_place else ''}: call {call} of {calls} back to back"
            _check_equal(what, got, expected(kind, call))
            checked += 1
    return {"rank": r, "checked": checked}


# ------------------------------------------------------------------ the other collectives

def _all_gather(ctx, shape, dtype, in_place, config):
    r, world = ctx.cur_rank, ctx.num_ranks
    out = ctx.full((world * shape[0], *shape[1:]), SENTINEL, dtype=dtype)
    inp = out[r * shape[0]:(r + 1) * shape[0]] if in_place else ctx.zeros(shape, dtype=dtype)
    _fill(ctx, inp, r, 0)
    before = inp.clone()
    ctx.barrier()
    ctx.ccl.all_gather(out, inp, config=config)
    ctx.barrier()
    expected = torch.cat([_values(s, 0, shape, dtype) for s in range(world)])
    _check_equal(f"all_gather {dtype} {shape} in_place={in_place}", out, expected)
    _check_equal(f"all_gather {dtype} {shape}: input intact", inp, before.cpu())


def _all_to_all(ctx, rows, cols, dtype, config):
    r, world = ctx.cur_rank, ctx.num_ranks
    inp, out = ctx.zeros(rows, cols * world, dtype=dtype), ctx.zeros(rows, cols * world, dtype=dtype)
    _fill(ctx, inp, r, 1)
    ctx.barrier()
    ctx.ccl.all_to_all(out, inp, config=config)
    ctx.barrier()
    expected = torch.cat([_values(s, 1, (rows, cols * world), dtype)[:, r * cols:(r + 1) * cols]
                          for s in range(world)], dim=1)
    _check_equal(f"all_to_all {dtype} ({rows}, {cols} x {world})", out, expected)


def _reduce_scatter(ctx, shape, dtype, in_place, config):
    r, world = ctx.cur_rank, ctx.num_ranks
    inp = ctx.zeros(shape, dtype=dtype)
    _fill(ctx, inp, r, 2)
    out = inp if in_place else ctx.full(shape, SENTINEL, dtype=dtype)
    before = inp.clone().cpu()
    ctx.barrier()
    ctx.ccl.reduce_scatter(out, inp, config=config)
    ctx.barrier()
    lo, hi = iris.ccl.owned_range(inp.numel(), r, world)
    flat = out.flatten().cpu()
    what = f"reduce_scatter {dtype} {shape} in_place={in_place}"
    _check_close(what, flat[lo:hi], _sum_reference(world, 2, shape, dtype).flatten()[lo:hi], dtype, world)
    untouched = before.flatten() if in_place else torch.full((inp.numel(),), SENTINEL, dtype=dtype)
    _check_equal(f"{what}: elements other ranks own are untouched", torch.cat([flat[:lo], flat[hi:]]),
                 torch.cat([untouched[:lo], untouched[hi:]]))
    if not in_place:
        _check_equal(f"{what}: input intact", inp, before)
    return hi - lo


def other_collectives(block_size):
    """all_gather (every variant, also in place), all_to_all (every variant), reduce_scatter (both variants, also
    in place) in fp32/fp16/bf16 with odd shapes, twice each (workspace reuse)."""
    ctx = _ctx()
    config = Config(block_size=block_size, block_size_m=4, block_size_n=16, comm_sms=3)
    owned = []
    for dtype in DTYPES:
        for _ in range(2):
            for variant in ALL_GATHER_VARIANTS:
                gather = replace(config, all_gather_variant=variant)
                _all_gather(ctx, (5, 37), dtype, False, gather)
                _all_gather(ctx, (3, 7), dtype, True, gather)
            for variant in ALL_TO_ALL_VARIANTS:
                _all_to_all(ctx, 5, 19, dtype, replace(config, all_to_all_variant=variant))
            for variant in REDUCE_SCATTER_VARIANTS:
                scatter = replace(config, reduce_scatter_variant=variant)
                owned.append(_reduce_scatter(ctx, (5, 37), dtype, False, scatter))
                _reduce_scatter(ctx, (7, 3), dtype, True, scatter)
    return {"rank": ctx.cur_rank, "owned": owned[0]}


# ------------------------------------------------------------------ device barrier, async_op, errors

def barrier_async_and_errors():
    """device_barrier orders host writes into peers' heaps, round after round; async_op returns at once
    and wait() completes; bad arguments raise clear errors (before any rank communicates)."""
    ctx = _ctx()
    r, world = ctx.cur_rank, ctx.num_ranks
    right, left = (r + 1) % world, (r - 1) % world
    slot = ctx.zeros(8, dtype=torch.int32)
    ctx.barrier()  # every slot zeroed before anyone writes into it
    for round_ in range(6):  # without the barrier a rank would read its slot before the left one wrote it
        ctx.as_remote(slot, right)[round_] = 100 * r + round_
        ctx.device_barrier()
        if int(slot[round_]) != 100 * left + round_:
            raise AssertionError(f"device_barrier round {round_}: slot holds {int(slot[round_])}, "
                                 f"expected {100 * left + round_}")
        ctx.device_barrier()  # nobody writes the next round's slot before everyone read this one

    inp = ctx.zeros(3, 40)
    out = ctx.zeros(3, 40)
    for call in range(3):
        _fill(ctx, inp, r, call)
        ctx.barrier()
        for variant in ALL_REDUCE_VARIANTS:
            work = ctx.ccl.all_reduce(out, inp, async_op=True, config=Config(all_reduce_variant=variant,
                                                                             block_size=32))
            work.wait()
            _check_close(f"async all_reduce {variant} call {call}", out, _sum_reference(world, call, (3, 40),
                         torch.float32), torch.float32, world)
        for variant in ALL_GATHER_VARIANTS:
            gathered = ctx.zeros(3 * world, 40)
            ctx.ccl.all_gather(gathered, inp, async_op=True, config=Config(all_gather_variant=variant)).wait()
            _check_equal(f"async all_gather {variant} call {call}", gathered,
                         torch.cat([_values(s, call, (3, 40), torch.float32) for s in range(world)]))
        ctx.barrier()

    off_heap = torch.zeros(3, 40, device=ctx.device)
    messages = [
        _raises(NotImplementedError, "ReduceOp.SUM", lambda: ctx.ccl.all_reduce(out, inp, op=ReduceOp.MAX)),
        _raises(ValueError, "dist.new_group", lambda: ctx.ccl.all_gather(out, inp, group=object())),
        _raises(ValueError, "ctx.zeros", lambda: ctx.ccl.all_reduce(out, off_heap)),
        _raises(ValueError, "separate", lambda: ctx.ccl.all_reduce(
            inp, inp, config=Config(all_reduce_variant="ring"))),
        _raises(ValueError, "shape", lambda: ctx.ccl.all_gather(out, inp)),
        _raises(ValueError, "all_reduce_variant", lambda: Config(all_reduce_variant="tree")),
    ]
    ctx.barrier()
    return {"rank": r, "messages": messages}


def _bound(workspace):
    """The one recorded launch of ``workspace`` (iris.ccl.fast_path)."""
    if len(workspace.launches) != 1:
        raise AssertionError(f"expected one recorded launch, found {len(workspace.launches)}")
    return next(iter(workspace.launches.values()))


def repeated_calls_replay(numel):
    """A repeated call with the same tensors replays its recorded launch (no checks, no size rule, no
    allocation; on a GPU the compiled kernel directly) and still computes with the tensors' current values;
    new tensors, a freed tensor's address reused, a changed Config and bad arguments take the full path."""
    ctx = _ctx()
    r, world = ctx.cur_rank, ctx.num_ranks
    direct = BACKEND == "cuda"
    inp, out = ctx.zeros(numel), ctx.zeros(numel)
    gathered, chunk = ctx.zeros(world * numel), ctx.zeros(numel)
    workspaces = {}
    ops = {  # name: (call, check of call number c)
        "all_reduce": (lambda: ctx.ccl.all_reduce(out, inp), lambda c: _check_close(
            f"all_reduce call {c}", out, _sum_reference(world, c, (numel,), torch.float32), torch.float32, world)),
        "all_gather": (lambda: ctx.ccl.all_gather(gathered, inp), lambda c: _check_equal(
            f"all_gather call {c}", gathered, torch.cat([_values(s, c, (numel,), torch.float32)
                                                       for s in range(world)]))),
        "reduce_scatter": (lambda: ctx.ccl.reduce_scatter(chunk, inp), None),
        "barrier": (lambda: iris.ccl.device_barrier(ctx, workspace=workspaces.get("barrier")), None),
    }
    usage = None
    for call in range(4):
        _fill(ctx, inp, r, call)
        ctx.barrier()
        for name, (run, check) in ops.items():
            workspace = run()
            if call == 0:
                workspaces[name] = workspace
            elif workspace is not workspaces[name]:
                raise AssertionError(f"{name} call {call} made a new workspace")
            if check is not None:
                check(call)
        if call == 0:
            usage = ctx.heap_usage()
        ctx.barrier()
    for name, workspace in workspaces.items():
        bound = _bound(workspace)
        if (bound.replays, bound.direct) != (3, direct):
            raise AssertionError(f"{name}: {bound.replays} replays (direct: {bound.direct}), expected 3 ({direct})")
    if ctx.heap_usage() != usage:
        raise AssertionError(f"replays allocated on the heap: {usage} then {ctx.heap_usage()}")

    # Other tensors of the same shape: a second record beside the first, both replayable.
    other_out = ctx.zeros(numel)
    for call in (4, 5):
        _fill(ctx, inp, r, call)
        ctx.barrier()
        ctx.ccl.all_reduce(other_out, inp)
        ctx.ccl.all_reduce(out, inp)
        for what, tensor in (("other output", other_out), ("output", out)):
            _check_close(f"all_reduce into the {what}, call {call}", tensor,
                         _sum_reference(world, call, (numel,), torch.float32), torch.float32, world)
        ctx.barrier()
    if len(workspaces["all_reduce"].launches) != 2:
        raise AssertionError(f"expected 2 records, found {len(workspaces['all_reduce'].launches)}")
    # A freed output's address handed to a new tensor: the record's addresses are right for it too.
    address = other_out.data_ptr()
    del other_out
    reused = ctx.zeros(numel)
    _fill(ctx, inp, r, 6)
    ctx.barrier()
    ctx.ccl.all_reduce(reused, inp)
    _check_close("all_reduce into a reused address", reused, _sum_reference(world, 6, (numel,), torch.float32),
                 torch.float32, world)
    # A Config with other values is another call: its own workspace.
    two_shot = ctx.ccl.all_reduce(out, inp, config=Config(all_reduce_variant="two_shot"))
    if two_shot.key[1] != "two_shot":
        raise AssertionError(f"Config(all_reduce_variant='two_shot') ran {two_shot.key[1]}")
    # A bad call after replays is still checked.
    message = _raises(ValueError, "shape", lambda: ctx.ccl.all_reduce(out[:-1], inp))
    ctx.barrier()
    return {"rank": r, "reused_address": reused.data_ptr() == address, "message": message}


# ------------------------------------------------------------------ CUDA graphs (GPU only)

def graph_capture(numel):
    """all_reduce (auto and every variant), all_gather and device_barrier captured in one CUDA graph,
    replayed with new inputs: the epochs advance on the device."""
    ctx = _ctx()
    r, world = ctx.cur_rank, ctx.num_ranks
    dtype = torch.bfloat16
    inp = ctx.zeros(numel, dtype=dtype)
    outs = {v: ctx.zeros(numel, dtype=dtype) for v in (*ALL_REDUCE_VARIANTS, None)}
    gathered = ctx.zeros(world * numel, dtype=dtype)
    configs = {v: Config(all_reduce_variant=v) for v in outs}
    workspaces = {v: ctx.ccl.all_reduce(outs[v], inp, config=configs[v]) for v in outs}  # allocate first
    ctx.ccl.all_gather(gathered, inp)
    ctx.device_barrier()
    torch.cuda.synchronize()
    ctx.barrier()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        for v in outs:
            ctx.ccl.all_reduce(outs[v], inp, config=configs[v], workspace=workspaces[v])
        ctx.ccl.all_gather(gathered, inp)
        ctx.device_barrier()
    for call in range(3):
        _fill(ctx, inp, r, call)
        torch.cuda.synchronize()
        ctx.barrier()
        graph.replay()
        torch.cuda.synchronize()
        ctx.barrier()
        for v, out in outs.items():
            _check_close(f"graph replay {call} all_reduce {v}", out, _sum_reference(world, call, (numel,), dtype),
                         dtype, world)
        _check_equal(f"graph replay {call} all_gather", gathered,
                     torch.cat([_values(s, call, (numel,), dtype) for s in range(world)]))
    return {"rank": r, "replays": 3}


def inbox_out_of_heap():
    """An inbox variant whose scratch does not fit in a small CPU heap: every rank raises a MemoryError that names
    the collective, the inbox's size and the variant that needs none; the heap then still serves that variant."""
    ctx = iris.iris("8MiB", backend=BACKEND)
    inp, out = ctx.zeros(1 << 19), ctx.zeros(1 << 19)  # 2 MiB each: two_shot_push's inbox of 4 MiB cannot fit
    _fill(ctx, inp, ctx.cur_rank, 0)
    message = None
    try:
        ctx.ccl.all_reduce(out, inp, config=Config(all_reduce_variant="two_shot_push"))
    except MemoryError as error:
        message = str(error)
    ctx.barrier()
    ctx.ccl.all_reduce(out, inp, config=Config(all_reduce_variant="two_shot", block_size=1 << 16))
    ctx.barrier()
    _check_close("two_shot after the refusal", out, _sum_reference(ctx.num_ranks, 0, (1 << 19,), torch.float32),
                 torch.float32, ctx.num_ranks)
    return {"rank": ctx.cur_rank, "message": message}
