"""Code that runs inside each rank for tests/test_upstream_surface.py: upstream Iris's names around ``ctx.ops`` and
the heap, used as upstream's benchmark programs use them (``benchmark/ops/*.py``, ``benchmark/examples/bench_moe.py``
at abd3f2ad), against torch references. Backend: env ``IRIS_TEST_BACKEND`` ("cpu" by default).
"""

from __future__ import annotations

import os
import warnings

import torch

import iris
from iris.ops import FusedConfig, matmul_all_reduce_preamble
from iris.ops.all_gather_matmul_hbm_buffer import (
    _auto_config,
    all_gather_matmul_hbm_buffer,
    all_gather_matmul_hbm_buffer_preamble,
)
from iris.ops.owned_tiles import owned_range

BACKEND = os.environ.get("IRIS_TEST_BACKEND", "cpu")


def _inputs(shape, world, seed, device):
    """Every rank's tensor (rank r's seeded with seed + r), the same list on every rank."""
    return [torch.randn(*shape, generator=torch.Generator().manual_seed(seed + r)).to(device) for r in range(world)]


def _error(call) -> str | None:
    try:
        call()
    except (ValueError, NotImplementedError, TypeError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def matmul_all_reduce_variants(m, k, n):
    """Upstream's bench_matmul_all_reduce(_stages) loop per all_reduce_variant: the preamble, then calls with
    ``prepared`` cleared and the workspace's locks and aux_buffer zeroed between them; the result, and the
    collective each call ran."""
    ctx = iris.iris("32MiB", backend=BACKEND)
    rank, world, device = ctx.cur_rank, ctx.num_ranks, ctx.get_device()
    As, B = _inputs((m, k), world, 10, device), _inputs((k, n), 1, 20, device)[0]
    want = sum(a @ B for a in As)
    report = {}
    for variant in ("atomic", "two_shot", "one_shot", "ring", None):
        A, C = ctx.zeros(m, k), ctx.full((m, n), 7.0)
        A.copy_(As[rank])
        config = FusedConfig(block_size_m=32, block_size_n=64, block_size_k=64, group_size_m=4, num_xcds=8,
                             all_reduce_variant=variant)
        workspace = matmul_all_reduce_preamble(ctx, C, A, B, config=config)
        zeroed, prepared = bool((C == 0).all()), workspace.prepared
        for _ in range(3):
            if workspace.locks is not None:
                workspace.locks.zero_()
            if workspace.aux_buffer is not None:
                workspace.aux_buffer.zero_()
            workspace.prepared = False
            returned = ctx.ops.matmul_all_reduce(C, A, B, config=config, workspace=workspace)
        report[str(variant)] = {
            "zeroed": zeroed, "prepared": prepared, "same_workspace": returned is workspace, "path": workspace.path,
            "collective": workspace.collective.key[1], "locks": workspace.locks, "aux_buffer": workspace.aux_buffer,
            "error": (C - want).abs().max().item()}
    ctx.barrier()
    return {"rank": rank, "report": report}


def hbm_buffer(m, k_local, n):
    """Upstream's bench_all_gather_matmul loop: the HBM-buffer preamble, then calls with the knobs its configs
    give, C and the locks zeroed before each; the staging buffer, the flags, a per-row bias, and the errors."""
    ctx = iris.iris("32MiB", backend=BACKEND)
    rank, world, device = ctx.cur_rank, ctx.num_ranks, ctx.get_device()
    shards = _inputs((m, k_local), world, 30, device)
    B = _inputs((world * k_local, n), 1, 40, device)[0]
    A_sharded, C = ctx.zeros(m, k_local), ctx.zeros(m, n)
    A_sharded.copy_(shards[rank])
    want = torch.cat(shards, dim=1) @ B
    config = FusedConfig(block_size_m=256, block_size_n=256, block_size_k=64, group_size_m=4, num_xcds=8)
    workspace = all_gather_matmul_hbm_buffer_preamble(ctx, A_sharded, B, config, k_per_flag=8)
    made = {"locks": [workspace.locks.dtype == torch.int32, ctx.is_symmetric(workspace.locks)],
            "aux_buffer": [list(workspace.aux_buffer.shape), ctx.is_symmetric(workspace.aux_buffer)]}
    for _ in range(3):
        C.zero_(), workspace.locks.zero_()
        returned = all_gather_matmul_hbm_buffer(ctx, C, A_sharded, B, config=config, workspace=workspace,
                                                num_fetch_sms=16, k_per_flag=8, fetch_block_m=None, fetch_block_k=None,
                                                num_warps=8, num_stages=2, num_fetch_stages=1,
                                                first_stage_fetch_sms=52)
    errors = {"product": (C - want).abs().max().item(),
              "staged": max((workspace.aux_buffer[:, peer * k_local:(peer + 1) * k_local] - shards[peer]).abs().max()
                            .item() for peer in range(world) if peer != rank)}
    bias = torch.randn(m, generator=torch.Generator().manual_seed(50)).to(device)
    all_gather_matmul_hbm_buffer(ctx, C, A_sharded, B, bias=bias)  # no config, no workspace: upstream's defaults
    errors["bias"] = (C - (want + bias[:, None])).abs().max().item()
    messages = {
        "trace": _error(lambda: all_gather_matmul_hbm_buffer(ctx, C, A_sharded, B, trace=True)),
        "column_bias": _error(lambda: all_gather_matmul_hbm_buffer(ctx, C, A_sharded, B, bias=torch.zeros(n + 1))),
        "layout": _error(lambda: all_gather_matmul_hbm_buffer(ctx, C, A_sharded, B, staged_a_layout="tiled")),
        "fetch_sms": _error(lambda: all_gather_matmul_hbm_buffer(ctx, C, A_sharded, B, num_fetch_sms=0)),
        "sequential": _error(lambda: all_gather_matmul_hbm_buffer(ctx, C, A_sharded, B,
                                                                  config=FusedConfig(variant="sequential"))),
        "k": _error(lambda: all_gather_matmul_hbm_buffer_preamble(ctx, A_sharded, B[1:])),
        "chunked_all_reduce": _error(lambda: ctx.ops.matmul_all_reduce(
            ctx.zeros(m, n), ctx.zeros(m, k_local), B[:k_local],
            config=FusedConfig(variant="chunked", all_reduce_variant="atomic"))),
    }
    ctx.barrier()
    return {"rank": rank, "made": made, "path": workspace.path, "same_workspace": returned is workspace,
            "errors": errors, "messages": messages}


def heap_offset():
    """bench_moe's reset of upstream's bump allocator: read ``ctx.heap.allocator.heap_offset``, allocate, drop, set
    it back; the offsets read, whether the memory came back, and what setting it past tensors in use says."""
    ctx = iris.iris("1MiB", backend=BACKEND)
    allocator = ctx.heap.allocator
    kept = ctx.zeros(10, name="kept")
    kept_reserves = ctx.heap.usage().used  # the first allocation: it starts at offset 0
    mark = allocator.heap_offset
    scratch = ctx.zeros(1000, name="scratch")
    scratch_address, grown = scratch.data_ptr(), allocator.heap_offset
    del scratch
    dropped = allocator.heap_offset
    with warnings.catch_warnings(record=True) as quiet:
        warnings.simplefilter("always")
        allocator.heap_offset = mark
    again = ctx.zeros(1000)
    with warnings.catch_warnings(record=True) as loud:
        warnings.simplefilter("always")
        allocator.heap_offset = 0
    messages = {"negative": _error(lambda: setattr(allocator, "heap_offset", -1)),
                "past_the_heap": _error(lambda: setattr(allocator, "heap_offset", ctx.heap.size + 1)),
                "not_an_int": _error(lambda: setattr(allocator, "heap_offset", 1.5))}
    ctx.barrier()
    return {"rank": ctx.cur_rank, "is_heap": allocator is ctx.heap, "mark": mark, "grown": grown, "dropped": dropped,
            "reused": again.data_ptr() == scratch_address, "kept_ends": kept_reserves, "kept": kept.numel(),
            "quiet": [str(w.message) for w in quiet],
            "loud": [(w.category.__name__, str(w.message)) for w in loud], "messages": messages}


def upstream_op_modules(m, k, n):
    """Upstream's per-op module paths as its tests/ops import them: the preambles of matmul_reduce_scatter and
    matmul_all_gather, then the op with the prepared workspace, against torch; upstream's full (M, N) C of
    which each rank fills its tiles; iris.host.distributed.helpers.distributed_allgather_multidim of a per-rank
    table."""
    from iris.host.distributed.helpers import distributed_allgather_multidim
    from iris.ops.matmul_all_gather import matmul_all_gather, matmul_all_gather_preamble
    from iris.ops.matmul_reduce_scatter import matmul_reduce_scatter, matmul_reduce_scatter_preamble

    ctx = iris.iris("32MiB", backend=BACKEND)
    rank, world, device = ctx.cur_rank, ctx.num_ranks, ctx.get_device()
    As, B = _inputs((m, k), world, 30, device), _inputs((k, n), 1, 40, device)[0]
    A = ctx.zeros(m, k)
    A.copy_(As[rank])
    block = n // world
    scattered = ctx.full((m, block), 7.0)
    workspace = matmul_reduce_scatter_preamble(ctx, scattered, A, B)
    zeroed, prepared = bool((scattered == 0).all()), workspace.prepared
    returned = matmul_reduce_scatter(ctx, scattered, A, B, workspace=workspace)
    summed = sum(a @ B for a in As)[:, rank * block:(rank + 1) * block]
    gathered = ctx.zeros(m * world, n)
    gather_workspace = matmul_all_gather_preamble(ctx, A, B)
    gather_returned = matmul_all_gather(ctx, gathered, A, B, workspace=gather_workspace)
    config, k_per_flag, fetch_sms, fetch_stages, first_fetch_sms = _auto_config(m, n, k * world, world)
    A_sharded, staged = ctx.zeros(m, k), ctx.zeros(m, n)
    A_sharded.copy_(As[rank])
    all_gather_matmul_hbm_buffer(ctx, staged, A_sharded, B.repeat(world, 1), config=config, k_per_flag=k_per_flag,
                                 num_fetch_sms=fetch_sms, num_fetch_stages=fetch_stages,
                                 first_stage_fetch_sms=first_fetch_sms)
    # Upstream's full (M, N) C: this rank's run of 3 x 3 tiles (row-major) gets the sum, with rank 0's bias; the
    # rest is left as it was.
    full, tiles = ctx.zeros(m, n), FusedConfig(block_size_m=3, block_size_n=3)
    full_workspace = matmul_reduce_scatter_preamble(ctx, full, A, B, config=tiles)
    full.fill_(7.0)
    bias = torch.arange(n, dtype=torch.float32, device=device) if rank == 0 else None
    matmul_reduce_scatter(ctx, full, A, B, bias=bias, config=tiles, workspace=full_workspace)
    tiles_n = -(-n // 3)
    first, stop = owned_range(-(-m // 3) * tiles_n, rank, world)
    owned = torch.zeros(m, n, dtype=torch.bool)
    for tile in range(first, stop):
        owned[tile // tiles_n * 3:tile // tiles_n * 3 + 3, tile % tiles_n * 3:tile % tiles_n * 3 + 3] = True
    full_expected = sum(a @ B for a in As).cpu() + torch.arange(n)
    table = torch.arange(6, dtype=torch.int32).reshape(2, 3) + 10 * rank
    tables = distributed_allgather_multidim(table.numpy())
    uneven = _error(lambda: distributed_allgather_multidim(torch.arange(4 - rank).numpy()))  # every rank refuses
    ctx.barrier()
    return {
        "rank": rank, "zeroed": zeroed, "prepared": prepared, "same_workspace": returned is workspace,
        "scatter_error": (scattered - summed).abs().max().item(),
        "full_tiles": (first, stop), "full_path": full_workspace.path,
        "full_error": (full.cpu() - full_expected)[owned].abs().max().item(),
        "full_rest_untouched": bool((full.cpu()[~owned] == 7.0).all()),
        "gather_prepared": gather_workspace.prepared, "gather_same_workspace": gather_returned is gather_workspace,
        "gather_error": (gathered - torch.cat([a @ B for a in As])).abs().max().item(),
        "auto_config_error": (staged - torch.cat(As, dim=1) @ B.repeat(world, 1)).abs().max().item(),
        "tables": tables.tolist(), "tables_dtype": str(tables.dtype), "uneven": uneven}


def ring_workspace_of_other_sizes():
    """upstream's tests/ccl test_all_reduce_ring_flags_too_small, in our terms: a ring workspace prepared for
    other tile sizes (block_size_m/n, which size nothing here) is reused; one prepared for fewer programs (a
    smaller flags array) is replaced by one that fits, never used too small; each call's sum against torch."""
    from iris.ccl import Config

    ctx = iris.iris("8MiB", backend=BACKEND)
    rank, world = ctx.cur_rank, ctx.num_ranks
    inputs = _inputs((64, 64), world, 50, ctx.get_device())
    inp, out = ctx.zeros(64, 64), ctx.zeros(64, 64)
    inp.copy_(inputs[rank])
    want = sum(inputs)
    large = Config(all_reduce_variant="ring", block_size_m=128, block_size_n=128, comm_sms=2)
    prepared = ctx.ccl.all_reduce_preamble(out, inp, config=large)
    small_tiles = ctx.ccl.all_reduce(out, inp, config=Config(all_reduce_variant="ring", block_size_m=64,
                                                              block_size_n=64, comm_sms=2), workspace=prepared)
    tiles_error = (out - want).abs().max().item()
    out.zero_()
    few = ctx.ccl.all_reduce_preamble(out, inp, config=Config(all_reduce_variant="ring", comm_sms=1))
    more = ctx.ccl.all_reduce(out, inp, config=large, workspace=few)
    ctx.barrier()
    return {"tiles_reused": small_tiles is prepared, "tiles_error": tiles_error,
            "few_programs": few.programs, "replaced": more is not few, "more_programs": more.programs,
            "flags": list(more.flags.shape), "programs_error": (out - want).abs().max().item()}


def zeros_ready_for_peers(rounds, elements):
    """upstream's message-passing pattern: a flag array from ctx.zeros is written by a peer as soon as that peer's
    own call returns. Each round dirties a block, frees it, and gets it back from ctx.zeros; rank 0 then reads
    rank 1's copy and writes its last element at once; rank 1 checks, after a barrier, that the write is there."""
    ctx = iris.iris(max(64 << 20, 4 * 4 * elements), backend=BACKEND)
    rank, report = ctx.cur_rank, []
    for _ in range(rounds):
        dirty = ctx.full((elements,), 7.0)
        block = dirty.data_ptr()
        del dirty  # released at the next allocation, which takes the same block
        flags = ctx.zeros(elements)
        peer_was_zero = None
        if rank == 0:
            peers = ctx.as_remote(flags, 1)
            peer_was_zero = bool((peers == 0).all())
            peers[-1] = 1.0
        ctx.barrier()
        report.append({"reused": flags.data_ptr() == block, "peer_was_zero": peer_was_zero,
                       "write_kept": bool(flags[-1] == 1.0) if rank == 1 else None,
                       "rest_zero": bool((flags[:-1] == 0).all())})
        del flags
    ctx.barrier()
    return {"rank": rank, "rounds": report}
