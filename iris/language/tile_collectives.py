"""Collectives on one tile, inside a kernel: the bodies of the tile-level :class:`iris.DeviceContext` methods.

Upstream Iris's tile layer: a kernel holds a tile (:class:`iris.Tile`, e.g. a ``tl.dot`` result) and all-reduces,
all-gathers, reduce-scatters, gathers or exchanges it all-to-all through its device context, over
:class:`iris.TensorView` descriptions of where tiles live (:mod:`iris.language.tiles`). Each function here takes the
:class:`iris.DeviceContext` first; users call the methods (``ctx.all_reduce_one_shot(tile, src, dst, locks)``).
Every access to another rank goes through the context's ``load``/``store``/``atomic_*``, so debug checks,
tracing and, on the CPU backend, the race checker see them like any other remote access.

Upstream's meaning is kept (which buffers and locks each takes, what ``dst`` holds after, whose data); where its
algorithm leans on AMD behaviour or on luck, these do what is correct on NVIDIA GPUs and say so:

* cross-GPU flags and atomics use ``scope="sys"`` (a ``"gpu"``-scope atomic is atomic, and a release visible,
  only within one GPU under PTX's memory model: upstream's ``reduce_scatter`` polls with ``"gpu"``);
* floating-point sums accumulate in fp32 for fp16 and bf16 (upstream: fp32 for fp16 only), and the one-shot and
  two-shot variants add the ranks' parts in rank order, so every rank holds the same bits;
* ``all_reduce_ring`` drops upstream's second phase, which read peers' ``dst`` while they wrote it (a race that
  could only put back the value already there, or a stale one);
* ``all_gather`` writes only this rank's rows (columns) of ``dst``: upstream's tiles that pass the end of a
  rank's part wrote into the next rank's part;
* ``gather`` fills masked-off lanes with 0 from a peer as from itself;
* remote pointers carry a vectorisation hint only where it is true (rows contiguous and 16-byte aligned, checked
  at run time), where upstream's ``(1, BLOCK_N)`` assumed it.

What each expects from its caller:

============================  =====================================================================================
``all_reduce_atomic``         ``dst`` zeroed on every rank before any rank starts; complete after every rank's kernel
``all_reduce_spinlock``       the same, and ``locks`` (int32, one per tile of ``dst``) zero; left zero
``all_reduce_one_shot``       this rank's tile written to ``src`` and ``locks[tile_id]`` set to 1 (release, sys scope)
                              before the call; ``dst`` complete on return; locks left at 1 (reset before reuse)
``all_reduce_two_shot``       as one_shot; ``dst`` complete after every rank's kernel
``all_reduce_push``           ``locks`` zero; ``dst`` complete after every rank's kernel (not upstream's: stores only)
``all_reduce_ring``           ``src`` complete on every rank before the launch (a barrier); ``dst`` on return
``reduce_scatter``            as one_shot; this rank's share of the tiles of ``dst`` complete on return
``all_gather``                ``dst`` complete after every rank's kernel
``gather``, ``all_to_all``    ``src`` complete on every rank before the launch; results on return
============================  =====================================================================================

Examples
--------
>>> @triton.jit
... def gemm_all_reduce(a, b, c, M, N, K, context, rank: tl.constexpr, world: tl.constexpr,
...                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
...     ctx = iris.DeviceContext.initialize(context, rank, world)
...     pid_m, pid_n = tl.program_id(0), tl.program_id(1)
...     acc = ...  # tl.dot over K
...     ctx.all_reduce_atomic(iris.Tile(pid_m, pid_n, BLOCK_M, BLOCK_N, acc), iris.make_tensor_view(c, M, N, N, 1))
"""

import triton
import triton.language as tl

from ..base.errors import RaisedAsIs
from .tiles import tile_indices

# The vectorisation hint of remote tile pointers: runs of _HINT_RUN contiguous elements, each starting at an address
# divisible by _HINT_RUN bytes; true where rows start _VECTOR_BYTES-aligned (16 bytes: one 128-bit access).
_VECTOR_BYTES = tl.constexpr(16)
_HINT_RUN = tl.constexpr(16)


