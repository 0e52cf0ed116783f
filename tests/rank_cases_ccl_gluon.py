"""Code that runs inside each rank for tests/test_ccl_gluon.py and tests/gpu/test_ccl_cuda.py: the Gluon
collectives (``Config(use_gluon=True)``: all_gather and all_to_all) against torch.

Every rank makes its inputs from a generator seeded by (rank, call), so it can rebuild every peer's inputs and
check its results bit for bit (the collectives only move data). Which kernel ran is read from the launch the
call recorded (iris.ccl.fast_path): a Gluon kernel's name starts with ``gluon_``. A failed check raises in the
rank (the test shows its log). Backend: env ``IRIS_TEST_BACKEND`` ("cpu" by default).
"""

from __future__ import annotations

import iris.iris_gluon
import torch
import torch.distributed as dist

import iris
from iris.ccl import Config

from .rank_cases_ccl import BACKEND, _check_equal, _ctx, _raises

# Every element size (8, 4, 2, 1 bytes: every vector width of the layouts), floats and integers.
DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int8)
VARIANTS = (None, "push", "pull")  # None: the size rule
SENTINEL = -7  # in every dtype


def _values(rank, call, shape, dtype):
    """Rank ``rank``'s input of call ``call``."""
    generator = torch.Generator().manual_seed(7919 * call + rank)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator).to(dtype)
    return torch.randint(-100, 100, shape, generator=generator).to(dtype)


def _last_launch(workspace):
    """The launch the workspace's last call recorded (iris.ccl.fast_path.BoundLaunch)."""
    return list(workspace.launches.values())[-1]


def _kernel_name(workspace) -> str:
    """Name of the kernel the workspace's last recorded call launched."""
    bound = _last_launch(workspace)
    return bound.compiled.name if bound.direct else bound.kernel.fn.__name__


def _ran_gluon(what, workspace) -> None:
    name = _kernel_name(workspace)
    if not name.startswith("gluon_"):
        raise AssertionError(f"{what}: ran {name}, not a Gluon kernel")


def _gather(ctx, shape, dtype, call, in_place, group_size=None, member=None):
    """Output (sentinels) and input (rank's values of ``call``) of an all_gather of ``shape`` inputs over
    ``group_size`` ranks (None: every rank; ``member``: this rank's index in the group); in place: the input is
    this member's slice of the output."""
    world = group_size or ctx.num_ranks
    member = ctx.cur_rank if member is None else member
    out = ctx.full((world * shape[0], *shape[1:]), SENTINEL, dtype=dtype)
    inp = out[member * shape[0]:(member + 1) * shape[0]] if in_place else ctx.zeros(shape, dtype=dtype)
    inp.copy_(_values(ctx.cur_rank, call, shape, dtype))
    ctx.barrier()
    return out, inp


