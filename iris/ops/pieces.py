"""How the chunked path cuts the rows it computes into pieces: how many, and how big.

Each piece is a cuBLAS GEMM whose transfer overlaps the next piece's GEMM, so two costs frame a call: what
cutting costs the GEMM (small pieces run below cuBLAS's speed on one large call), and the one transfer that
nothing hides. Pieces of unequal sizes (``growth``, each piece's rows over the previous piece's) can shrink
the second without adding to the first:

* a **pushing** pipeline (matmul_all_gather; matmul_all_reduce's reduced pieces) ends with its last piece's
  transfer, which pieces that shrink (``growth`` < 1) make short, while each piece's transfer still fits under
  the next, smaller, piece's GEMM when the GEMM is the larger part;
* a **consuming** pipeline (all_gather_matmul) starts with its first piece, which waits for its rows from every
  peer (its GEMM runs at full depth, so each element is rounded once): pieces that grow (``growth`` > 1) make
  that first piece thin, so little waits, and the rest land while it computes.

A sweep on 2xH200 (benchmarks/RESULTS.md, "pieces of the chunked path" at the M = 8192 shapes, 2026-11-26) set
the rule: the pushing pipelines take 3 pieces that shrink (``growth`` 0.6), the fastest at 3 of their 6 rows and
within 1.2% of the fastest at the others. For the consuming one, whose first piece waits for its rows, 2 pieces,
the first a sixth of the rows (``growth`` 5) where that is at least :data:`FIRST_ROWS` rows, else even. At
M = 8192 that first piece is 1,280 rows, a size cuBLAS runs well: on one H100 (2026-11-26, A column-major, a
one-off script timing the GEMMs alone) the two GEMMs of a 1,280-row cut took 95-101% of one call's time at the
three M = 8192 shapes, where a 1,536-row cut (a fifth) took 94-102% and cuts of 1,792-2,048 rows up to 123%
(cuBLAS took kernels that leave SMs idle); in three runs of the op (benchmarks/RESULTS.md), growth 5 was 48 and
110 µs faster than 4 on average at (8192, 28672, 8192) and (8192, 8192, 28672), and 35 µs slower at 8192^3. At
M = 2048 a thin first piece (512 rows) was up to 4% slower than even ones (2xH200). :func:`growth` applies that.
``FusedConfig(growth=...)`` cuts any call so, and ``tests/gpu/sweep_pieces.sh`` times the cuts against each
other.

A deep GEMM changes the pushing pipelines' best cut. A row's GEMM then takes many times longer than the row's
transfer, so one last piece of :data:`PIECE_ROWS` rows hides the transfer of every row before it. Two pieces
are then enough: fewer GEMM boundaries, and the shortest tail (:func:`last_piece_hides_the_rest`). The ratio of
the two times comes from the spec sheet of the GPU found (:func:`transfer_hiding`). On 2xH200 (2026-11-26, at
(8192, 8192, 28672)), two pieces of 3584 and 512 rows beat the 3 x0.6 cut:
- matmul_all_gather: 2775-2781 µs against 2836-3072, over two runs;
- matmul_all_reduce: 2814 against 3039.
At K = 8192, where the ratio is under 7, 3 x0.6 stays the cut.

More ranks change the balance: each row goes to ``world - 1`` peers over the same link, and the reductions'
GEMMs are ``K / world`` deep, so at 4 ranks a row's transfer takes about as long as its GEMM, or longer (by
:func:`transfer_hiding`, matmul_all_reduce's row at K = 8192 computes in 0.38 of its push). Two rules follow,
neither of which changes a 2-rank cut of the shapes benchmarks/fused_ops.py measures (its ratios there are 2.25
and above):

* a pushing pipeline's pieces shrink no faster than its transfers can follow (:func:`growth`): each piece's GEMM
  should outlast the previous piece's transfer, so ``growth`` is at least ``1 / ratio``, and the pieces are even
  where the transfers take longer than the GEMMs. (A model of the pipeline, two streams of pieces timed from
  the 2-rank table's rates, has 3 x0.6 queue each transfer behind the last there: 3-5% slower than even pieces
  at matmul_all_reduce's 4-rank rows of K = 8192. A model, not a measurement.)
* the reductions' peer blocks pipeline by themselves at more than 2 ranks (:func:`overlaps`): each peer's block
  is pushed while the next one computes, so one piece a block already overlaps. At M = 2048 on 4 ranks,
  matmul_reduce_scatter's column blocks of 2048 x 2048 made one piece each, which left it on the sequential path,
  behind torch's fused op (198 against 191 µs, 425 against 385; 4x H200, 2026-11-28).

Timed at 4 ranks (``benchmarks/fused_ops.py --chunks``, 4x H200, 2026-11-28), matmul_all_reduce was fastest in 2
even pieces at all three M = 8192 shapes, the 3 pieces of these rules 3-11% slower: :func:`cut_at_more_ranks` cuts
it so at more than 2 ranks. ``NPROC=4 tests/gpu/sweep_pieces.sh`` and ``benchmarks/fused_ops.py --chunks`` are how a
cut is checked there.

Every rank cuts the same way (the sizes depend only on the lengths and the plan), so a piece's flag means the
same rows on the rank that sends it and on the rank that waits for it.

Examples
--------
>>> sizes(4096, 4, 0.5, least=512)
[2048, 1024, 512, 512]
>>> sizes(8192, 2, 16.0, least=512)
[512, 7680]
>>> [(piece.start, piece.stop) for piece in split(slice(0, 1000), 1000, 2)]
[(0, 500), (500, 1000)]
"""