class TileCollectiveError(RaisedAsIs, ValueError):
    """A tile-level collective called with arguments it cannot serve (raised when the kernel is compiled, or on
    the CPU interpreter when it runs), naming the collective and what to change.

    Examples
    --------
    >>> ctx.all_gather(tile, dst_view, 2)      # doctest: +SKIP
    Traceback (most recent call last):
    iris.language.tile_collectives.TileCollectiveError: all_gather (rank 0): dim must be 0 (gather rows) or 1 (gather
    ...
    """


class _Refusal:
    """Raises :class:`TileCollectiveError` where a constexpr condition fails (a class: kernel code may call
    classes, not functions such as a plain ``raise`` helper)."""

    def __init__(self, ok, message):
        if not ok:
            import torch.distributed as dist

            rank = f" (rank {dist.get_rank()})" if dist.is_available() and dist.is_initialized() else ""
            raise TileCollectiveError(message.replace(":", f"{rank}:", 1))


@triton.constexpr_function
def _refuse_unless(ok, message):
    _Refusal(ok, message)


@triton.constexpr_function
def _check_data(shape, block_m, block_n):
    """Refuse a tile whose data is not ``block_m x block_n`` (Triton's own error would be a broadcast failure)."""
    shape = [int(getattr(d, "value", d)) for d in shape]
    _Refusal(shape == [block_m, block_n], f"tile.data has shape {shape}, the tile is {block_m} x {block_n}: make "
             "the tile with the block sizes of its data (iris.Tile(pid_m, pid_n, BLOCK_M, BLOCK_N, data))")


@triton.constexpr_function
def accumulator_type(dtype):
    """The type sums of ``dtype`` accumulate in: fp32 for 16-bit floats (fp16, bf16), else ``dtype`` itself.

    Examples
    --------
    >>> accumulator_type(tl.bfloat16)
    fp32
    """
    return tl.float32 if dtype in (tl.float16, tl.bfloat16) else dtype


@triton.jit
def _tile_id(tile, view):
    """The tile's index in row-major order over the tiles of ``view`` (the index of its lock)."""
    return tile.pid_m * tl.cdiv(view.N, tile.block_n) + tile.pid_n


@triton.jit
def _rows_vectorisable(view, first_column):
    """Whether a tile's rows in ``view``, from column ``first_column``, are contiguous and start 16-byte aligned:
    then, with tiles a multiple of 16 columns wide, a remote pointer may carry the hint ``(1, 16)`` (translation
    loses what the compiler knew). Checked at run time: strides and pointers are run-time values."""
    element_bytes: tl.constexpr = view.ptr.dtype.element_ty.primitive_bitwidth // 8
    first = view.ptr.to(tl.int64) + first_column.to(tl.int64) * element_bytes
    return (view.stride_n == 1) & (first % _VECTOR_BYTES == 0) & ((view.stride_m * element_bytes) % _VECTOR_BYTES == 0)


@triton.jit
def _remote_load(ctx, ptrs, rank, mask, vectorisable):
    """``rank``'s copy of the tile at ``ptrs`` (0 where masked off), hinted where :func:`_rows_vectorisable`."""
    if ptrs.shape[1] % _HINT_RUN == 0:
        if vectorisable:
            value = ctx.load(ptrs, rank, mask=mask, other=0, hint=(1, _HINT_RUN))
        else:
            value = ctx.load(ptrs, rank, mask=mask, other=0)
    else:
        value = ctx.load(ptrs, rank, mask=mask, other=0)
    return value


@triton.jit
def _remote_store(ctx, ptrs, value, rank, mask, vectorisable):
    """Store the tile into ``rank``'s copy of ``ptrs``, hinted where :func:`_rows_vectorisable`."""
    if ptrs.shape[1] % _HINT_RUN == 0:
        if vectorisable:
            ctx.store(ptrs, value, rank, mask=mask, hint=(1, _HINT_RUN))
        else:
            ctx.store(ptrs, value, rank, mask=mask)
    else:
        ctx.store(ptrs, value, rank, mask=mask)


@triton.jit
def _wait_for_flag(ctx, flag, rank, value):
    """Spin until ``rank``'s copy of ``flag`` is ``value`` (acquire: what was written before it was set is visible)."""
    while ctx.atomic_add(flag, 0, rank, sem="acquire", scope="sys") != value:
        pass