def all_gather_and_all_to_all_against_torch(shape, cols, block_size, comm_sms, dtypes=None):
    """Each dtype (``dtypes``: names such as "bfloat16", None: every one of DTYPES), with each all_gather
    variant in turn, in place and not, and all_to_all (``shape[0]`` rows, ``cols`` per rank) with the default
    tile and a small one; then three calls with the same tensors and new values (replays of the recorded
    launch)."""
    ctx = _ctx()
    r, world = ctx.cur_rank, ctx.num_ranks
    checked = 0
    for i, dtype in enumerate(DTYPES if dtypes is None else [getattr(torch, name) for name in dtypes]):
        config = Config(use_gluon=True, all_gather_variant=VARIANTS[i % 3], block_size=block_size, comm_sms=comm_sms)
        in_place = i % 2 == 1
        out, inp = _gather(ctx, shape, dtype, i, in_place)
        workspace = ctx.ccl.all_gather(out, inp, config=config)
        ctx.barrier()
        what = f"all_gather {dtype} {shape} {config.all_gather_variant or 'by size'} in_place={in_place}"
        _ran_gluon(what, workspace)
        _check_equal(what, out, torch.cat([_values(s, i, shape, dtype) for s in range(world)]))
        tile = dict(block_size_m=4, block_size_n=16) if i % 2 else {}
        workspace, out = _all_to_all(ctx, shape[0], cols, dtype, i, Config(use_gluon=True, comm_sms=comm_sms, **tile))
        _ran_gluon(f"all_to_all {dtype}", workspace)
        checked += 2

    gathered, inp = _gather(ctx, shape, torch.float32, 0, False)
    exchanged, source = ctx.zeros(shape[0], cols * world), ctx.zeros(shape[0], cols * world)
    gluon = Config(use_gluon=True, block_size=block_size, comm_sms=comm_sms)
    for call in range(3):
        inp.copy_(_values(r, call, shape, torch.float32))
        source.copy_(_values(r, call, (shape[0], cols * world), torch.float32))
        ctx.barrier()
        gather_ws = ctx.ccl.all_gather(gathered, inp, config=gluon)
        exchange_ws = ctx.ccl.all_to_all(exchanged, source, config=gluon)
        ctx.barrier()
        _check_equal(f"all_gather call {call}", gathered,
                     torch.cat([_values(s, call, shape, torch.float32) for s in range(world)]))
        _check_equal(f"all_to_all call {call}", exchanged, _exchanged(r, world, call, shape[0], cols, torch.float32))
        checked += 2
    for name, workspace in (("all_gather", gather_ws), ("all_to_all", exchange_ws)):
        bound = _last_launch(workspace)  # a workspace of the same shapes may hold earlier calls' records too
        if (bound.replays, bound.direct) != (2, BACKEND == "cuda"):
            raise AssertionError(f"{name}: {bound.replays} replays (direct: {bound.direct}), expected 2")
    return {"rank": r, "checked": checked}


def _exchanged(rank, world, call, rows, cols, dtype):
    """What all_to_all gives ``rank``: column chunk ``rank`` of every rank's input, side by side."""
    return torch.cat([_values(s, call, (rows, cols * world), dtype)[:, rank * cols:(rank + 1) * cols]
                      for s in range(world)], dim=1)


def _all_to_all(ctx, rows, cols, dtype, call, config, async_op=False):
    r, world = ctx.cur_rank, ctx.num_ranks
    inp, out = ctx.zeros(rows, cols * world, dtype=dtype), ctx.full((rows, cols * world), SENTINEL, dtype=dtype)
    inp.copy_(_values(r, call, (rows, cols * world), dtype))
    ctx.barrier()
    workspace = ctx.ccl.all_to_all(out, inp, async_op=async_op, config=config)
    if async_op:
        workspace.wait()
    ctx.barrier()
    _check_equal(f"all_to_all {dtype} ({rows}, {cols} x {world}) async_op={async_op}", out,
                 _exchanged(r, world, call, rows, cols, dtype))
    return workspace, out