from __future__ import annotations

import functools

import torch

# Pieces under about 512 rows or 4M elements of output (two waves of 128 x 128 tiles on 132 SMs) lost more GEMM
# efficiency than they gained overlap on 2xH200 (benchmarks/RESULTS.md "fused_ops (2 GPUs, pieces of the chunked
# path)"): at M = 2048, 8 pieces were up to 2x slower than 2. So the rule cuts no more pieces than that allows on
# average, and pieces that grow or shrink are no thinner than PIECE_ROWS (except where a block is too short for
# its count of them: the pieces are then even, some short or empty).
PIECE_ROWS, PIECE_ELEMENTS = 512, 4 << 20
ALIGN = 128  # piece boundaries fall on whole 128-row tiles where the sizes are not even
# At M = 8192, 8 pieces were at most 2% faster than 4 (within the run-to-run noise), so at most 4;
# matmul_reduce_scatter and all_gather_matmul were fastest in 2 pieces at all 6 shapes (one tie), by up to 9% and
# 10%: at most 2 for them. (Measured when all_gather_matmul's first piece split K into per-shard terms; letting it
# wait for its rows in up to 4 even pieces was 1.13x S at (M, N, K) = (2048, 28672, 8192). Its first piece waits
# now, for accuracy, and 2 even pieces were still within 1.2% of the best cut: see the module doc.) The pushing
# pipelines, matmul_all_gather and matmul_all_reduce, at most 3: 3 shrinking pieces beat 4 even ones at 5 of the
# 6 M = 8192 rows of the 2026-11-26 sweep, by 0.6-7% (and were 1% slower at the sixth). (At M = 2048 every op's block is
# 1024 rows or fewer: 2 even pieces, whatever these say.)
DEFAULT_MAX_PIECES = 4
MAX_PIECES = {"matmul_reduce_scatter": 2, "all_gather_matmul": 2, "matmul_all_gather": 3, "matmul_all_reduce": 3}
# Each piece's rows over the previous piece's, by op (see the module doc): the last transfer of a pushing
# pipeline, the one nothing hides, made short.
GROWTH = {"matmul_all_gather": 0.6, "matmul_all_reduce": 0.6, "matmul_reduce_scatter": 1.0, "all_gather_matmul": 5.0}
# A growing cut whose first piece would be thinner than this is even instead (see the module doc).
FIRST_ROWS = 1024
# The pipelines whose last piece's transfer is what nothing hides (see the module doc).
PUSHING = ("matmul_all_gather", "matmul_all_reduce")
# The pipelines that push each peer's block of the product to that peer as it is computed (see the module doc).
REDUCING = ("matmul_all_reduce", "matmul_reduce_scatter")
# A reduction's one-piece-a-block pipeline at more than 2 ranks pays where a row's GEMM takes at least this part of
# its push (transfer_hiding). 4x H200 (2026-11-28, bf16, one piece a block against sequential): won at 0.38
# (matmul_all_reduce 2048 x 8192 x 8192: 235 against 246 µs; 2048 x 28672 x 8192: 712 against 831;
# matmul_reduce_scatter 2048 x 8192 x 8192: 141 against 197) and 1.32; lost at 0.19 (lesson 15's matmul_all_reduce,
# 4096 x 4096 x 4096: 233 against 200), where the copy engines' pushes outlast the GEMM they hide behind.
BLOCK_PIPELINE_HIDING = 0.3
# The shares of the spec sheet's figures that a chunked call reaches: the copy engines pushed 376-392 of NVLink's
# 450 GB/s a direction (2xH100 and 2xH200, benchmarks/RESULTS.md), cuBLAS's bf16 GEMMs at M = 8192 ran at 685-780
# of the 989.5 dense TFLOP/s.
LINK_SHARE, FLOP_SHARE = 0.85, 0.7