@triton.jit
def _part(ctx, tile, src_ptrs, mask, flag, rank: tl.constexpr, vectorisable, acc_type: tl.constexpr):
    """``rank``'s part of the tile, as ``acc_type``: this rank's own data, or a peer's once it has published it."""
    if rank == ctx.rank:
        part = tile.data.to(acc_type)
    else:
        _wait_for_flag(ctx, flag, rank, 1)
        part = _remote_load(ctx, src_ptrs, rank, mask, vectorisable).to(acc_type)
    return part


@triton.jit
def _sum_of_published(ctx, tile, src_view, flag):
    """The sum over ranks, in rank order, of each rank's tile: this rank's from ``tile.data``, each peer's read
    from its ``src`` once its ``flag`` is 1."""
    src_ptrs, mask = src_view.tile_ptr(tile)
    vectorisable = _rows_vectorisable(src_view, tile.pid_n * tile.block_n)
    acc_type: tl.constexpr = accumulator_type(tile.data.dtype)
    acc = _part(ctx, tile, src_ptrs, mask, flag, 0, vectorisable, acc_type)
    for rank in tl.static_range(1, ctx.world_size):
        acc += _part(ctx, tile, src_ptrs, mask, flag, rank, vectorisable, acc_type)
    return acc


# -- all-reduce -----------------------------------------------------------------------------------------

@triton.jit
def all_reduce_atomic(ctx, tile, dst_view):
    """Add ``tile.data`` into every rank's ``dst`` with atomic adds (relaxed, ``scope="sys"``).

    ``dst`` must be zero on every rank before any rank starts (a barrier after zeroing); it holds the sum once
    every rank's kernel has finished. Floats add in whatever order the atomics land (not bit-reproducible).
    Starts at its own rank, so that the ranks do not all queue on rank 0's memory first.
    """
    _check_data(tile.data.shape, tile.block_m, tile.block_n)
    ptrs, mask = dst_view.tile_ptr(tile)
    value = tile.data.to(ptrs.dtype.element_ty)
    for step in tl.static_range(ctx.world_size):
        ctx.atomic_add(ptrs, value, (ctx.rank + step) % ctx.world_size, mask=mask, sem="relaxed", scope="sys")


@triton.jit
def all_reduce_spinlock(ctx, tile, dst_view, locks):
    """Add ``tile.data`` into every rank's ``dst``, each rank's tile under that rank's lock ``locks[tile_id]``.

    Per rank: take its lock (compare-and-swap 0 -> 1, acquire), read its ``dst`` tile, add, write back, release
    (exchange to 0, release). ``dst`` zero and ``locks`` zero on every rank before any rank starts; ``dst`` holds
    the sum once every rank's kernel has finished; the locks are left at zero.
    """
    _check_data(tile.data.shape, tile.block_m, tile.block_n)
    ptrs, mask = dst_view.tile_ptr(tile)
    lock = locks + _tile_id(tile, dst_view)
    acc_type: tl.constexpr = accumulator_type(tile.data.dtype)
    mine = tile.data.to(acc_type)
    for step in tl.static_range(ctx.world_size):
        rank = (ctx.rank + step) % ctx.world_size
        while ctx.atomic_cas(lock, 0, 1, rank, sem="acquire", scope="sys") != 0:
            pass
        total = ctx.load(ptrs, rank, mask=mask).to(acc_type) + mine
        ctx.store(ptrs, total.to(ptrs.dtype.element_ty), rank, mask=mask)
        tl.debug_barrier()  # every thread's store before the release
        ctx.atomic_xchg(lock, 0, rank, sem="release", scope="sys")


@triton.jit
def all_reduce_one_shot(ctx, tile, src_view, dst_view, locks):
    """Every rank reads every peer's published tile and writes the sum into its own ``dst``.

    Before the call each rank writes its tile (``tile.data``) into its ``src`` and sets its ``locks[tile_id]`` to 1
    with a release at ``scope="sys"`` (after a ``tl.debug_barrier()``); this waits for each peer's lock to read
    1 (acquire) and reads its ``src`` tile. ``dst`` is complete on return. The locks stay at 1. Before the next use,
    wait until no peer still polls them or reads ``src`` (a device barrier), then reset them, then meet again (a
    second barrier) before any rank publishes: a lock reset while a slow peer still waits for its 1 would keep that
    peer waiting forever.
    """
    _check_data(tile.data.shape, tile.block_m, tile.block_n)
    dst_ptrs, mask = dst_view.tile_ptr(tile)
    total = _sum_of_published(ctx, tile, src_view, locks + _tile_id(tile, dst_view))
    tl.store(dst_ptrs, total.to(dst_ptrs.dtype.element_ty), mask=mask)


