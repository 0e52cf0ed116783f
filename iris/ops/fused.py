"""The four fused ops and their preambles: check the operands, choose the path, run it, keep the workspace.

What each op computes, what ``bias`` means and which paths exist is said once, in :mod:`iris.ops`; this module
is its code. Every public name here is re-exported there (``iris.ops.matmul_all_reduce``...).

Examples
--------
>>> ws = matmul_all_reduce(ctx, out, A, B)                               # doctest: +SKIP
>>> ws.path in ("sequential", "chunked")                                 # doctest: +SKIP
True
"""

from __future__ import annotations

import functools

import torch

from . import chunked, owned_tiles, peers_first, pieces, sequential
from .config import DTYPES, FusedConfig, Workspace
from .graphs import call_key

__all__ = ["all_gather_matmul", "all_gather_matmul_preamble", "choose_path", "matmul_all_gather",
           "matmul_all_gather_preamble", "matmul_all_reduce", "matmul_all_reduce_preamble", "matmul_reduce_scatter",
           "matmul_reduce_scatter_preamble"]

CHUNKED = {"matmul_all_gather": chunked.matmul_all_gather, "all_gather_matmul": chunked.all_gather_matmul,
           "matmul_all_reduce": chunked.matmul_all_reduce, "matmul_reduce_scatter": chunked.matmul_reduce_scatter}


def matmul_all_reduce(ctx, out, A, B, bias=None, async_op=False, config=None, workspace=None) -> Workspace:
    """``out = sum over ranks of (A @ B + bias)``: A (M, K), B (K, N), bias (N,), out (M, N), on every rank.

    Each rank's bias is added to its own product before the sum (upstream's ``all_reduce(A @ B + bias)``): the
    biases of all ranks are summed, on every path.

    With ``async_op=True`` the final exchange may still run when the call returns: ``workspace.wait()``
    before reading ``out``.

    Examples
    --------
    >>> iris.ops.matmul_all_reduce(ctx, out, A, B)                        # doctest: +SKIP
    """
    m, k, n = _matmul_dims(ctx, "matmul_all_reduce", A, B)
    _check_out(ctx, "matmul_all_reduce", out, (m, n), A.dtype)
    _check_bias(ctx, "matmul_all_reduce", bias, n, A.dtype)
    return _run(ctx, "matmul_all_reduce", sequential.matmul_all_reduce, out, A, B, bias, async_op, config,
                workspace)


def all_gather_matmul(ctx, out, A_sharded, B, bias=None, async_op=False, config=None, workspace=None) -> Workspace:
    """``out = A @ B (+ bias)`` where A (M, K) is every rank's ``A_sharded`` (M, K / world) side by side, in rank
    order; each rank computes its own product and adds its own ``bias`` (N,).

    Examples
    --------
    >>> iris.ops.all_gather_matmul(ctx, out, A_sharded, B)               # doctest: +SKIP
    """
    m, n = _gathered_dims(ctx, "all_gather_matmul", A_sharded, B)
    _check_out(ctx, "all_gather_matmul", out, (m, n), A_sharded.dtype)
    _check_bias(ctx, "all_gather_matmul", bias, n, A_sharded.dtype)
    return _run(ctx, "all_gather_matmul", sequential.all_gather_matmul, out, A_sharded, B, bias, async_op, config,
                workspace)


def matmul_all_gather(ctx, out, A, B, bias=None, async_op=False, config=None, workspace=None) -> Workspace:
    """``out`` (M * world, N) = every rank's ``A @ B (+ bias)`` (M, N), stacked along M in rank order: the rows from
    rank s carry rank s's ``bias`` (N,).

    Examples
    --------
    >>> iris.ops.matmul_all_gather(ctx, out, A, B)                       # doctest: +SKIP
    """
    m, k, n = _matmul_dims(ctx, "matmul_all_gather", A, B)
    _check_out(ctx, "matmul_all_gather", out, (m * ctx.num_ranks, n), A.dtype)
    _check_bias(ctx, "matmul_all_gather", bias, n, A.dtype)
    return _run(ctx, "matmul_all_gather", sequential.matmul_all_gather, out, A, B, bias, async_op, config,
                workspace)


