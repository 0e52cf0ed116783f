"""Code that runs inside each rank for tests/test_hosts.py and tests/gpu/test_hosts_cuda.py: ranks on several
hosts, simulated on one machine with ``IRIS_HOST`` per rank (tests/multirank.py's ``rank_env``); any layout of
hosts with as many ranks each (blocks of consecutive ranks, or ranks dealt round-robin).

Every rank makes its inputs from a generator seeded by (rank, call), so it can rebuild every peer's inputs and
check its results against torch without exchanging data; a failed check raises in the rank. Backend: env
``IRIS_TEST_BACKEND`` ("cpu" by default).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import triton
import triton.language as tl

import iris
from iris.ccl.reduce_scatter import chunk_size
from iris.heap.reach import UNMAPPED_BASE, UnreachableRankError

BACKEND = os.environ.get("IRIS_TEST_BACKEND", "cpu")
SENTINEL = -7.0


def _values(rank, call, shape, dtype=torch.float32):
    generator = torch.Generator().manual_seed(7919 * call + rank)
    return torch.randn(shape, generator=generator).to(dtype)


def _close(name, got, want, dtype):
    tolerance = 1e-5 if dtype == torch.float32 else 3e-2
    if not torch.allclose(got.double().cpu(), want.double(), rtol=tolerance, atol=tolerance):
        raise AssertionError(f"{name} {dtype}: max error {(got.double().cpu() - want.double()).abs().max()}")


def collectives_across_hosts():
    """Every collective of ctx.ccl over all ranks, against torch, in float32 and bfloat16; a group inside one
    host; what is refused. Returns what the test checks."""
    ctx = iris.iris("8MiB", backend=BACKEND)
    rank, world, device = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    checked = []
    for call, dtype in enumerate((torch.float32, torch.bfloat16)):
        inp = ctx.zeros(1000, dtype=dtype)
        out = ctx.zeros(1000, dtype=dtype)
        inp.copy_(_values(rank, call, (1000,), dtype).to(device))
        ctx.ccl.all_reduce(out, inp, workspace=ctx.ccl.all_reduce_preamble(out, inp))
        _close("all_reduce", out, sum(_values(r, call, (1000,), dtype).double() for r in range(world)), dtype)

        part = ctx.zeros(3, 5, dtype=dtype)
        part.copy_(_values(rank, call, (3, 5), dtype).to(device))
        gathered = ctx.zeros(3 * world, 5, dtype=dtype)
        ctx.ccl.all_gather(gathered, part)
        _close("all_gather", gathered, torch.cat([_values(r, call, (3, 5), dtype) for r in range(world)]), dtype)

        scattered = ctx.full((1000,), SENTINEL, dtype=dtype)
        ctx.ccl.reduce_scatter(scattered, inp)
        chunk = chunk_size(1000, world)
        lo, hi = min(rank * chunk, 1000), min((rank + 1) * chunk, 1000)
        want = torch.full((1000,), SENTINEL, dtype=torch.float64)
        want[lo:hi] = sum(_values(r, call, (1000,), dtype).double() for r in range(world))[lo:hi]
        _close("reduce_scatter", scattered, want, dtype)

        width = 3
        columns = ctx.zeros(4, width * world, dtype=dtype)
        columns.copy_(_values(rank, call, (4, width * world), dtype).to(device))
        exchanged = ctx.zeros(4, width * world, dtype=dtype)
        ctx.ccl.all_to_all(exchanged, columns)
        want = torch.cat([_values(r, call, (4, width * world), dtype)[:, rank * width:(rank + 1) * width]
                          for r in range(world)], dim=1)
        _close("all_to_all", exchanged, want, dtype)

        _rooted_and_p2p(ctx, call, dtype)
        ctx.ccl.barrier()
        checked.append(str(dtype))
    return {"checked": checked, "domains": ctx.topology.domains(), "hosts": ctx.topology.hosts,
            **_inside_one_host(ctx), **_refusals(ctx)}


def _rooted_and_p2p(ctx, call, dtype):
    """broadcast, reduce, gather and scatter over every rank, each with another root, and a ring of sendrecv
    (some neighbours on this host, some on the other), against seeded references."""
    rank, world, device = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    mine = ctx.zeros(7, 3, dtype=dtype)
    mine.copy_(_values(rank, call, (7, 3), dtype).to(device))
    every = [_values(r, call, (7, 3), dtype) for r in range(world)]
    out = ctx.full((7, 3), SENTINEL, dtype=dtype)
    ctx.ccl.broadcast(out, mine, src=1)
    _close("broadcast", out, every[1], dtype)
    ctx.ccl.reduce(out, mine, root=world - 1)
    if rank == world - 1:
        _close("reduce", out, sum(x.double() for x in every), dtype)
    gathered = ctx.full((7 * world, 3), SENTINEL, dtype=dtype)
    ctx.ccl.gather(gathered, mine, dst=2 % world)
    if rank == 2 % world:
        _close("gather", gathered, torch.cat(every), dtype)
    ctx.ccl.scatter(out, gathered, src=2 % world)
    _close("scatter", out, every[rank], dtype)
    if call == 0:
        ctx.ccl.init_p2p(max_numel=64, dtype=torch.float32)
    received = torch.full((7, 3), SENTINEL, dtype=dtype, device=device)
    ctx.ccl.sendrecv(mine, received, dst=(rank + 1) % world, src=(rank - 1) % world)
    _close("sendrecv", received, every[(rank - 1) % world], dtype)


def _inside_one_host(ctx):
    """A process group of one host's ranks runs on our kernels alone, as in a one-host world; a group spanning
    hosts (but not every rank) is refused."""
    rank, domains = ctx.get_rank(), ctx.topology.domains()
    groups = [dist.new_group(members) for members in domains]  # every rank makes every group
    mine = next(g for g, members in zip(groups, domains, strict=True) if rank in members)
    members = next(m for m in domains if rank in m)
    inp = ctx.full((64,), float(rank + 1))
    out = ctx.zeros(64)
    ctx.ccl.all_reduce(out, inp, group=mine)
    _close("all_reduce over one host", out, torch.full((64,), float(sum(r + 1 for r in members))), torch.float32)
    if len(members) == 1:  # one rank per host: the only group spanning hosts is every rank, which crosses
        return {"spanning_group": None}
    spanning = [dist.new_group([m[i] for m in domains]) for i in range(len(members))]
    across = spanning[members.index(rank)]
    try:
        ctx.ccl.all_reduce(out, inp, group=across)
    except NotImplementedError as error:
        return {"spanning_group": str(error)}
    raise AssertionError("an all_reduce over a group spanning hosts was not refused")


@triton.jit
def _store_kernel(buf, heap_bases, rank, peer, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    iris.store(buf + offs, offs.to(tl.float32), rank, peer, heap_bases, mask=offs < n)


@triton.jit
def _atomic_kernel(context, buf, peer, rank: tl.constexpr, world: tl.constexpr):
    device = iris.DeviceContext.initialize(context, rank, world)
    device.atomic_add(buf, 1.0, peer)


def _refusals(ctx):
    """What cannot cross hosts says so: as_remote, a kernel's store and atomic (interpreter), the fused ops."""
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    mine = next(members for members in ctx.topology.domains() if rank in members)
    far = next(r for r in range(world) if r not in mine)  # the first rank on another host
    near = next((r for r in mine if r != rank), rank)  # another rank of this host, or this one
    buf = ctx.zeros(16)
    # the host keeps 0 for an unmapped heap; kernels read a base whose every offset faults
    assert ctx.heap.bases[far] == 0 and int(ctx.get_heap_bases()[far]) == UNMAPPED_BASE
    result = {}
    try:
        ctx.as_remote(buf, far)
        raise AssertionError("as_remote of a rank on another host was not refused")
    except UnreachableRankError as error:
        result["as_remote"] = str(error)
    ctx.barrier()
    _store_kernel[(1,)](buf, ctx.get_heap_bases(), rank, near, 16, BLOCK=16)  # the same host: fine
    _store_kernel[(1,)](buf, ctx.get_heap_bases(), rank, far, 0, BLOCK=16)  # every lane masked off: nothing
    ctx.barrier()
    result["near_store"] = buf.cpu().tolist() == [float(i) for i in range(16)]
    if BACKEND == "cpu":  # on a GPU such a kernel faults (an illegal address), and takes its process with it
        try:
            _store_kernel[(1,)](buf, ctx.get_heap_bases(), rank, far, 16, BLOCK=16)
            raise AssertionError("a kernel's store to a rank on another host was not refused")
        except UnreachableRankError as error:
            result["store"] = str(error)
        try:
            _atomic_kernel[(1,)](ctx.get_device_context(), buf, far, rank, world)
            raise AssertionError("a kernel's atomic on a rank on another host was not refused")
        except UnreachableRankError as error:
            result["atomic"] = str(error)
    a = ctx.zeros(8, 8, dtype=torch.float16)
    try:
        ctx.ops.matmul_all_reduce(ctx.zeros(8, 8, dtype=torch.float16), a, a)
        raise AssertionError("ctx.ops across hosts was not refused")
    except NotImplementedError as error:
        result["ops"] = str(error)
    ctx.barrier()
    return result


def far_store_on_gpu(debug):
    """A kernel storing into the other host's rank on a GPU, where nothing can raise from inside a kernel: what
    the rank sees (the base kernels read is UNMAPPED_BASE, so the store is to an illegal address, or, in debug mode,
    iris's device assertion). The CUDA context is lost afterwards; the process ends."""
    ctx = iris.iris("8MiB", backend=BACKEND, debug=debug)
    rank = ctx.get_rank()
    far = next(r for r in range(ctx.get_num_ranks()) if not ctx.topology.can_map(rank, r))
    buf = ctx.zeros(16)
    ctx.barrier()
    try:
        _store_kernel[(1,)](buf, ctx.get_heap_bases(), rank, far, 16, BLOCK=16)
        torch.cuda.synchronize()
    except Exception as error:  # torch's AcceleratorError / RuntimeError carrying CUDA's message
        return {"error": f"{type(error).__name__}: {error}"}
    raise AssertionError("a kernel's store to a rank on another host neither faulted nor asserted")