@triton.jit
def all_reduce_two_shot(ctx, tile, src_view, dst_view, locks):
    """Tile ``tile_id`` is reduced by rank ``tile_id % world_size``, which writes the sum into every rank's ``dst``.

    Publishing as :func:`all_reduce_one_shot` (``src`` and ``locks`` on every rank, for every tile). The other
    ranks do nothing for this tile. ``dst`` is complete once every rank's kernel has finished.
    """
    _check_data(tile.data.shape, tile.block_m, tile.block_n)
    tile_id = _tile_id(tile, dst_view)
    if tile_id % ctx.world_size == ctx.rank:
        dst_ptrs, mask = dst_view.tile_ptr(tile)
        total = _sum_of_published(ctx, tile, src_view, locks + tile_id).to(dst_ptrs.dtype.element_ty)
        tl.store(dst_ptrs, total, mask=mask)
        vectorisable = _rows_vectorisable(dst_view, tile.pid_n * tile.block_n)
        for step in tl.static_range(1, ctx.world_size):
            _remote_store(ctx, dst_ptrs, total, (ctx.rank + step) % ctx.world_size, mask, vectorisable)


@triton.jit
def all_reduce_push(ctx, tile, inbox_view, dst_view, locks):
    """Tile ``tile_id``'s owner, rank ``tile_id % world_size`` as in :func:`all_reduce_two_shot`, sums it and
    writes the sum into every rank's ``dst``; the other ranks store their tile into the owner's inbox.

    Not in upstream Iris. Every remote access is a store, posted (nothing waits for a reply), where two_shot's owner
    loads each peer's published tile and waits a link round trip for each. ``inbox_view`` describes an ``M x N``
    block of ``dst``'s shape at the start of a heap buffer of ``world_size`` such blocks stacked by rows: block
    ``s`` receives rank ``s``'s tiles. A rank raises ``locks[tile_id]`` on the owner by one (release, after its
    tile); the owner waits for ``world_size - 1`` (acquire), adds the parts in rank order (the same bits on every
    rank, and as two_shot's sum) and stores the sum into every rank's ``dst``. ``locks`` (int32, one per tile of
    ``dst``) zero on every rank before any rank starts; ``dst`` complete after every rank's kernel; the owners' locks
    are left at ``world_size - 1`` (zero them between two barriers before the next use, as two_shot's).
    """
    _check_data(tile.data.shape, tile.block_m, tile.block_n)
    tile_id = _tile_id(tile, dst_view)
    owner = tile_id % ctx.world_size
    lock = locks + tile_id
    dst_ptrs, mask = dst_view.tile_ptr(tile)
    if owner != ctx.rank:
        box_ptrs, _ = inbox_view.offset(ctx.rank * inbox_view.M, 0).tile_ptr(tile)
        value = tile.data.to(box_ptrs.dtype.element_ty)
        _remote_store(ctx, box_ptrs, value, owner, mask, _rows_vectorisable(inbox_view, tile.pid_n * tile.block_n))
        tl.debug_barrier()  # every thread's part of the tile before the release
        ctx.atomic_add(lock, 1, owner, sem="release", scope="sys")
    else:
        _wait_for_flag(ctx, lock, ctx.rank, ctx.world_size - 1)  # every peer's tile has landed
        acc_type: tl.constexpr = accumulator_type(tile.data.dtype)
        acc = tl.zeros((tile.block_m, tile.block_n), acc_type)
        for rank in tl.static_range(ctx.world_size):
            if rank == ctx.rank:
                acc += tile.data.to(acc_type)
            else:
                box_ptrs, _ = inbox_view.offset(rank * inbox_view.M, 0).tile_ptr(tile)
                acc += tl.load(box_ptrs, mask=mask, other=0).to(acc_type)
        total = acc.to(dst_ptrs.dtype.element_ty)
        tl.store(dst_ptrs, total, mask=mask)
        vectorisable = _rows_vectorisable(dst_view, tile.pid_n * tile.block_n)
        for step in tl.static_range(1, ctx.world_size):
            _remote_store(ctx, dst_ptrs, total, (ctx.rank + step) % ctx.world_size, mask, vectorisable)