def growth(op: str, rows: int, count: int, hiding: float | None = None) -> float:
    """The op's :data:`GROWTH` for ``rows`` rows in ``count`` pieces, or 1 (even) where a growing cut's first
    piece would have fewer than :data:`FIRST_ROWS` rows. A pushing pipeline (:data:`PUSHING`) whose rows' GEMMs take
    ``hiding`` times their transfers (:func:`transfer_hiding`) shrinks by no more than ``1 / hiding`` a piece, and
    not at all where ``hiding`` is under 1: a piece's transfer then still fits under the next piece's GEMM, where
    a faster shrink would queue each transfer behind the last (see the module doc).

    Examples
    --------
    >>> growth("all_gather_matmul", 8192, 2), growth("all_gather_matmul", 2048, 2)
    (5.0, 1.0)
    >>> growth("matmul_all_gather", 2048, 3, hiding=4.5), growth("matmul_all_reduce", 2048, 3, hiding=0.38)
    (0.6, 1.0)
    >>> round(growth("matmul_all_reduce", 2048, 3, hiding=1.32), 2)
    0.76
    """
    wanted = GROWTH[op]
    if op in PUSHING and hiding is not None:
        wanted = min(1.0, max(wanted, 1 / hiding))
    if wanted > 1 and sizes(rows, count, wanted)[0] < FIRST_ROWS:
        return 1.0
    return wanted


def overlaps(op: str, rows: int, columns: int, count: int, world: int, hiding: float | None = None) -> bool:
    """Whether a chunked call of ``count`` pieces has communication to overlap: 2 pieces or more, or, for the
    reductions (:data:`REDUCING`) at more than 2 ranks, blocks of at least one piece's size (:data:`PIECE_ROWS`
    rows and :data:`PIECE_ELEMENTS` elements), each peer's pushed while the next peer's computes; for
    matmul_all_reduce, which pushes twice (the blocks, then the sums back), where the GEMM hides enough of the pushes
    to pay for them (``hiding``, :func:`transfer_hiding`, at least :data:`BLOCK_PIPELINE_HIDING`; None: not known,
    sequential). matmul_reduce_scatter pushes once, and paid even at a low ratio: 130 against 157 µs sequential at
    4096 x 4096 x 1024 a rank on 4x H200 (2026-11-28), a ratio of about 0.05.

    Examples
    --------
    >>> op = "matmul_reduce_scatter"
    >>> overlaps(op, 2048, 2048, 1, world=4, hiding=0.38), overlaps(op, 2048, 2048, 1, world=2, hiding=0.38)
    (True, False)
    >>> overlaps(op, 4096, 1024, 1, world=4, hiding=0.05), overlaps(op, 2048, 512, 1, world=4, hiding=0.1)
    (True, False)
    >>> overlaps("matmul_all_gather", 512, 8192, 1, 4), overlaps("matmul_all_reduce", 1024, 4096, 1, 4, hiding=0.19)
    (False, False)
    """
    if count >= 2:
        return True
    hidden = op == "matmul_reduce_scatter" or (hiding is not None and hiding >= BLOCK_PIPELINE_HIDING)
    return op in REDUCING and world > 2 and rows >= PIECE_ROWS and rows * columns >= PIECE_ELEMENTS and hidden


