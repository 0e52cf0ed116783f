"""Code that runs inside each of 4 ranks for tests/test_ccl_groups.py: collectives over process groups.

Every collective runs over ``dist.group.WORLD``, consecutive groups ([0, 1], [2, 3]) and strided groups
([0, 2], [1, 3]), each rank with the group it is in, so two groups always run at once; the reference is
torch.distributed's own collective on gloo over the same group. Inputs are small integers, whose sums are
exact in every dtype and every order of addition, so results are compared bit for bit. A failed check
raises in the rank (the test shows its log).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

import iris
from iris.ccl import ALL_GATHER_VARIANTS, ALL_REDUCE_VARIANTS, Config
from iris.ccl.config import REDUCE_SCATTER_VARIANTS
from iris.ccl.reduce_scatter import owned_range
from iris.ccl.utils import extract_group_info

from .rank_cases_ccl import _check_equal, _raises

DTYPES = (torch.float32, torch.bfloat16)
SENTINEL = -1234.0
SHAPE = (5, 8)  # 40 elements: two blocks of 32 (two programs on the CPU), the last one partial


def _integers(rank, call, shape, dtype):
    """Rank ``rank``'s input of call ``call``: integers in [-8, 8], exact in every dtype and any sum of four."""
    generator = torch.Generator().manual_seed(1000 * call + rank)
    return torch.randint(-8, 9, shape, generator=generator).to(dtype)


