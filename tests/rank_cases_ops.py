"""Code that runs inside each rank for tests/test_ops.py (CPU) and tests/gpu (CUDA): every ``ctx.ops`` op against
torch references built from every rank's inputs (same seeds on every rank), odd shapes, bias, fp32 and bf16,
inputs intact, workspace reuse and back-to-back calls. Backend: env ``IRIS_TEST_BACKEND`` ("cpu" by default).
"""

from __future__ import annotations

import os
import sys

import torch

import iris
from iris.ops.signals import PieceSignals

BACKEND = os.environ.get("IRIS_TEST_BACKEND", "cpu")
# Largest error allowed, relative to the largest value of the result: a GEMM's rounding scales with its output
# (cuBLAS may also reduce split-K partial sums in half precision, as torch allows by default).
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 5e-3}
CHUNKED = iris.ops.FusedConfig(variant="chunked", chunks=3)  # 3 chunks: the last one short on odd sizes
# Calls with the same tensors: on GPUs the second captures a CUDA graph of the call and the third replays it.
CALLS = 3 if BACKEND == "cuda" else 2


def _inputs(shape_of, world, dtype, device, seed):
    """Every rank's tensor of shape ``shape_of`` (the same on every rank: rank r's is seeded with seed + r)."""
    return [torch.randn(*shape_of, generator=torch.Generator().manual_seed(seed + r)).to(dtype).to(device)
            for r in range(world)]


def _close(got, want, dtype, what):
    error = (got.float() - want.float()).abs().max().item() if got.numel() else 0.0
    scale = want.float().abs().max().item() + 1.0
    assert error <= TOLERANCE[dtype] * scale, f"{what}: max error {error}, largest value {scale - 1:.3g}"


def every_op(m, k, n, dtypes):
    """Each op CALLS times (later calls reusing the first's workspace), with and without bias, per dtype."""
    ctx = iris.iris("64MiB", backend=BACKEND)
    rank, world, device = ctx.cur_rank, ctx.num_ranks, ctx.get_device()
    paths, workspaces = set(), {}

    def seen(workspace):
        paths.add(workspace.path)
        workspaces[id(workspace)] = workspace
    for dtype in (getattr(torch, name) for name in dtypes):
        As = _inputs((m, k), world, dtype, device, 10)
        Bs = _inputs((k, n), world, dtype, device, 20)
        bias = torch.randn(n, generator=torch.Generator().manual_seed(30)).to(dtype).to(device)
        A, B = As[rank], Bs[rank]
        A_copy, B_copy = A.clone(), B.clone()
        # float32 references of what each op computes. A sum over ranks adds each rank's product as it is
        # stored, rounded to the dtype (as a matmul followed by any all-reduce does): no bf16 op can match a sum
        # of unrounded products where large partial products cancel.
        products = [a.float() @ b.float() for a, b in zip(As, Bs, strict=True)]
        summed = sum(p.to(dtype).float() for p in products)
        for with_bias in (False, True):
            extra = bias.float() if with_bias else 0.0
            summed_extra = world * extra  # every rank's bias goes with its product into the sum (iris.ops's meaning)
            b_arg = bias if with_bias else None

            out = ctx.zeros(m, n, dtype=dtype)
            first = ctx.ops.matmul_all_reduce(out, A, B, bias=b_arg)
            second = ctx.ops.matmul_all_reduce(out, A, B, bias=b_arg)
            assert first is second, "a repeated call reuses its workspace"
            _close(out, summed + summed_extra, dtype, f"matmul_all_reduce {dtype} bias={with_bias}")
            seen(second)
            for on_heap in (True, False):  # on the heap, peers push into out itself; else into a heap buffer
                out = (ctx.zeros if on_heap else torch.zeros)(m, n, dtype=dtype, device=device)
                for _ in range(CALLS):
                    seen(ctx.ops.matmul_all_reduce(out, A, B, bias=b_arg, config=CHUNKED))
                _close(out, summed + summed_extra, dtype,
                       f"matmul_all_reduce chunked {dtype} bias={with_bias} out on heap={on_heap}")

            for variant, on_heap in (("sequential", False), ("chunked", False), ("chunked", True)):
                config = CHUNKED if variant == "chunked" else iris.ops.FusedConfig(variant=variant)
                out = (ctx.zeros if on_heap else torch.zeros)(m * world, n, dtype=dtype, device=device)
                for _ in range(CALLS):
                    seen(ctx.ops.matmul_all_gather(out, A, B, bias=b_arg, config=config))
                _close(out, torch.cat(products) + extra, dtype,
                       f"matmul_all_gather {variant} {dtype} bias={with_bias} out on heap={on_heap}")

            k_local = k  # each rank's shard: its A is (m, k), the gathered A (m, world * k)
            B_full = _inputs((world * k_local, n), 1, dtype, device, 40)[0]
            for config in (None, CHUNKED):
                out = ctx.zeros(m, n, dtype=dtype)
                for _ in range(CALLS):
                    # (the function form)
                    seen(iris.ops.all_gather_matmul(ctx, out, A, B_full, bias=b_arg, config=config))
                # (chunked: one rounding per rank's term, as a sum of per-shard products)
                _close(out, torch.cat([a.float() for a in As], dim=1) @ B_full.float() + extra, dtype,
                       f"all_gather_matmul {config} {dtype} bias={with_bias}")

            if n % world == 0:
                n_local = n // world
                columns = slice(rank * n_local, (rank + 1) * n_local)
                want = summed[:, columns] + (world * bias.float()[columns] if with_bias else 0.0)
                for config, on_heap in ((None, True), (CHUNKED, True), (CHUNKED, False)):
                    out = (ctx.zeros if on_heap else torch.zeros)(m, n_local, dtype=dtype, device=device)
                    for _ in range(CALLS):
                        seen(ctx.ops.matmul_reduce_scatter(out, A, B, bias=b_arg, config=config))
                    _close(out, want, dtype,
                           f"matmul_reduce_scatter {config} {dtype} bias={with_bias} out on heap={on_heap}")
        assert torch.equal(A, A_copy) and torch.equal(B, B_copy), "inputs intact"
    ctx.barrier()
    return {"rank": rank, "paths": sorted(paths), "replays": sum(w.graphs.replays for w in workspaces.values())}