def matmul_reduce_scatter(ctx, out, A, B, bias=None, async_op=False, config=None, workspace=None) -> Workspace:
    """``out`` (M, N / world) = this rank's column block of the sum over ranks of ``A @ B + bias``: each rank's
    ``bias`` (N,) is added to its own product before the sum, as in :func:`matmul_all_reduce`.

    Upstream's form: a full (M, N) ``out``, of which this rank's tiles (``config``'s ``block_size_m x
    block_size_n``, a contiguous run of them per rank in row-major order) get the sum and the rest is left as it
    was (:mod:`iris.ops.owned_tiles`; its own path, ``workspace.path == "tiles"``).

    Examples
    --------
    >>> out = ctx.zeros(M, N // ctx.num_ranks, dtype=torch.bfloat16)      # doctest: +SKIP
    >>> iris.ops.matmul_reduce_scatter(ctx, out, A, B)                    # doctest: +SKIP
    """
    n, full = _scattered_dims(ctx, out, A, B)[2:]
    _check_bias(ctx, "matmul_reduce_scatter", bias, n, A.dtype)
    return _run(ctx, "matmul_reduce_scatter", owned_tiles.matmul_reduce_scatter if full
                else sequential.matmul_reduce_scatter, out, A, B, bias, async_op, config, workspace,
                path="tiles" if full else None)


# -- upstream's preambles: a workspace made before the calls ------------------------------------------------
def matmul_all_reduce_preamble(ctx, C, A, B, config=None, workspace=None) -> Workspace:
    """Upstream's preamble of :func:`matmul_all_reduce`: the workspace for these shapes (``workspace`` when it was
    made for them, else a new one), marked ``prepared``, with ``C`` zeroed and every rank past a barrier, as
    upstream's. Collective. Its buffers are allocated by the first call (every rank makes it), as any call's.

    Examples
    --------
    >>> config = FusedConfig(all_reduce_variant="one_shot")                  # doctest: +SKIP
    >>> ws = iris.ops.matmul_all_reduce_preamble(ctx, C, A, B, config=config)  # doctest: +SKIP
    >>> ctx.ops.matmul_all_reduce(C, A, B, config=config, workspace=ws)    # doctest: +SKIP
    """
    m, _, n = _matmul_dims(ctx, "matmul_all_reduce", A, B)
    _check_out(ctx, "matmul_all_reduce", C, (m, n), A.dtype, "C")
    return _prepared(ctx, "matmul_all_reduce", _key("matmul_all_reduce", C.shape, A, B), config, workspace,
                     zero=C)


def all_gather_matmul_preamble(ctx, A_sharded, B, config=None, workspace=None) -> Workspace:
    """Upstream's preamble of :func:`all_gather_matmul`: the workspace for these shapes (no bias), marked
    ``prepared``. Collective.

    Examples
    --------
    >>> ws = iris.ops.all_gather_matmul_preamble(ctx, A_sharded, B)          # doctest: +SKIP
    """
    m, n = _gathered_dims(ctx, "all_gather_matmul", A_sharded, B)
    return _prepared(ctx, "all_gather_matmul", _key("all_gather_matmul", (m, n), A_sharded, B), config,
                     workspace)


def matmul_reduce_scatter_preamble(ctx, C, A, B, config=None, workspace=None) -> Workspace:
    """Upstream's preamble of :func:`matmul_reduce_scatter`: the workspace for these shapes, marked ``prepared``,
    with ``C`` zeroed and every rank past a barrier. ``C`` is ours, this rank's (M, N / world) column block
    (a full (M, N) ``C`` is refused as by the op). Collective.

    Upstream's preamble also refuses a workspace whose per-tile locks are fewer than ``config``'s tiles ("Lock
    array too small"); here no lock is per tile (the tile sizes have no effect), so no block size makes a
    workspace too small: one made for other shapes is replaced, as by every preamble.

    Examples
    --------
    >>> ws = iris.ops.matmul_reduce_scatter_preamble(ctx, C, A, B)           # doctest: +SKIP
    >>> iris.ops.matmul_reduce_scatter(ctx, C, A, B, workspace=ws)         # doctest: +SKIP
    """
    _scattered_dims(ctx, C, A, B, "C")
    return _prepared(ctx, "matmul_reduce_scatter", _key("matmul_reduce_scatter", C.shape, A, B), config, workspace,
                     zero=C)