def _groups():
    """Every rank creates every group (new_group is collective over the world); each keeps the one it is in."""
    rank = dist.get_rank()
    consecutive = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    strided = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    return {"world": dist.group.WORLD, "consecutive": consecutive[rank // 2], "strided": strided[rank % 2]}


def _gloo_sum(values, group):
    total = values.float().clone()
    dist.all_reduce(total, group=group)
    return total


def _gloo_gather(values, group):
    parts = [torch.empty_like(values.float()) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, values.float(), group=group)
    return parts


def _collectives_over(ctx, name, group, call):
    """Every collective and variant over ``group``, sync and async, against gloo over the same group."""
    checked = 0
    members, me = dist.get_world_size(group), dist.get_rank(group)
    for dtype in DTYPES:
        values = _integers(dist.get_rank(), call, SHAPE, dtype)
        inp, out = ctx.zeros(SHAPE, dtype=dtype), ctx.zeros(SHAPE, dtype=dtype)
        inp.copy_(values)
        expected_sum = _gloo_sum(values, group).to(dtype)
        for variant in (*ALL_REDUCE_VARIANTS, None):
            for async_op in (False, True):
                out.fill_(SENTINEL)
                work = ctx.ccl.all_reduce(out, inp, group=group, async_op=async_op,
                                          config=Config(all_reduce_variant=variant, block_size=32))
                if async_op:
                    work.wait()
                _check_equal(f"{name} all_reduce {variant} {dtype} async={async_op}", out, expected_sum)
                checked += 1
        expected_rows = torch.cat(_gloo_gather(values, group)).to(dtype)
        gathered = ctx.zeros((members * SHAPE[0], SHAPE[1]), dtype=dtype)
        for variant in ALL_GATHER_VARIANTS:
            for async_op in (False, True):
                gathered.fill_(SENTINEL)
                work = ctx.ccl.all_gather(gathered, inp, group=group, async_op=async_op,
                                          config=Config(all_gather_variant=variant, block_size=32))
                if async_op:
                    work.wait()
                _check_equal(f"{name} all_gather {variant} {dtype} async={async_op}", gathered, expected_rows)
                checked += 1
        lo, hi = owned_range(inp.numel(), me, members)
        expected = torch.full(SHAPE, SENTINEL, dtype=dtype).flatten()
        expected[lo:hi] = expected_sum.flatten()[lo:hi]
        for variant in REDUCE_SCATTER_VARIANTS:
            out.fill_(SENTINEL)
            ctx.ccl.reduce_scatter(out, inp, group=group, config=Config(reduce_scatter_variant=variant, block_size=32))
            _check_equal(f"{name} reduce_scatter {variant} {dtype}", out.flatten(), expected)
            checked += 1
    checked += _all_to_all_over(ctx, name, group, call)
    return checked


def _all_to_all_over(ctx, name, group, call):
    """Column chunk j of each member's input to member j, against the same exchange built from gloo's all_gather."""
    members, me, n = dist.get_world_size(group), dist.get_rank(group), 3
    values = _integers(dist.get_rank(), call, (4, n * members), torch.float32)
    inp, out = ctx.zeros(values.shape), ctx.zeros(values.shape)
    inp.copy_(values)
    everyone = _gloo_gather(values, group)
    expected = torch.cat([everyone[s][:, me * n:(me + 1) * n] for s in range(members)], dim=1)
    ctx.ccl.all_to_all(out, inp, group=group, config=Config(block_size_m=4, block_size_n=16))
    _check_equal(f"{name} all_to_all", out, expected)
    return 1


def every_collective_over_groups():
    """World, consecutive and strided groups (two groups at once), every collective; then the groups' own
    state: workspaces, the fast path, barriers, and interleaved calls of overlapping groups; then bad groups."""
    ctx = iris.iris("64MiB")
    rank = ctx.cur_rank
    groups = _groups()
    checked = 0
    for call, (name, group) in enumerate(groups.items()):
        checked += _collectives_over(ctx, name, group, call)
        ctx.barrier()

    # Each group has its own workspaces, flags sized for the group.
    for name in ("consecutive", "strided"):
        ranks = tuple(dist.get_process_group_ranks(groups[name]))
        workspace = ctx.ccl._cached("reduce_scatter", None, groups[name])
        if workspace is None or workspace.key[-1] != ranks or workspace.flags.shape[1] != 2:
            raise AssertionError(f"rank {rank}: {name} reduce_scatter workspace {workspace and workspace.key}")
    world_workspace = ctx.ccl._cached("reduce_scatter", None)
    if world_workspace is None or world_workspace.key[-1] is not None:
        raise AssertionError(f"rank {rank}: WORLD did not share group=None's workspace")

    # Overlapping groups interleaved on one rank (each keeps its own call counters), repeated calls replayed.
    replays = 0
    inp, out = ctx.zeros(SHAPE), ctx.zeros(SHAPE)
    for call in range(3, 6):
        values = _integers(rank, call, SHAPE, torch.float32)
        inp.copy_(values)
        for name in ("consecutive", None, "strided"):
            group = groups[name] if name else None
            workspace = ctx.ccl.all_reduce(out, inp, group=group, config=Config(all_reduce_variant="two_shot"))
            _check_equal(f"interleaved {name} call {call}", out, _gloo_sum(values, group or dist.group.WORLD))
            replays += sum(bound.replays for bound in workspace.launches.values())
            checked += 1
    if replays == 0:
        raise AssertionError(f"rank {rank}: repeated group calls never took the fast path")

    # Different collectives in the two groups at once. Allocating is collective over every rank, so first
    # every rank makes the call that allocates the all_gather workspace (the all_reduce one exists already).
    group = groups["consecutive"]
    gathered = ctx.zeros((2 * SHAPE[0], SHAPE[1]))
    gather = Config(all_gather_variant="pull", block_size=32)
    ctx.ccl.all_gather(gathered, inp, group=group, config=gather)
    for call in range(6, 9):
        values = _integers(rank, call, SHAPE, torch.float32)
        inp.copy_(values)
        if rank < 2:
            ctx.ccl.all_reduce(out, inp, group=group, config=Config(all_reduce_variant="two_shot"))
            _check_equal(f"[0, 1] all_reduce beside [2, 3]'s all_gather, call {call}", out, _gloo_sum(values, group))
        else:
            ctx.ccl.all_gather(gathered, inp, group=group, config=gather)
            _check_equal(f"[2, 3] all_gather beside [0, 1]'s all_reduce, call {call}", gathered,
                         torch.cat(_gloo_gather(values, group)))
        checked += 1
    ctx.barrier()

    # Barriers over a group, on the device and on the host.
    for group in groups.values():
        ctx.device_barrier(group=group)
        ctx.barrier(group=group)
    state = ctx._device_barrier_state
    if set(state) != {None, groups["consecutive"], groups["strided"]}:  # keyed as upstream: by the group
        raise AssertionError(f"rank {rank}: device barrier state per group {sorted(map(str, state))}")
    info = {name: extract_group_info(group, ctx) for name, group in groups.items()}
    ctx.barrier()
    return {"rank": rank, "checked": checked, "info": info, "messages": _bad_groups(ctx)}


def _bad_groups(ctx):
    """A group this rank is not in, something that is not a group, and unevenly spaced ranks: the messages."""
    rank = ctx.cur_rank
    uneven = dist.new_group([0, 1, 3])
    pair = dist.new_group([0, 1])
    inp, out, wrong_shape = ctx.zeros(8), ctx.zeros(8), ctx.zeros(24)
    messages = [_raises(ValueError, "dist.new_group", lambda: ctx.ccl.all_reduce(out, inp, group="tp"))]
    if rank == 2:
        messages.append(_raises(ValueError, "not in", lambda: ctx.ccl.all_reduce(out, inp, group=uneven)))
    else:
        messages.append(_raises(NotImplementedError, "evenly spaced", lambda: ctx.ccl.all_gather(
            wrong_shape, inp, group=uneven)))
    if rank >= 2:
        messages.append(_raises(ValueError, "not in", lambda: ctx.device_barrier(group=pair)))
        messages.append(_raises(ValueError, "not in", lambda: ctx.barrier(group=pair)))
    else:
        messages.append(_raises(ValueError, "over 2 ranks", lambda: ctx.ccl.all_gather(
            wrong_shape, inp, group=pair)))
    ctx.barrier()
    return messages
