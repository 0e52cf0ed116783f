"""Where a tile lives: Triton descriptions of one tile of a 2-D tensor and of the tensor it belongs to.

Upstream Iris's tile layer (its ``iris.mem.triton.types``), with its names and meanings:

* :class:`TileView` — a tile's coordinates ``(pid_m, pid_n)`` in the grid of ``block_m x block_n`` tiles;
* :class:`Tile` — the same, carrying the tile's values (``data``, e.g. a ``tl.dot`` result in registers);
* :class:`TensorView` (made in a kernel by :func:`make_tensor_view`) — a 2-D tensor: pointer, shape, strides;
* :class:`AllReduceConfig` — a variant code and a locks pointer, for kernels that pick an all-reduce variant;
* :func:`tile_layout`, :func:`tile_ptr`, :func:`offset_ptr` — the index arithmetic the classes use.

The tile-level collectives that consume these are :class:`iris.DeviceContext` methods
(:mod:`iris.language.tile_collectives`). All of this is plain Triton: it runs compiled on a GPU and on the CPU
interpreter alike.

Examples
--------
>>> @triton.jit
... def scale_tile(x, M, N, stride_m, stride_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
...     tile = iris.TileView(tl.program_id(0), tl.program_id(1), BLOCK_M, BLOCK_N)
...     view = iris.make_tensor_view(x, M, N, stride_m, stride_n)
...     ptrs, mask = view.tile_ptr(tile)
...     tl.store(ptrs, 2 * tl.load(ptrs, mask=mask), mask=mask)
"""

import triton
import triton.language as tl
from triton.language.core import _aggregate as aggregate

# AllReduceConfig.variant_code values, upstream's numbering.
ALL_REDUCE_VARIANT_CODES = {"atomic": 0, "ring": 1, "one_shot": 2, "two_shot": 3, "spinlock": 4}


@triton.jit
def tile_layout(pid_m, pid_n, M, N, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    """Row and column indices of tile ``(pid_m, pid_n)`` and the mask of its elements inside ``M x N``.

    Returns
    -------
    rm : (BLOCK_SIZE_M,) int block
    rn : (BLOCK_SIZE_N,) int block
    mask : (BLOCK_SIZE_M, BLOCK_SIZE_N) bool block

    Examples
    --------
    >>> rm, rn, mask = iris.language.tiles.tile_layout(pid_m, pid_n, M, N, 64, 64)   # doctest: +SKIP
    """
    # Each tile starts at a multiple of its block and its indices run contiguously: saying so lets the
    # compiler vectorise the accesses built on them.
    rm = tl.max_contiguous(tl.multiple_of(pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M), BLOCK_SIZE_M),
                           BLOCK_SIZE_M)
    rn = tl.max_contiguous(tl.multiple_of(pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N), BLOCK_SIZE_N),
                           BLOCK_SIZE_N)
    return rm, rn, (rm[:, None] < M) & (rn[None, :] < N)