def matmul_all_gather_preamble(ctx, A, B, config=None, workspace=None) -> Workspace:
    """Upstream's preamble of :func:`matmul_all_gather`: the workspace for these shapes (``out`` of
    (M * world, N)), marked ``prepared``, every rank past a barrier. Collective.

    Examples
    --------
    >>> ws = iris.ops.matmul_all_gather_preamble(ctx, A, B)                  # doctest: +SKIP
    >>> iris.ops.matmul_all_gather(ctx, out, A, B, workspace=ws)           # doctest: +SKIP
    """
    m, _, n = _matmul_dims(ctx, "matmul_all_gather", A, B)
    return _prepared(ctx, "matmul_all_gather", _key("matmul_all_gather", (m * ctx.num_ranks, n), A, B), config,
                     workspace)


def _prepared(ctx, op, key, config, workspace, zero=None) -> Workspace:
    if config is not None and not isinstance(config, FusedConfig):
        raise TypeError(f"rank {ctx.cur_rank}: {op} config must be an iris.ops.FusedConfig, got {type(config)}")
    if workspace is None or workspace.key != key:
        workspace = Workspace(key)
    if zero is not None:
        zero.zero_()
    ctx.barrier()
    workspace.prepared = True
    return workspace


# -- checks and dispatch --------------------------------------------------------------------------------------
def choose_path(ctx, op: str, out_shape, config: FusedConfig, B=None) -> tuple[str, int, float]:
    """``(path, pieces, growth)`` of a call: ``config.variant``, ``config.chunks`` and ``config.growth`` where
    they say, else by the shape, the op and the world size (:mod:`iris.ops.pieces`).

    The chunked path cuts the rows that each rank computes for one destination (its row block for
    matmul_all_reduce, the whole product for matmul_reduce_scatter's column blocks and all_gather_matmul,
    its own rows for matmul_all_gather) into pieces of at least 512 rows and 4M elements on average, at most 2
    to 4 by op (:func:`iris.ops.pieces.count`), each ``growth`` times the size of the one before
    (:func:`iris.ops.pieces.sizes`; even by default). On a GPU, given the call's ``B`` (its rows are the
    GEMM's depth), a row's GEMM time over its transfer to every peer (lower with more ranks:
    :func:`iris.ops.pieces.transfer_hiding`) bounds how fast matmul_all_gather's and matmul_all_reduce's pieces
    shrink (:func:`iris.ops.pieces.growth`), and where it is large they cut 2 pieces instead, the last of 512
    rows, whose GEMM outlasts the transfer of all the rows before it
    (:func:`iris.ops.pieces.last_piece_hides_the_rest`); matmul_all_reduce at more than 2 ranks cuts 2 even pieces
    (:func:`iris.ops.pieces.cut_at_more_ranks`). ``"auto"`` takes the chunked path on GPUs where it has
    something to overlap (:func:`iris.ops.pieces.overlaps`: at least 2 pieces, or, for the reductions at more
    than 2 ranks, the peers' blocks); else, for matmul_reduce_scatter on GPUs, given ``B``, the one-kernel path
    where its GEMM is small (:func:`iris.ops.peers_first.pays`); else the sequential path; matmul_all_reduce with
    a named ``config.all_reduce_variant`` takes the sequential path, whose all-reduce is :mod:`iris.ccl`'s of that
    name.

    Examples
    --------
    >>> choose_path(ctx, "matmul_all_reduce", (8192, 8192), FusedConfig())     # on 2 GPUs   # doctest: +SKIP
    ('chunked', 3, 0.6)
    """
    world = ctx.num_ranks
    rows, columns = pieces.cut_rows(op, out_shape[0], world), out_shape[1]
    hiding = None
    if ctx.backend == "cuda" and B is not None:
        hiding = pieces.transfer_hiding(torch.cuda.get_device_name(ctx.get_device()), B.dtype, B.shape[0], world,
                                        tf32=torch.backends.cuda.matmul.allow_tf32)
    count = config.chunks or pieces.count(op, rows, columns)
    growth = config.growth if config.growth is not None else pieces.growth(op, rows, count, hiding)
    if config.chunks is None and config.growth is None:
        count, growth = pieces.last_piece_hides_the_rest(op, rows, columns, hiding) or (count, growth)
        count, growth = pieces.cut_at_more_ranks(op, rows, columns, world) or (count, growth)
    if op == "matmul_all_reduce" and config.all_reduce_variant is not None:
        if config.variant == "chunked":
            raise ValueError(f"rank {ctx.cur_rank}: matmul_all_reduce: FusedConfig(variant='chunked', "
                             f"all_reduce_variant={config.all_reduce_variant!r}): the chunked path reduces with its "
                             "own piece-by-piece copies; all_reduce_variant picks iris.ccl's algorithm on the "
                             "sequential path: drop one of the two")
        return "sequential", count, growth  # the path whose all-reduce is iris.ccl's, where that variant exists
    if config.variant == "peers_first" and op != "matmul_reduce_scatter":
        raise ValueError(f"rank {ctx.cur_rank}: {op}: FusedConfig(variant='peers_first') is matmul_reduce_scatter's "
                         "one-kernel path; use 'auto', 'sequential' or 'chunked' for this op")
    if config.variant != "auto":
        return config.variant, count, growth
    gpu = ctx.backend == "cuda" and world > 1
    if gpu and pieces.overlaps(op, rows, columns, count, world, hiding):
        return "chunked", count, growth
    if gpu and op == "matmul_reduce_scatter" and B is not None and peers_first.pays(ctx, *out_shape, B.shape[0]):
        return "peers_first", 1, 1.0
    return "sequential", count, growth