def errors():
    """What a user is told for shapes and arguments the ops do not take."""
    ctx = iris.iris("16MiB", backend=BACKEND)
    rank, world = ctx.cur_rank, ctx.num_ranks
    A, B = torch.randn(4, 6), torch.randn(6, 2 * world)
    messages = {}
    cases = {
        "full_out_tile_too_large": lambda: ctx.ops.matmul_reduce_scatter(
            torch.zeros(4, 2 * world), A, B, config=iris.ops.FusedConfig(block_size_m=2048, block_size_n=1024)),
        "indivisible_n": lambda: ctx.ops.matmul_reduce_scatter(torch.zeros(4, 1), A, torch.randn(6, 2 * world + 1)),
        "inner_dims": lambda: ctx.ops.matmul_all_reduce(torch.zeros(4, 2), A, torch.randn(5, 2)),
        "wrong_out": lambda: ctx.ops.matmul_all_reduce(torch.zeros(3, 2 * world), A, B),
        "int_dtype": lambda: ctx.ops.matmul_all_reduce(torch.zeros(4, 2, dtype=torch.int32),
                                                       A.to(torch.int32), B[:, :2].to(torch.int32)),
        "mixed_dtypes": lambda: ctx.ops.matmul_all_reduce(torch.zeros(4, 2 * world), A, B.bfloat16()),
        "gathered_k": lambda: ctx.ops.all_gather_matmul(torch.zeros(4, 2), A, torch.randn(6, 2)),
        "bias_shape": lambda: ctx.ops.matmul_all_reduce(torch.zeros(4, 2 * world), A, B, bias=torch.zeros(3)),
        "fused_variant": lambda: iris.ops.FusedConfig(variant="fused"),
        "zero_pieces": lambda: iris.ops.FusedConfig(chunks=0),
        "zero_growth": lambda: iris.ops.FusedConfig(growth=0),
    }
    for name, call in cases.items():
        try:
            call()
        except (ValueError, NotImplementedError, TypeError) as error:
            messages[name] = f"{type(error).__name__}: {error}"
        else:
            messages[name] = None
    ctx.barrier()
    return {"rank": rank, "messages": messages}