@triton.jit
def all_reduce_ring(ctx, tile, src_view, dst_view):
    """Every rank sums its own and each peer's ``src`` tile, reading the peers in ring order (the previous rank
    first), and writes the sum into its own ``dst``.

    Reads ``src`` (``tile.data`` is not used, as upstream), which must be complete on every rank before the launch.
    Upstream's second (all-gather) phase read the peers' ``dst`` while they wrote it; every rank already holds the
    whole sum after the first, so it is left out. With more than two ranks, ranks add in different orders, so
    float sums may differ in the last bit between ranks (one_shot's do not).
    """
    src_ptrs, mask = src_view.tile_ptr(tile)
    dst_ptrs, _ = dst_view.tile_ptr(tile)
    vectorisable = _rows_vectorisable(src_view, tile.pid_n * tile.block_n)
    mine = tl.load(src_ptrs, mask=mask, other=0)
    acc_type: tl.constexpr = accumulator_type(mine.dtype)
    acc = mine.to(acc_type)
    for step in tl.static_range(1, ctx.world_size):
        peer = (ctx.rank - step + ctx.world_size) % ctx.world_size
        acc += _remote_load(ctx, src_ptrs, peer, mask, vectorisable).to(acc_type)
    tl.store(dst_ptrs, acc.to(dst_ptrs.dtype.element_ty), mask=mask)


# -- the others -----------------------------------------------------------------------------------------

@triton.jit
def reduce_scatter(ctx, tile, src_view, dst_view, locks):
    """The tiles of ``dst`` are split into ``world_size`` contiguous runs (by tile index, row-major; the last rank
    also takes the remainder); the owner of a tile sums every rank's published tile into its own ``dst``.

    Publishing as :func:`all_reduce_one_shot`. On return this rank's run of tiles of ``dst`` holds the sum; its
    other tiles are not written.
    """
    _check_data(tile.data.shape, tile.block_m, tile.block_n)
    tile_id = _tile_id(tile, dst_view)
    tiles = tl.cdiv(dst_view.M, tile.block_m) * tl.cdiv(dst_view.N, tile.block_n)
    per_rank = tiles // ctx.world_size
    first = ctx.rank * per_rank
    last = tiles if ctx.rank == ctx.world_size - 1 else first + per_rank
    if (tile_id >= first) & (tile_id < last):
        dst_ptrs, mask = dst_view.tile_ptr(tile)
        total = _sum_of_published(ctx, tile, src_view, locks + tile_id)
        tl.store(dst_ptrs, total.to(dst_ptrs.dtype.element_ty), mask=mask)


@triton.constexpr_function
def _dim_text(dim):
    return f"all_gather: dim must be 0 (gather rows) or 1 (gather columns), got {dim}"


_NOT_DIVISIBLE = tl.constexpr(
    "iris debug: all_gather: dst_view's size along the gathered dim must be world_size times each rank's part "
    "(make the view of the whole gathered tensor, e.g. M * world_size rows for dim=0)")