def _run(ctx, op, implementation, out, A, B, bias, async_op, config, workspace, path=None) -> Workspace:
    """Run ``op`` on the path :func:`choose_path` picks (``path``: this one, the only one for the call's form),
    captured and replayed as a CUDA graph where it can be (:mod:`iris.ops.graphs`)."""
    config = config or FusedConfig()
    if not isinstance(config, FusedConfig):
        raise TypeError(f"rank {ctx.cur_rank}: {op} config must be an iris.ops.FusedConfig, got {type(config)}")
    across = ctx.ccl.across  # several domains (hosts): the fused kernels would address heaps not mapped here
    if across is not None:
        collective = op.replace("matmul", "").strip("_")
        raise NotImplementedError(
            f"rank {ctx.cur_rank}: {op} runs over every rank and its kernels address every rank's heap, but the "
            f"ranks span {len(across.domains)} domains {across.domains} "
            f"({ctx.topology.explain(across.domains[0][0], across.domains[1][0])}). Across hosts, compute the "
            f"matmul with torch and combine with ctx.ccl.{collective}, which crosses domains over torch.distributed")
    key = _key(op, out.shape, A, B)
    workspace = workspace if workspace is not None else ctx.ops.workspace_for(key)
    if workspace.key != key:
        raise ValueError(f"rank {ctx.cur_rank}: {op}: this workspace was made for {workspace.key}, not {key}: "
                         "pass the workspace of a call with the same shapes, or none")
    workspace.path, workspace.pieces, workspace.growth = (path, 1, 1.0) if path else choose_path(
        ctx, op, tuple(out.shape), config, B)
    if path:
        call = functools.partial(implementation, ctx, out, A, B, bias, async_op, workspace, config)
    elif workspace.path == "chunked":
        call = functools.partial(CHUNKED[op], ctx, out, A, B, bias, async_op, workspace, workspace.pieces,
                                 workspace.growth)
    elif workspace.path == "peers_first":
        call = functools.partial(peers_first.matmul_reduce_scatter, ctx, out, A, B, bias, async_op, workspace)
    elif op == "matmul_all_reduce":
        call = functools.partial(implementation, ctx, out, A, B, bias, async_op, workspace, config.all_reduce_variant)
    else:
        call = functools.partial(implementation, ctx, out, A, B, bias, async_op, workspace)
    replay_key = call_key((out, A, B, bias), workspace.path, workspace.pieces, workspace.growth, async_op,
                          config.all_reduce_variant, (config.block_size_m, config.block_size_n) if path else None)
    if workspace.signals is not None:
        workspace.signals.check_usable()  # a replayed graph would read flags that an interrupted call left set
    workspace.graphs.run(replay_key, call, cuda=ctx.backend == "cuda",
                         state=lambda: (id(workspace.signals), id(workspace.collective)))
    return workspace


def _key(op: str, out_shape, A, B) -> tuple:
    """What a workspace is made for: the op, the shapes and the dtype. Only what every rank has alike: a call
    that allocates in a new workspace is collective, and ranks may differ in what else they pass (a bias on rank
    0 alone adds it once); a key holding that made one rank allocate while another waited at the barrier."""
    return op, tuple(out_shape), tuple(A.shape), tuple(B.shape), A.dtype