def misplaced_tensors():
    """Each tensor argument of each op (``ctx.ops``'s, their preambles, all_gather_matmul_hbm_buffer's bias) in
    turn on another device, torch's ``meta``, the others right: what each call raises, by (function, argument)."""
    from iris.ops.all_gather_matmul_hbm_buffer import all_gather_matmul_hbm_buffer

    ctx = iris.iris("16MiB", backend=BACKEND)
    world, device = ctx.num_ranks, ctx.get_device()
    A, B, B_full, bias = (t.to(device) for t in (torch.randn(4, 6), torch.randn(6, 2 * world),
                                                 torch.randn(6 * world, 2 * world), torch.zeros(2 * world)))

    def zeros(*shape):
        return torch.zeros(*shape, device=device)

    calls = {  # function -> (the op its message names, its right arguments, those to misplace in turn)
        "ctx.ops.matmul_all_reduce": (ctx.ops.matmul_all_reduce, "matmul_all_reduce",
                                      {"out": zeros(4, 2 * world), "A": A, "B": B, "bias": bias}),
        "ctx.ops.all_gather_matmul": (ctx.ops.all_gather_matmul, "all_gather_matmul",
                                      {"out": zeros(4, 2 * world), "A_sharded": A, "B": B_full, "bias": bias}),
        "ctx.ops.matmul_all_gather": (ctx.ops.matmul_all_gather, "matmul_all_gather",
                                      {"out": zeros(4 * world, 2 * world), "A": A, "B": B, "bias": bias}),
        "ctx.ops.matmul_reduce_scatter": (ctx.ops.matmul_reduce_scatter, "matmul_reduce_scatter",
                                          {"out": zeros(4, 2), "A": A, "B": B, "bias": bias}),
        "matmul_all_reduce_preamble": (lambda **kw: iris.ops.matmul_all_reduce_preamble(ctx, **kw),
                                       "matmul_all_reduce", {"C": zeros(4, 2 * world), "A": A, "B": B}),
        "all_gather_matmul_preamble": (lambda **kw: iris.ops.all_gather_matmul_preamble(ctx, **kw),
                                       "all_gather_matmul", {"A_sharded": A, "B": B_full}),
        "matmul_reduce_scatter_preamble": (lambda **kw: iris.ops.matmul_reduce_scatter_preamble(ctx, **kw),
                                           "matmul_reduce_scatter", {"C": zeros(4, 2), "A": A, "B": B}),
        "matmul_all_gather_preamble": (lambda **kw: iris.ops.matmul_all_gather_preamble(ctx, **kw),
                                       "matmul_all_gather", {"A": A, "B": B}),
    }
    raised = {}
    for function, (call, op, arguments) in calls.items():
        for name in arguments:
            try:
                call(**{**arguments, name: arguments[name].to("meta")})
            except ValueError as error:
                raised[f"{function} {name}"] = (op, str(error))
            else:
                raised[f"{function} {name}"] = (op, None)
    try:
        all_gather_matmul_hbm_buffer(ctx, zeros(4, 2 * world), A, B_full, bias=torch.zeros(4, device="meta"))
    except ValueError as error:
        raised["all_gather_matmul_hbm_buffer bias"] = ("all_gather_matmul_hbm_buffer", str(error))
    ctx.barrier()
    return {"rank": ctx.cur_rank, "device": str(device), "raised": raised}


def shape_rule():
    """The path and pieces :func:`iris.ops.choose_path` gives per op and shape (auto is sequential on the CPU)."""
    ctx = iris.iris("16MiB", backend=BACKEND)
    auto, chunked = iris.ops.FusedConfig(), iris.ops.FusedConfig(variant="chunked")
    rule = {f"{op} {shape}": (iris.ops.choose_path(ctx, op, shape, auto), iris.ops.choose_path(ctx, op, shape, chunked))
            for op in ("matmul_all_reduce", "matmul_reduce_scatter", "matmul_all_gather", "all_gather_matmul")
            for shape in ((2048, 8192), (8192, 4096), (300, 64))}
    given = iris.ops.FusedConfig(chunks=3, growth=2.0)
    rule["given"] = iris.ops.choose_path(ctx, "matmul_all_reduce", (300, 64), given)
    ctx.barrier()
    return {"rank": ctx.cur_rank, "rule": rule}