@triton.jit
def all_gather(ctx, tile, dst_view, dim: tl.constexpr):
    """Write ``tile.data`` into every rank's ``dst`` at this rank's part: rows ``rank * M / world_size`` on for
    ``dim=0``, columns ``rank * N / world_size`` on for ``dim=1`` (``dst_view`` describes the whole gathered tensor).

    Only this rank's part is written, also by tiles that pass its end. ``dst`` is complete once every rank's
    kernel has finished. In debug mode (``IRIS_DEBUG=1``) a gathered size that ``world_size`` does not divide
    stops the kernel.
    """
    _refuse_unless((dim == 0) | (dim == 1), _dim_text(dim))
    _check_data(tile.data.shape, tile.block_m, tile.block_n)
    rm, rn = tile_indices(tile)
    # The part's offset is a run-time value, not a multiple of the block: the pointers are built without the
    # divisibility hints of TensorView.tile_ptr_from_indices, which would be false here.
    if dim == 0:
        tl.device_assert(dst_view.M % ctx.world_size == 0, _NOT_DIVISIBLE)
        part = dst_view.M // ctx.world_size
        rows, columns, in_part = rm + ctx.rank * part, rn, (rm < part)[:, None]
        first_column = tile.pid_n * tile.block_n
    else:
        tl.device_assert(dst_view.N % ctx.world_size == 0, _NOT_DIVISIBLE)
        part = dst_view.N // ctx.world_size
        rows, columns, in_part = rm, rn + ctx.rank * part, (rn < part)[None, :]
        first_column = ctx.rank * part + tile.pid_n * tile.block_n
    ptrs = dst_view.ptr + rows[:, None] * dst_view.stride_m + columns[None, :] * dst_view.stride_n
    mask = in_part & (rows[:, None] < dst_view.M) & (columns[None, :] < dst_view.N)
    value = tile.data.to(ptrs.dtype.element_ty)
    tl.store(ptrs, value, mask=mask)
    vectorisable = _rows_vectorisable(dst_view, first_column)
    for step in tl.static_range(1, ctx.world_size):
        _remote_store(ctx, ptrs, value, (ctx.rank + step) % ctx.world_size, mask, vectorisable)


@triton.constexpr_function
def _source_rank_ok(source_rank, world_size):
    return not isinstance(source_rank, int) or 0 <= source_rank < world_size


@triton.constexpr_function
def _source_rank_text(source_rank, world_size):
    return f"gather: source_rank {source_rank} is not a rank of this world (0 to {world_size - 1})"


@triton.jit
def gather(ctx, tile, src_view, source_rank: tl.constexpr, hint: tl.constexpr = None):
    """Return ``source_rank``'s tile of ``src`` (0 where the tile passes the tensor's end).

    ``src`` must be complete on ``source_rank`` before the launch. ``hint`` is passed to the remote load
    (:func:`iris.language.core.translate`): promise only what holds for every row of the tile.
    """
    _refuse_unless(_source_rank_ok(source_rank, ctx.world_size), _source_rank_text(source_rank, ctx.world_size))
    ptrs, mask = src_view.tile_ptr(tile)
    if source_rank == ctx.rank:
        data = tl.load(ptrs, mask=mask, other=0)
    else:
        data = ctx.load(ptrs, source_rank, mask=mask, other=0, hint=hint)
    return data


@triton.constexpr_function
def _chunk_ok(n_per_rank):
    return n_per_rank > 0


@triton.jit
def all_to_all(ctx, tile, src_view, dst_view, N_per_rank: tl.constexpr):
    """Fill this tile of ``dst`` (columns split into ``world_size`` chunks of ``N_per_rank``): chunk ``s`` of this
    rank's ``dst`` is chunk ``rank`` of rank ``s``'s ``src``, as ``torch.distributed.all_to_all`` of column chunks.

    ``src`` must be complete on every rank before the launch; ``dst`` on return. The tile indexes ``dst``.
    """
    _refuse_unless(_chunk_ok(N_per_rank), "all_to_all: N_per_rank must be a positive number of columns")
    rm, rn = tile_indices(tile)
    rows = (rm < src_view.M) & (rm < dst_view.M)
    dst_ptrs = dst_view.ptr + rm[:, None] * dst_view.stride_m + rn[None, :] * dst_view.stride_n
    start = tile.pid_n * tile.block_n
    first = start // N_per_rank
    last = tl.minimum((start + tile.block_n - 1) // N_per_rank, ctx.world_size - 1)
    for source in range(first, last + 1):
        columns = rn - source * N_per_rank + ctx.rank * N_per_rank  # where this chunk sits in source's src
        in_chunk = (rn >= source * N_per_rank) & (rn < (source + 1) * N_per_rank) & (rn < dst_view.N)
        mask = rows[:, None] & (in_chunk & (columns < src_view.N))[None, :]
        src_ptrs = src_view.ptr + rm[:, None] * src_view.stride_m + columns[None, :] * src_view.stride_n
        if source == ctx.rank:
            data = tl.load(src_ptrs, mask=mask)
        else:
            data = ctx.load(src_ptrs, source, mask=mask)
        tl.store(dst_ptrs, data, mask=mask)