def _check_device(ctx, op, name: str, tensor: torch.Tensor) -> None:
    """Every tensor argument of an op on this rank's device: said here, naming it, rather than by torch from
    inside the GEMM ("Expected all tensors to be on the same device"), which names none."""
    if tensor.device != ctx.get_device():
        raise ValueError(f"rank {ctx.cur_rank}: {op}: {name} is on {tensor.device}, but this rank's tensors must be "
                         f"on its device, {ctx.get_device()}: move it there ({name}.to(ctx.device))")


def _check_operands(ctx, op, A, B, a_name="A") -> None:
    for name, tensor in ((a_name, A), ("B", B)):
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 2:
            raise ValueError(f"rank {ctx.cur_rank}: {op}: {name} must be a 2-D torch.Tensor, got "
                             f"{getattr(tensor, 'shape', type(tensor).__name__)}")
        if tensor.dtype not in DTYPES:
            raise ValueError(f"rank {ctx.cur_rank}: {op}: {name} is {tensor.dtype}; the ops take float16, bfloat16 "
                             "or float32")
        _check_device(ctx, op, name, tensor)
    if A.dtype != B.dtype:
        raise ValueError(f"rank {ctx.cur_rank}: {op}: A is {A.dtype} but B is {B.dtype}: use one dtype")


def _gathered_dims(ctx, op, A_sharded, B) -> tuple[int, int]:
    """(M, N) of all_gather_matmul's product, once its operands are checked."""
    world = ctx.num_ranks
    _check_operands(ctx, op, A_sharded, B, a_name="A_sharded")
    m, k_local = A_sharded.shape
    if B.shape[0] != k_local * world:
        raise ValueError(f"rank {ctx.cur_rank}: {op}: B has {B.shape[0]} rows but the gathered A has "
                         f"{world} x {k_local} = {world * k_local} columns: B must be (K, N) with K = world x the "
                         "shard's columns")
    return m, B.shape[1]


def _scattered_dims(ctx, out, A, B, out_name="out") -> tuple[int, int, int, bool]:
    """(M, K, N, full) of matmul_reduce_scatter, once its operands and ``out`` (``out_name``: as the caller calls
    it) are checked: ``out`` (M, N / world), this rank's column block, or (``full``) upstream's (M, N), of which
    this rank fills its tiles."""
    world = ctx.num_ranks
    m, k, n = _matmul_dims(ctx, "matmul_reduce_scatter", A, B)
    full = isinstance(out, torch.Tensor) and tuple(out.shape) == (m, n) and world > 1
    if not full and n % world:
        raise ValueError(f"rank {ctx.cur_rank}: matmul_reduce_scatter splits N = {n} columns over {world} ranks: "
                         f"N must be a multiple of the world size for an out of (M, N / world); a full (M, {n}) "
                         "out takes this rank's tiles of the sum instead")
    _check_out(ctx, "matmul_reduce_scatter", out, (m, n) if full else (m, n // world), A.dtype, out_name)
    return m, k, n, full


def _matmul_dims(ctx, op, A, B) -> tuple[int, int, int]:
    _check_operands(ctx, op, A, B)
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"rank {ctx.cur_rank}: {op}: A {list(A.shape)} @ B {list(B.shape)}: A's columns must be "
                         "B's rows")
    return A.shape[0], A.shape[1], B.shape[1]


def _check_out(ctx, op, out, shape, dtype, name="out") -> None:
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(shape) or out.dtype != dtype:
        got = f"{list(out.shape)} {out.dtype}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"rank {ctx.cur_rank}: {op}: {name} must be {list(shape)} {dtype}, got {got}")
    _check_device(ctx, op, name, out)


def _check_bias(ctx, op, bias, n, dtype) -> None:
    if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (n,) or bias.dtype != dtype):
        got = f"{list(bias.shape)} {bias.dtype}" if isinstance(bias, torch.Tensor) else type(bias).__name__
        raise ValueError(f"rank {ctx.cur_rank}: {op}: bias must be [{n}] {dtype} (one value per column of the "
                         f"product), got {got}")
    if bias is not None:
        _check_device(ctx, op, "bias", bias)