def uneven_pieces():
    """Every op on the chunked path cut into pieces that shrink (3 x0.5) and grow (2 x16, 3 x3), at a size where
    they do (each rank's block at least 3 x 512 rows), against the sequential path; the sizes each took."""
    ctx = iris.iris("64MiB", backend=BACKEND)
    rank, world, device = ctx.cur_rank, ctx.num_ranks, ctx.get_device()
    rows, k, n = 1600 * world, 8, 4 * world  # matmul_all_reduce's row blocks: 1600 rows; the others cut all rows
    gen = torch.Generator().manual_seed(60 + rank)
    A, B = torch.randn(rows, k, generator=gen).to(device), torch.randn(k, n, generator=gen).to(device)
    B_full = torch.randn(world * k, n, generator=torch.Generator().manual_seed(61)).to(device)
    outs = {"matmul_all_reduce": (rows, n), "matmul_all_gather": (rows * world, n),
            "matmul_reduce_scatter": (rows, n // world), "all_gather_matmul": (rows, n)}
    errors, cuts = {}, {}
    for op, shape in outs.items():
        second = B_full if op == "all_gather_matmul" else B
        want = ctx.zeros(*shape)
        getattr(ctx.ops, op)(want, A, second, config=iris.ops.FusedConfig(variant="sequential"))
        for chunks, growth in ((3, 0.5), (2, 16.0), (3, 3.0)):
            out = ctx.zeros(*shape)
            for _ in range(CALLS):
                getattr(ctx.ops, op)(out, A, second,
                                     config=iris.ops.FusedConfig(variant="chunked", chunks=chunks, growth=growth))
            errors[f"{op} {chunks} x{growth:g}"] = (out - want).abs().max().item()
    cuts = {f"{length} {chunks} x{growth:g}": iris.ops.pieces.sizes(length, chunks, growth)
            for length in (1600, 1600 * world) for chunks, growth in ((3, 0.5), (2, 16.0), (3, 3.0))}
    ctx.barrier()
    return {"rank": rank, "errors": errors, "cuts": cuts}


def one_piece_a_block():
    """matmul_all_reduce and matmul_reduce_scatter on the chunked path with one piece a block (at more than 2
    ranks each rank's own product is then computed before its peers' pieces land, and added after), with and
    without bias, out on the heap or not, against the sequential path; the largest difference of each."""
    ctx = iris.iris("64MiB", backend=BACKEND)
    rank, world, device = ctx.cur_rank, ctx.num_ranks, ctx.get_device()
    m, k, n = 7 * world + 3, 9, 4 * world  # the row blocks of matmul_all_reduce uneven
    A = _inputs((m, k), world, torch.float32, device, 90)[rank]
    B = _inputs((k, n), world, torch.float32, device, 95)[rank]
    bias = torch.randn(n, generator=torch.Generator().manual_seed(99 + rank)).to(device)
    one_piece = iris.ops.FusedConfig(variant="chunked", chunks=1)
    sequential = iris.ops.FusedConfig(variant="sequential")
    errors = {}
    for op, shape in (("matmul_all_reduce", (m, n)), ("matmul_reduce_scatter", (m, n // world))):
        for with_bias, on_heap in ((False, True), (True, True), (True, False)):
            b_arg = bias if with_bias else None
            want = ctx.zeros(*shape)
            getattr(ctx.ops, op)(want, A, B, bias=b_arg, config=sequential)
            out = (ctx.zeros if on_heap else torch.zeros)(*shape, device=device)
            for _ in range(CALLS):
                workspace = getattr(ctx.ops, op)(out, A, B, bias=b_arg, config=one_piece)
            assert (workspace.path, workspace.pieces) == ("chunked", 1), (workspace.path, workspace.pieces)
            errors[f"{op} bias={with_bias} on heap={on_heap}"] = (out - want).abs().max().item()
    ctx.barrier()
    return {"rank": rank, "errors": errors}


def odd_layouts():
    """Inputs that are views (a column-major A or A_sharded, a column slice of a wider matrix for B), every op on
    the chunked path against the sequential path on contiguous copies; then two shapes of matmul_all_reduce
    and matmul_all_gather alternating, three rounds (on GPUs repeated calls replay CUDA graphs, and calls of the
    other shape in between must not break them)."""
    ctx = iris.iris("64MiB", backend=BACKEND)
    rank, world, device = ctx.cur_rank, ctx.num_ranks, ctx.get_device()
    chunked = iris.ops.FusedConfig(variant="chunked", chunks=2)
    gen = torch.Generator().manual_seed(50 + rank)
    A = torch.randn(6, 9, generator=gen).to(device).t()  # (9, 6), strides (1, 9)
    B = torch.randn(6, 4 * world, generator=gen).to(device)[:, :2 * world]  # rows 4 * world apart
    B_full = torch.randn(6 * world, 4, generator=torch.Generator().manual_seed(60)).to(device)
    errors = {}
    for name, a, b, out_shape in (("all_gather_matmul", A, B_full, (9, 4)),
                                  ("matmul_all_reduce", A, B, (9, 2 * world)),
                                  ("matmul_reduce_scatter", A, B, (9, 2)),
                                  ("matmul_all_gather", A, B, (9 * world, 2 * world))):
        op = getattr(ctx.ops, name)
        got, want = ctx.zeros(*out_shape), ctx.zeros(*out_shape)
        workspace = op(got, a, b, config=chunked)
        op(want, a.contiguous(), b.contiguous(), config=iris.ops.FusedConfig(variant="sequential"))
        errors[name] = (got.cpu() - want.cpu()).abs().max().item()
        if name == "all_gather_matmul":  # column-major shards on every rank: staged column-major, its block is A
            staged, mine = workspace.aux_buffer, slice(rank * 6, (rank + 1) * 6)
            errors["all_gather_matmul staged A"] = (staged[:, mine].cpu() - a.cpu()).abs().max().item()
            errors["all_gather_matmul staged column-major"] = float(workspace.gathered_layout != "columns"
                                                                    or staged.stride(0) != 1)
    for round_ in range(3):
        for m in (8, 12):
            As, Bs = _inputs((m, 5), world, torch.float32, device, 70 + m), _inputs((5, 6), world, torch.float32,
                                                                                 device, 80)
            out, gathered = ctx.zeros(m, 6), ctx.zeros(m * world, 6)
            ctx.ops.matmul_all_reduce(out, As[rank], Bs[rank])
            ctx.ops.matmul_all_gather(gathered, As[rank], Bs[rank])
            _close(out, sum(a @ b for a, b in zip(As, Bs, strict=True)), torch.float32, f"all_reduce m={m}")
            _close(gathered, torch.cat([a @ b for a, b in zip(As, Bs, strict=True)]), torch.float32,
                   f"all_gather m={m} round {round_}")
    ctx.barrier()
    return {"rank": rank, "errors": errors}


def gathered_layouts():
    """all_gather_matmul's chunked path (3 uneven pieces) with the shards column-major on every rank, then on one
    rank only: the layout the ranks agree on when the workspace is made, and the product and the staged A against
    torch's, also when a warm workspace is called with the other layout (converted into the agreed one)."""
    ctx = iris.iris("64MiB", backend=BACKEND)
    rank, world, device = ctx.cur_rank, ctx.num_ranks, ctx.get_device()
    m, k_local, n = 300, 5, 7
    g = torch.Generator().manual_seed(90)
    A, B = torch.randn(m, world * k_local, generator=g), torch.randn(world * k_local, n, generator=g)
    shard = A[:, rank * k_local:(rank + 1) * k_local]
    columns, rows = shard.t().contiguous().t().to(device), shard.contiguous().to(device)
    shards = {"columns everywhere": columns, "columns on rank 0": columns if rank == 0 else rows,
              "rows on the last rank": rows if rank == world - 1 else columns}
    chunked = iris.ops.FusedConfig(variant="chunked", chunks=3, growth=2.0)
    results = {}
    for made, later in (("columns everywhere", "rows on the last rank"), ("columns on rank 0", "columns everywhere")):
        for key, name in ((made, made), (f"{made}, then {later}", later)):  # a new workspace, then the warm one
            out = ctx.zeros(m, n)
            workspace = ctx.ops.all_gather_matmul(out, shards[name], B.to(device), config=chunked)
            staged = (workspace.aux_buffer.cpu() - A).abs().max().item()
            results[key] = (workspace.gathered_layout, max((out.cpu() - A @ B).abs().max().item(), staged))
        ctx.ops.release_workspaces()
    ctx.barrier()
    return results


def gathered_product_rounded_once():
    """all_gather_matmul in bf16 where the shards' terms cancel: rank 0's shard times its rows of B is about +1000,
    rank 1's about -1000 + x, so a path that rounds each term to bf16 (ulp 8 at 1000) loses x; one full-depth GEMM
    (fp32 sum, one rounding) keeps it. Every path, every piece (a thin first piece and even ones, and a thin first
    piece of column-major shards, gathered column-major), on 2 ranks. Returns each path's largest error against the
    exact product."""
    ctx = iris.iris("64MiB", backend=BACKEND)
    rank, world, device = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    m, k_local, n = 1100, 8, 24
    g = torch.Generator().manual_seed(7)
    small = torch.randint(-4, 5, (m, world * k_local), generator=g).double() / 64  # x: multiples of 1/64
    A = small.clone()
    A[:, 0], A[:, k_local] = 1000.0, -1000.0  # rank 0's shard holds +1000, rank 1's -1000, per row
    B = torch.randint(-2, 3, (world * k_local, n), generator=g).double()
    B[0], B[k_local] = 1.0, 1.0  # the two large columns meet the same row of B: +1000 - 1000 = 0 exactly
    exact = A @ B  # every value a multiple of 1/64 below 64: exact in bf16 (8 bits of mantissa)
    shard = A[:, rank * k_local:(rank + 1) * k_local].to(torch.bfloat16).to(device)
    B_here = B.to(torch.bfloat16).to(device)
    errors = {}
    for name, config in (("sequential", iris.ops.FusedConfig(variant="sequential")),
                         ("chunked, thin first piece", iris.ops.FusedConfig(variant="chunked", chunks=2, growth=16.0)),
                         ("chunked, even", iris.ops.FusedConfig(variant="chunked", chunks=3, growth=1.0))):
        out = ctx.zeros(m, n, dtype=torch.bfloat16)
        ctx.ops.all_gather_matmul(out, shard, B_here, config=config)
        ctx.barrier()
        errors[name] = (out.double().cpu() - exact).abs().max().item()
    ctx.ops.release_workspaces()  # a new workspace: its ranks agree on a column-major gathered A
    out = ctx.zeros(m, n, dtype=torch.bfloat16)
    workspace = ctx.ops.all_gather_matmul(out, shard.t().contiguous().t(), B_here, config=iris.ops.FusedConfig(
        variant="chunked", chunks=2, growth=16.0))
    ctx.barrier()
    assert workspace.gathered_layout == "columns", workspace.gathered_layout
    errors["chunked, thin first piece, column-major"] = (out.double().cpu() - exact).abs().max().item()
    ctx.barrier()
    return errors


def interrupted_call():
    """matmul_all_gather's chunked path stopped on rank 0 just before its first wait, as a KeyboardInterrupt in a
    notebook lands (raised by a trace function when the wait is called): the peer's pieces then sit in rank 0's
    flags unconsumed. Rank 0's next call with that workspace is refused, saying what to do; after
    ``release_workspaces`` on every rank, calls are right again."""
    ctx = iris.iris("64MiB", backend=BACKEND)
    rank, world, device = ctx.cur_rank, ctx.num_ranks, ctx.get_device()
    As = _inputs((64, 16), world, torch.float32, device, 70)
    B = _inputs((16, 32), 1, torch.float32, device, 80)[0]  # the same on every rank
    want = torch.cat(As) @ B
    config = iris.ops.FusedConfig(variant="chunked", chunks=2)
    out = ctx.zeros(64 * world, 32)
    interrupted, refused = False, None

    def interrupt_at_wait(frame, event, arg):
        if event == "call" and frame.f_code is PieceSignals.wait.__code__:
            sys.settrace(None)
            raise KeyboardInterrupt
    if rank == 0:
        sys.settrace(interrupt_at_wait)
        try:
            ctx.ops.matmul_all_gather(out, As[rank], B, config=config)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            sys.settrace(None)
        try:
            ctx.ops.matmul_all_gather(out, As[rank], B, config=config)
        except RuntimeError as err:
            refused = str(err)
    else:
        ctx.ops.matmul_all_gather(out, As[rank], B, config=config)
    ctx.barrier()
    ctx.ops.release_workspaces()
    out = ctx.zeros(64 * world, 32)
    for _ in range(CALLS):
        ctx.ops.matmul_all_gather(out, As[rank], B, config=config)
    error = (out - want).abs().max().item()
    ctx.barrier()
    return {"rank": rank, "interrupted": interrupted, "refused": refused, "error": error}


def peers_first_path(light: bool = False):
    """matmul_reduce_scatter on the one-kernel path (iris.ops.peers_first) against the reference, at odd shapes
    (partial tiles in M, N and K), in fp32 and bf16, with and without bias, ``out`` on the heap or not; then three
    calls in a row with new inputs and no host synchronisation between them (the inbox's two halves), each result
    kept aside in stream order and checked after; and variant="peers_first" asked of another op, refused. ``light``:
    the odd shape in fp32 only (8 ranks on two cores: the world size is what that run is for)."""
    ctx = iris.iris("64MiB", backend=BACKEND)
    rank, world, device = ctx.cur_rank, ctx.num_ranks, ctx.get_device()
    peers_first = iris.ops.FusedConfig(variant="peers_first")
    checked = 0
    shapes = ((19, 37, 21),) if light else ((19, 37, 21), (40, 16, 16))
    dtypes = (torch.float32,) if light else (torch.float32, torch.bfloat16)
    for (m, k, n_local), dtype in [(shape, dtype) for shape in shapes for dtype in dtypes]:
        n = n_local * world
        As, Bs = _inputs((m, k), world, dtype, device, 10), _inputs((k, n), world, dtype, device, 20)
        biases = _inputs((n,), world, dtype, device, 30)
        for with_bias, on_heap in ((False, True), (True, False)):
            want = sum(a.float() @ b.float() + (bias.float() if with_bias else 0)
                       for a, b, bias in zip(As, Bs, biases, strict=True))
            out = (ctx.zeros if on_heap else torch.zeros)(m, n_local, dtype=dtype, device=device)
            for _ in range(CALLS):
                workspace = ctx.ops.matmul_reduce_scatter(out, As[rank], Bs[rank], bias=biases[rank] if with_bias
                                                          else None, config=peers_first)
            assert workspace.path == "peers_first", workspace.path
            _close(out, want[:, rank * n_local:(rank + 1) * n_local], dtype,
                   f"peers_first {dtype} {(m, k, n_local)} bias={with_bias} on heap={on_heap}")
            checked += 1
    # calls in a row: each with its own A (refilled in stream order), results copied aside in stream order
    m, k, n_local = 24, 20, 12
    Bs = _inputs((k, n_local * world), world, torch.float32, device, 40)
    As = [_inputs((m, k), world, torch.float32, device, 100 * call) for call in range(3)]  # each call's, every rank's
    A, B = ctx.zeros(m, k), Bs[rank]
    out = ctx.zeros(m, n_local)
    kept = []
    for call in range(3):
        A.copy_(As[call][rank])
        ctx.ops.matmul_reduce_scatter(out, A, B, config=peers_first)
        kept.append(out.clone())
    for call, got in enumerate(kept):
        want = sum(a @ b for a, b in zip(As[call], Bs, strict=True))[:, rank * n_local:(rank + 1) * n_local]
        _close(got, want, torch.float32, f"peers_first call {call} of 3 in a row")
        checked += 1
    refused = None
    try:
        ctx.ops.matmul_all_reduce(ctx.zeros(m, n_local), A, B[:, :n_local], config=peers_first)
    except ValueError as error:
        refused = str(error)
    ctx.barrier()
    return {"rank": rank, "checked": checked, "refused": refused}


def peers_first_under_the_race_checker():
    """matmul_reduce_scatter's one-kernel path with the race checker on: three calls in a row (the second and the
    third reuse the inbox's halves), checked against the reference; the races each rank found (none expected: every
    tile is read by its owner only after the flag its writer raised with release)."""
    ctx = iris.iris("64MiB", backend=BACKEND, check="races")
    rank, world, device = ctx.cur_rank, ctx.num_ranks, ctx.get_device()
    m, k, n_local = 20, 24, 18
    As, Bs = _inputs((m, k), world, torch.float32, device, 70), _inputs((k, n_local * world), world, torch.float32,
                                                                          device, 80)
    out = ctx.zeros(m, n_local)
    for _ in range(3):
        ctx.ops.matmul_reduce_scatter(out, As[rank], Bs[rank], config=iris.ops.FusedConfig(variant="peers_first"))
    want = sum(a @ b for a, b in zip(As, Bs, strict=True))[:, rank * n_local:(rank + 1) * n_local]
    _close(out, want, torch.float32, "peers_first under the race checker")
    races = [str(race) for race in ctx.races()]
    ctx.barrier()
    return {"rank": rank, "races": races}