def last_piece_hides_the_rest(op: str, rows: int, columns: int, hiding: float | None) -> tuple[int, float] | None:
    """``(2, growth)``: two pieces, the last :data:`PIECE_ROWS` rows, for a pushing pipeline (:data:`PUSHING`)
    whose last piece's GEMM outlasts the transfer of every row before it. ``hiding`` is a row's GEMM time over
    its transfer time (:func:`transfer_hiding`). None where that does not hold, where ``hiding`` is None, or where
    :func:`count` would not cut ``rows`` x ``columns`` at all (too small a product to be worth a pipeline).

    Examples
    --------
    >>> last_piece_hides_the_rest("matmul_all_gather", 4096, 8192, hiding=15.8)
    (2, 0.14285714285714285)
    >>> sizes(4096, 2, 1 / 7)
    [3584, 512]
    >>> last_piece_hides_the_rest("matmul_all_gather", 4096, 8192, hiding=4.5) is None   # 3584 rows take longer
    True
    """
    if op not in PUSHING or hiding is None or count(op, rows, columns) < 2 or rows < 2 * PIECE_ROWS or (
            rows - PIECE_ROWS > hiding * PIECE_ROWS):
        return None
    return 2, PIECE_ROWS / (rows - PIECE_ROWS)  # sizes() holds the last piece at PIECE_ROWS exactly


def cut_at_more_ranks(op: str, rows: int, columns: int, world: int) -> tuple[int, float] | None:
    """``(2, 1.0)``, two even pieces, for matmul_all_reduce at more than 2 ranks wherever :func:`count` would cut
    ``rows`` x ``columns`` at all; None elsewhere (the other rules decide).

    Its peer blocks already overlap (:func:`overlaps`), and fewer pieces make fewer, longer pushes. Measured on 4x
    H200 (2026-11-28, bf16, benchmarks/RESULTS.md "fused_ops (4 GPUs, pieces of the chunked path:
    matmul_all_gather,matmul_all_reduce, ..."), 2 even pieces against 3 even ones, the count the other rules cut there:
    717 against 769 µs at 8192^3, 2394 against 2666 at 8192 x 28672 x 8192, 1649 against 1686 at 8192 x 8192 x
    28672 (where those rules shrink the 3 pieces by 0.76, a cut the sweep did not time; the fastest it timed, 4
    x0.5, took 1643). matmul_all_gather's best cuts there (4 x0.5, 3 x0.5) follow no such pattern, and it keeps its
    rules.

    Examples
    --------
    >>> cut_at_more_ranks("matmul_all_reduce", 2048, 8192, 4), cut_at_more_ranks("matmul_all_reduce", 4096, 8192, 2)
    ((2, 1.0), None)
    >>> cut_at_more_ranks("matmul_all_reduce", 512, 8192, 4) is None     # one piece: nothing to cut
    True
    """
    if op != "matmul_all_reduce" or world <= 2 or count(op, rows, columns) < 2:
        return None
    return 2, 1.0


def transfer_hiding(device_name: str, dtype, depth: int, world: int, tf32: bool = False) -> float | None:
    """How many times longer a row of the product takes to compute than to push to every peer.

    A row takes ``2 * depth`` flops per column to compute, and ``world - 1`` copies of its bytes to push. The
    rates are the spec sheet's figures for the GPU called ``device_name`` (:mod:`iris.base.gpu_specs`), scaled to
    what a chunked call reaches (:data:`LINK_SHARE`, :data:`FLOP_SHARE`). None for a GPU or dtype not on the
    sheet, or for one rank.

    Examples
    --------
    >>> round(transfer_hiding("NVIDIA H200", torch.bfloat16, depth=28672, world=2), 1)
    15.8
    >>> round(transfer_hiding("NVIDIA H200", torch.bfloat16, depth=8192, world=2), 1)
    4.5
    """
    return _transfer_hiding(device_name, dtype, depth, world, tf32)


@functools.lru_cache(maxsize=64)
def _transfer_hiding(device_name: str, dtype: torch.dtype, depth: int, world: int, tf32: bool) -> float | None:
    from ..base import (
        gpu_specs as specs,  # (iris.perf does not import iris.ops: no cycle; imported here, for GPUs only)
    )

    spec = specs.find(device_name, warn=False)  # an unknown GPU keeps the plain rule: nothing to warn about
    key = "tf32" if tf32 and specs.dtype_key(dtype) == "fp32" else dtype
    peak = spec.peak(key) if spec is not None else None
    if peak is None or world < 2:
        return None
    gemm_s = 2 * depth / (FLOP_SHARE * peak * 1e12)  # per column of the row
    push_s = (world - 1) * dtype.itemsize / (LINK_SHARE * spec.peer_gbs * 1e9)
    return gemm_s / push_s