def async_op_shared_workspace_and_errors():
    """async_op=True then wait(); Triton and Gluon calls alternating on one workspace (one protocol of flags);
    use_gluon on a collective without a Gluon kernel, and bad arguments, refused with the rank named."""
    ctx = _ctx()
    r, world = ctx.cur_rank, ctx.num_ranks
    shape = (3, 40)
    for variant in ("push", "pull"):
        config = Config(use_gluon=True, all_gather_variant=variant)
        out, inp = _gather(ctx, shape, torch.bfloat16, 1, False)
        ctx.ccl.all_gather(out, inp, async_op=True, config=config).wait()
        ctx.barrier()
        _check_equal(f"async all_gather {variant}", out,
                     torch.cat([_values(s, 1, shape, torch.bfloat16) for s in range(world)]))
    _all_to_all(ctx, 3, 8, torch.bfloat16, 2, Config(use_gluon=True), async_op=True)

    out, inp = _gather(ctx, shape, torch.float32, 0, False)
    workspaces = set()
    for call in range(4):  # the same workspace (same shapes and launch shape), Triton and Gluon in turn
        inp.copy_(_values(r, call, shape, torch.float32))
        ctx.barrier()
        workspaces.add(id(ctx.ccl.all_gather(out, inp, config=Config(use_gluon=call % 2 == 1,
                                                                   all_gather_variant="pull"))))
        ctx.barrier()
        _check_equal(f"alternating all_gather call {call}", out,
                     torch.cat([_values(s, call, shape, torch.float32) for s in range(world)]))
    if len(workspaces) != 1:
        raise AssertionError(f"Triton and Gluon calls of one shape used {len(workspaces)} workspaces, expected 1")

    gluon = Config(use_gluon=True)
    square = ctx.zeros(4, 4 * world)
    messages = [
        _raises(ValueError, "all_reduce has no Gluon kernel", lambda: ctx.ccl.all_reduce(inp, inp, config=gluon)),
        _raises(ValueError, "reduce_scatter has no Gluon kernel",
                lambda: ctx.ccl.reduce_scatter(inp, inp, config=gluon)),
        _raises(ValueError, "needs an output of shape", lambda: ctx.ccl.all_gather(inp, inp, config=gluon)),
        _raises(ValueError, "separate tensor", lambda: ctx.ccl.all_to_all(square, square, config=gluon)),
        _raises(ValueError, "the Gluon kernel pulls", lambda: ctx.ccl.all_to_all(
            ctx.zeros_like(square), square, config=Config(use_gluon=True, all_to_all_variant="push"))),
        _raises(ValueError, "the Gluon kernel pulls", lambda: ctx.ccl.all_to_all(
            ctx.zeros_like(square), square, config=Config(use_gluon=True, all_to_all_variant="copy_engines"))),
        _raises(ValueError, "the copy engines run no kernel", lambda: ctx.ccl.all_gather(
            ctx.zeros(world * inp.shape[0], *inp.shape[1:]), inp,
            config=Config(use_gluon=True, all_gather_variant="copy_engines"))),
        _raises(TypeError, "use True or False", lambda: Config(use_gluon="yes")),
    ]
    # upstream's preamble only prepares the workspace, whatever the kernels: it takes use_gluon, as upstream's does
    ctx.ccl.all_reduce_preamble(inp, inp, gluon)
    ctx.barrier()
    return {"rank": r, "messages": messages}


def host_context_async_and_errors():
    """:func:`upstream_calls` then :func:`async_op_shared_workspace_and_errors`, in one run of the ranks."""
    return {**upstream_calls(), **async_op_shared_workspace_and_errors()}


def upstream_calls():
    """The calls upstream Iris's tests/ccl/test_all_gather_gluon.py, test_all_to_all_gluon.py and example
    25_ccl_all_gather (``--use_gluon``) make, on upstream's Gluon host context, against torch.distributed."""
    ctx = iris.iris_gluon.iris("256MiB" if BACKEND == "cuda" else "64MiB", backend=BACKEND)
    r, world = ctx.get_rank(), ctx.get_num_ranks()
    M, N = 16, 256
    configs = {  # upstream's test's tile (no effect on all_gather here), and example 25's defaults
        "test_all_gather_gluon": Config(use_gluon=True, block_size_m=32, block_size_n=256),
        "example 25 --use_gluon": Config(block_size_m=32, block_size_n=64, comm_sms=64, num_stages=1, num_warps=4,
                                         waves_per_eu=0, use_gluon=True),
    }
    for name, config in configs.items():
        inp = ctx.zeros((M, N), dtype=torch.float16)
        inp.fill_(float(r + 1))
        out = ctx.zeros((world * M, N), dtype=torch.float16)
        ctx.barrier()
        ctx.ccl.all_gather(out, inp, config=config)
        ctx.barrier()
        reference = torch.zeros(world * M, N, dtype=torch.float16)
        dist.all_gather_into_tensor(reference, inp.cpu())
        _check_equal(name, out, reference)

    inp = ctx.zeros((M, N * world), dtype=torch.bfloat16)
    inp.copy_(_values(r, 3, (M, N * world), torch.bfloat16))
    out = ctx.zeros((M, N * world), dtype=torch.bfloat16)
    ctx.barrier()
    ctx.ccl.all_to_all(out, inp, config=Config(use_gluon=True))
    ctx.barrier()
    _check_equal("test_all_to_all_gluon", out, _exchanged_by_gloo(inp, N))
    return {"rank": r, "context": type(ctx).__name__}