@triton.jit
def tile_ptr(ptr, M, N, stride_m, stride_n, pid_m, pid_n, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    """Pointers to the elements of tile ``(pid_m, pid_n)`` of the ``M x N`` tensor at ``ptr``, and their mask.

    Examples
    --------
    >>> ptrs, mask = iris.language.tiles.tile_ptr(x, M, N, x_stride_m, 1, pid_m, pid_n, 64, 64)   # doctest: +SKIP
    >>> block = tl.load(ptrs, mask=mask)                                                 # doctest: +SKIP
    """
    rm, rn, mask = tile_layout(pid_m, pid_n, M, N, BLOCK_SIZE_M, BLOCK_SIZE_N)
    ptrs = ptr + rm[:, None] * stride_m + rn[None, :] * stride_n
    return tl.multiple_of(ptrs, (BLOCK_SIZE_M, BLOCK_SIZE_N)), mask


@triton.jit
def offset_ptr(ptr, stride_m, stride_n, offset_m, offset_n):
    """``ptr`` moved by ``offset_m`` rows and ``offset_n`` columns.

    Examples
    --------
    >>> second_half = iris.language.tiles.offset_ptr(x, stride_m, stride_n, M // 2, 0)   # doctest: +SKIP
    """
    return ptr + offset_m * stride_m + offset_n * stride_n


@aggregate
class TileView:
    """A tile's position: coordinates ``(pid_m, pid_n)`` in a grid of ``block_m x block_n`` tiles.

    ``pid_m`` and ``pid_n`` are run-time values (from ``tl.program_id`` arithmetic); the block sizes are
    constexprs. The collectives that only move data (``gather``, ``all_to_all``) take a ``TileView``.

    Examples
    --------
    >>> tile = iris.TileView(pid // tiles_n, pid % tiles_n, BLOCK_M, BLOCK_N)   # doctest: +SKIP
    >>> rm, rn, mask = tile.layout(M, N)                                       # doctest: +SKIP
    """

    pid_m: tl.tensor
    pid_n: tl.tensor
    block_m: tl.constexpr
    block_n: tl.constexpr

    # A constexpr_function: Triton hashes an aggregate's __init__ into cache keys and takes only jit callables.
    @triton.constexpr_function
    def __init__(self, pid_m, pid_n, block_m, block_n):
        self.pid_m = pid_m
        self.pid_n = pid_n
        self.block_m = tl.constexpr(block_m)
        self.block_n = tl.constexpr(block_n)

    @triton.jit
    def layout(self, M, N):
        """``(rm, rn, mask)`` of this tile in an ``M x N`` tensor (:func:`tile_layout`)."""
        return tile_layout(self.pid_m, self.pid_n, M, N, self.block_m, self.block_n)

    @triton.jit
    def indices(self):
        """This tile's row and column indices, unmasked."""
        return tile_indices(self)


@aggregate
class Tile:
    """A tile's position, as :class:`TileView`, and its values ``data`` (``block_m x block_n``).

    What the all-reduce variants, ``all_gather`` and ``reduce_scatter`` take: ``data`` is this rank's
    contribution, typically a ``tl.dot`` accumulator.

    Examples
    --------
    >>> tile = iris.Tile(pid_m, pid_n, BLOCK_M, BLOCK_N, tl.dot(a, b))   # doctest: +SKIP
    >>> ctx.all_reduce_atomic(tile, iris.make_tensor_view(c, M, N, stride_cm, stride_cn))   # doctest: +SKIP
    """

    pid_m: tl.tensor
    pid_n: tl.tensor
    block_m: tl.constexpr
    block_n: tl.constexpr
    data: tl.tensor

    @triton.constexpr_function
    def __init__(self, pid_m, pid_n, block_m, block_n, data):
        self.pid_m = pid_m
        self.pid_n = pid_n
        self.block_m = tl.constexpr(block_m)
        self.block_n = tl.constexpr(block_n)
        self.data = data

    @triton.jit
    def layout(self, M, N):
        """``(rm, rn, mask)`` of this tile in an ``M x N`` tensor (:func:`tile_layout`)."""
        return tile_layout(self.pid_m, self.pid_n, M, N, self.block_m, self.block_n)

    @triton.jit
    def indices(self):
        """This tile's row and column indices, unmasked."""
        return tile_indices(self)


@triton.jit
def tile_indices(tile):
    """Row and column indices of a :class:`Tile` or :class:`TileView`, without a bounds mask."""
    rm = tile.pid_m * tile.block_m + tl.arange(0, tile.block_m)
    rn = tile.pid_n * tile.block_n + tl.arange(0, tile.block_n)
    return rm, rn


@triton.jit
def make_tensor_view(ptr, M, N, stride_m, stride_n):
    """A :class:`TensorView` of the ``M x N`` tensor at ``ptr``; sizes and strides may be constexprs or values.

    Examples
    --------
    >>> view = iris.make_tensor_view(c, M, N, stride_cm, stride_cn)   # doctest: +SKIP
    """
    # The view's fields are run-time values; a constexpr (or an argument Triton specialised, as it does a
    # stride of 1) becomes one when added to a run-time zero of the smallest integer type. (Written out, not a
    # helper: each jit call costs the CPU interpreter milliseconds.)
    zero = tl.zeros((), tl.int32)
    return TensorView(ptr, zero + M, zero + N, zero + stride_m, zero + stride_n)


@aggregate
class TensorView:
    """A 2-D tensor in a kernel: its pointer (in this rank's heap, for the collectives), shape and strides.

    Make one with :func:`make_tensor_view`. ``tile_ptr(tile)`` gives a tile's pointers and bounds mask;
    ``offset_tile_ptr`` the same with the tile shifted; ``offset`` a view starting elsewhere.

    Examples
    --------
    >>> view = iris.make_tensor_view(x, M, N, stride_m, stride_n)   # doctest: +SKIP
    >>> ptrs, mask = view.tile_ptr(tile)                            # doctest: +SKIP
    """

    ptr: tl.tensor
    M: tl.tensor
    N: tl.tensor
    stride_m: tl.tensor
    stride_n: tl.tensor

    @triton.constexpr_function
    def __init__(self, ptr, M, N, stride_m, stride_n):
        self.ptr = ptr
        self.M = M
        self.N = N
        self.stride_m = stride_m
        self.stride_n = stride_n

    @triton.jit
    def tile_ptr(self, tile):
        """Pointers to ``tile``'s elements in this tensor and their bounds mask (:func:`tile_ptr`)."""
        return tile_ptr(self.ptr, self.M, self.N, self.stride_m, self.stride_n, tile.pid_m, tile.pid_n,
                        tile.block_m, tile.block_n)

    @triton.jit
    def tile_ptr_from_indices(self, rm, rn, block_m: tl.constexpr, block_n: tl.constexpr):
        """Pointers and bounds mask of the ``block_m x block_n`` block at rows ``rm`` and columns ``rn``
        (each contiguous, starting at a multiple of its block size)."""
        rm = tl.max_contiguous(tl.multiple_of(rm, block_m), block_m)
        rn = tl.max_contiguous(tl.multiple_of(rn, block_n), block_n)
        ptrs = self.ptr + rm[:, None] * self.stride_m + rn[None, :] * self.stride_n
        return tl.multiple_of(ptrs, (block_m, block_n)), (rm[:, None] < self.M) & (rn[None, :] < self.N)

    @triton.jit
    def offset_tile_ptr(self, tile, offset_m=0, offset_n=0, src_mask=None):
        """Pointers and mask of ``tile`` moved by ``offset_m`` rows and ``offset_n`` columns (and, given
        ``src_mask``, only where it is true too). The pointers carry :meth:`tile_ptr_from_indices`'s hints:
        offsets must be multiples of the block sizes."""
        rm, rn = tile_indices(tile)
        ptrs, mask = self.tile_ptr_from_indices(rm + offset_m, rn + offset_n, tile.block_m, tile.block_n)
        if src_mask is not None:
            mask = mask & src_mask
        return ptrs, mask

    @triton.jit
    def offset(self, offset_m=0, offset_n=0):
        """The same tensor seen from ``offset_m`` rows and ``offset_n`` columns further (same shape fields)."""
        return TensorView(offset_ptr(self.ptr, self.stride_m, self.stride_n, offset_m, offset_n), self.M, self.N,
                          self.stride_m, self.stride_n)

    @triton.jit
    def number_of_tiles(self, block_m, block_n):
        """How many ``block_m x block_n`` tiles cover this tensor."""
        return tl.cdiv(self.M, block_m) * tl.cdiv(self.N, block_n)


@aggregate
class AllReduceConfig:
    """Which all-reduce variant a kernel runs, and its locks: upstream's device-side all-reduce configuration.

    ``variant_code`` (constexpr) numbers the variants as upstream does (:data:`ALL_REDUCE_VARIANT_CODES`:
    0 atomic, 1 ring, 2 one_shot, 3 two_shot, 4 spinlock); ``locks_ptr`` is always a pointer, a dummy one
    for the variants that take no locks (atomic, ring).

    Examples
    --------
    >>> config = iris.AllReduceConfig(2, locks)     # one_shot           # doctest: +SKIP
    >>> if config.variant_code == 2:                                      # doctest: +SKIP
    ...     ctx.all_reduce_one_shot(tile, src_view, dst_view, config.locks_ptr)
    """

    variant_code: tl.constexpr
    locks_ptr: tl.tensor

    @triton.constexpr_function
    def __init__(self, variant_code, locks_ptr):
        self.variant_code = tl.constexpr(variant_code)
        self.locks_ptr = locks_ptr