def boundary_rows(op: str) -> int:
    """The piece boundaries of ``op``'s cut fall on multiples of this many rows (:func:`split`'s ``align``):
    :data:`ALIGN` for all_gather_matmul, whose pieces start inside a column-major A (an offset along each of its
    rows: cuBLAS took a kernel 3x slower for an A not aligned to 16 bytes, 2xH100, 3 even pieces of 8192), 1 for
    the others.

    Examples
    --------
    >>> boundary_rows("all_gather_matmul"), boundary_rows("matmul_all_gather")
    (128, 1)
    """
    return ALIGN if op == "all_gather_matmul" else 1


def cut_rows(op: str, out_rows: int, world: int) -> int:
    """The rows a rank cuts into pieces, of an ``out`` of ``out_rows`` rows: its own rows for matmul_all_gather,
    its row block (the first, the longest) for matmul_all_reduce, all of them for the others.

    Examples
    --------
    >>> [cut_rows(op, 8193, 2) for op in ("matmul_all_gather", "matmul_all_reduce", "all_gather_matmul")]
    [4096, 4097, 8193]
    """
    if op == "matmul_all_reduce":
        return -(-out_rows // world)
    if op == "matmul_all_gather":
        return out_rows // world
    return out_rows


def count(op: str, rows: int, columns: int) -> int:
    """How many pieces the rule cuts ``rows`` rows of ``columns`` columns into: as many as have
    :data:`PIECE_ROWS` rows and :data:`PIECE_ELEMENTS` elements on average, at most the op's
    :data:`MAX_PIECES`, at least 1."""
    return max(1, min(MAX_PIECES.get(op, DEFAULT_MAX_PIECES), rows // PIECE_ROWS, rows * columns // PIECE_ELEMENTS))


def sizes(length: int, count: int, growth: float = 1.0, least: int = PIECE_ROWS) -> list[int]:
    """``length`` rows in ``count`` piece sizes, each ``growth`` times the one before but none under ``least``
    (those get ``least``, the others share the rest in proportion), all but the largest in whole :data:`ALIGN`-row
    tiles (``least`` is one too). Even sizes (the last ones short or empty) for ``growth`` 1 or where ``count``
    pieces of ``least`` do not fit."""
    if least % ALIGN:
        raise ValueError(f"least must be a whole number of {ALIGN}-row tiles, got {least}")
    if growth == 1.0 or length < count * least:
        size = -(-length // count)
        return [max(0, min(size, length - c * size)) for c in range(count)]
    # Weights relative to the largest piece's (the first when shrinking, the last when growing): powers of a
    # large growth underflow to 0 (a piece held at `least`) instead of overflowing.
    largest = 0 if growth < 1 else count - 1
    weights = [growth ** (c - largest) for c in range(count)]
    floored: set[int] = set()  # pieces held at `least`: found smallest first, until the rest all exceed it
    while True:
        free = length - least * len(floored)
        total = sum(w for c, w in enumerate(weights) if c not in floored)
        below = {c for c, w in enumerate(weights) if c not in floored and free * w / total < least}
        if not below:
            break
        floored |= below
    # Whole tiles, rounded down; what that leaves goes to the largest piece, so the order stays as asked.
    sizes = [least if c in floored else int(free * w / total) // ALIGN * ALIGN for c, w in enumerate(weights)]
    sizes[largest] += length - sum(sizes)
    return sizes


def split(rows: slice, length: int, count: int, growth: float = 1.0, least: int = PIECE_ROWS,
          align: int = 1) -> list[slice]:
    """``rows`` (of a dimension of ``length``) cut into ``count`` slices of :func:`sizes`, each boundary inside
    moved to the nearest multiple of ``align`` rows from the start (a piece may then be empty).

    Examples
    --------
    >>> [(piece.start, piece.stop) for piece in split(slice(0, 8192), 8192, 3, align=128)]
    [(0, 2688), (2688, 5504), (5504, 8192)]
    """
    start, stop, _ = rows.indices(length)
    bounds, at = [start], start
    for size in sizes(stop - start, count, growth, least):
        at += size
        bounds.append(at)
    inner = [min(max(start + round((b - start) / align) * align, start), stop) for b in bounds[1:-1]]
    bounds = [start, *inner, stop]
    return [slice(a, b) for a, b in zip(bounds, bounds[1:], strict=False)]