def over_strided_groups():
    """all_gather (both variants) and all_to_all over the groups [0, 2] and [1, 3] at once (members map to
    global ranks start + i * stride), against torch.distributed over the same groups."""
    ctx = _ctx()
    r = ctx.cur_rank
    strided = [dist.new_group([0, 2]), dist.new_group([1, 3])]  # every rank creates every group
    group = strided[r % 2]
    member = dist.get_rank(group)
    shape = (3, 20)
    for variant in ("push", "pull"):
        config = Config(use_gluon=True, all_gather_variant=variant)
        out, inp = _gather(ctx, shape, torch.float32, 4, False, group_size=2, member=member)
        workspace = ctx.ccl.all_gather(out, inp, group=group, config=config)
        ctx.barrier()
        _ran_gluon(f"all_gather {variant} over a group", workspace)
        parts = [torch.empty(shape) for _ in range(2)]
        dist.all_gather(parts, inp.cpu(), group=group)
        _check_equal(f"all_gather {variant} over group {dist.get_process_group_ranks(group)}", out, torch.cat(parts))
    inp, out = ctx.zeros(3, 16), ctx.zeros(3, 16)
    inp.copy_(_values(r, 5, (3, 16), torch.float32))
    ctx.barrier()
    ctx.ccl.all_to_all(out, inp, group=group, config=Config(use_gluon=True))
    ctx.barrier()
    _check_equal("all_to_all over a group", out, _exchanged_by_gloo(inp, 8, group))
    return {"rank": r, "member": member}


def _exchanged_by_gloo(inp, cols, group=None):
    """What all_to_all gives this rank (column chunk ``cols`` wide, one per member), from every member's input
    gathered by torch.distributed: the ranks' host group is gloo, which has all_gather but no all_to_all."""
    parts = [torch.empty(inp.shape, dtype=inp.dtype) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, inp.cpu().contiguous(), group=group)
    return torch.cat([part.split(cols, dim=1)[dist.get_rank(group)] for part in parts], dim=1)


def race_free_under_the_checker():
    """The race checker (``check="races"``) finds no race in the Gluon collectives, called three times each (call
    parity wrapping round): their flags order every remote access as the Triton kernels' do. Then a control race
    (tests/rank_cases_races.py's two programs writing one element), which it must find: it was watching."""
    from .rank_cases_races import two_programs

    ctx = iris.iris("64MiB", backend="cpu", check="races")
    r, world = ctx.cur_rank, ctx.num_ranks
    inp = ctx.zeros(300, name="inp")
    inp.fill_(r)
    exchanged, to_exchange = ctx.zeros(4, 8 * world, name="exchanged"), ctx.zeros(4, 8 * world, name="to_exchange")
    to_exchange.fill_(r)
    ctx.barrier()
    for variant in ("push", "pull"):
        gathered = ctx.zeros(world * 300, name=f"gathered_{variant}")
        for _ in range(3):
            ctx.ccl.all_gather(gathered, inp, config=Config(use_gluon=True, all_gather_variant=variant, block_size=64))
    for _ in range(3):
        ctx.ccl.all_to_all(exchanged, to_exchange, config=Config(use_gluon=True, block_size_m=4, block_size_n=8))
        ctx.device_barrier()
    ctx.barrier()
    collectives = len(ctx.races())
    two_programs(ctx, r, world)
    ctx.barrier()
    return {"rank": r, "collectives": collectives, "control": len(ctx.races()) - collectives}
