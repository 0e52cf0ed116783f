"""What a caller can ask of a collective: :class:`Config` (launch shape, algorithm) and :class:`ReduceOp`.

Field names follow upstream Iris's ``iris.ccl.Config`` so that upstream code ports unchanged; fields that
tune upstream's tiled AMD kernels (swizzling, XCDs, rings, pipeline stages, wavefront width, waves per EU) are
accepted and validated but have no effect on these kernels, which work on flat blocks.

Examples
--------
>>> from iris.ccl import Config
>>> Config(all_reduce_variant="two_shot", block_size=1024).all_reduce_variant
'two_shot'
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum

from triton.language import TRITON_MAX_TENSOR_NUMEL

ALL_REDUCE_VARIANTS = ("one_shot", "two_shot", "two_shot_push", "ring", "atomic", "spinlock")
REDUCE_SCATTER_VARIANTS = ("two_shot", "push")
ALL_GATHER_VARIANTS = ("push", "pull", "copy_engines", "ring")
ALL_TO_ALL_VARIANTS = ("push", "pull", "copy_engines")
BROADCAST_VARIANTS = ("push", "copy_engines")  # also scatter's and gather's: one rank against the others
REDUCE_VARIANTS = ("push", "two_shot")
UPSTREAM_ALL_GATHER_VARIANTS = ("persistent", "partitioned")  # upstream's tiled kernels: accepted, picked by size
MIN_BLOCK = 16  # remote accesses are hinted 16-aligned
MAX_BLOCK = TRITON_MAX_TENSOR_NUMEL  # the most elements of one block (2**20 in triton 3.6 to 3.9)
MAX_WARPS = 32  # 1024 threads, CUDA's largest block
GLUON_COLLECTIVES = ("all_gather", "all_to_all")  # those with Gluon kernels (Config.use_gluon)
# What a field left unset (None) becomes where no tuning, cache or table chose it (iris.ccl.tuning).
DEFAULTS = {"num_warps": 8, "block_size_m": 32, "block_size_n": 64}


def is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def nearest_power_of_two(value: int) -> int:
    """The power of two nearest ``value`` (at least 1), to suggest in place of a refused size."""
    if value < 1:
        return 1
    lower = 1 << (value.bit_length() - 1)
    return lower if value - lower <= 2 * lower - value else 2 * lower


class ReduceOp(IntEnum):
    """Reductions, numbered as upstream Iris; only ``SUM`` is implemented."""

    SUM = 0
    PRODUCT = 1
    MIN = 2
    MAX = 3
    BAND = 4
    BOR = 5
    BXOR = 6


@dataclass
class Config:
    """How a collective runs.

    Parameters
    ----------
    all_reduce_variant : {None, "one_shot", "two_shot", "two_shot_push", "ring", "atomic", "spinlock"}
        None: chosen by measurement for this GPU and world size (:mod:`iris.ccl.tuning`), else by size (see
        :func:`iris.ccl.rules.choose_variant`). Every field left None is chosen so; a field set is kept.
    block_size : int, optional
        Elements one program moves per step of the flat (1-D) kernels: a power of two from 16 (the 16-element
        alignment of remote accesses) to 2**20 (Triton's largest block), as the kernels' ``tl.arange`` needs.
        Default: 4096 on a GPU, 1024 on the CPU interpreter (whose cost is per operation, not per element).
    block_size_m, block_size_n : int, optional
        Tile of the 2-D all_to_all kernel (default 32 x 64), and the tile (flattened: ``block_size_m *
        block_size_n`` elements, one lock each) of the spinlock all-reduce; powers of two whose product is at most
        2**20. all_gather's kernels, Gluon's too, move flat blocks of ``block_size`` (upstream's Gluon all_gather tiles
        by these instead).
    comm_sms : int, optional
        Most programs a collective launches. Kernels wait on other ranks, so every program must be resident
        at once: at most the SM count on a GPU (default: the SM count; 2 on the CPU interpreter).
    num_warps : int, optional
        Warps per program on a GPU (default 8): a power of two up to 32 (Triton's rule; 32 warps fill a CUDA block
        of 1024 threads). Checked on every backend, so that what runs on the CPU also runs on a GPU.
    use_gluon : bool
        True: all_gather and all_to_all run as Gluon kernels (:mod:`iris.ccl.gluon_all_gather`,
        :mod:`iris.ccl.gluon_all_to_all`), with the same algorithms, arguments and results as the Triton ones,
        on GPUs and on the CPU interpreter. all_reduce and reduce_scatter have no Gluon kernel, here as upstream:
        called with it they raise a ValueError that names them (upstream's refusal; ``all_reduce_preamble``,
        which only prepares a workspace, takes it, as upstream's does); the device barrier takes no config.
    all_gather_variant : {None, "push", "pull", "copy_engines", "ring", "persistent", "partitioned"}
        "push", "pull", "copy_engines" (ours: peer-to-peer memcpys, no kernel but the barriers) or "ring" (each rank
        writes only into its right neighbour, world - 1 steps, as upstream's ring) picks the algorithm; None and
        upstream's tiled names pick by size (see :func:`iris.ccl.rules.choose_gather_variant`).
    reduce_scatter_variant : {None, "two_shot", "push"}
        "two_shot" (upstream's only one): each rank reads its chunk from every peer; "push": every rank writes each
        peer's chunk into that peer's inbox (:mod:`iris.ccl.push_reduce`). None: chosen as ``all_reduce_variant``.
    all_to_all_variant : {None, "push", "pull", "copy_engines"}
        "pull" (upstream's): each rank reads its chunk from every peer's input; "push": each rank writes every peer's
        chunk into that peer's inbox (:mod:`iris.ccl.all_to_all`); "copy_engines" (ours): each chunk goes by a 2-D
        peer-to-peer memcpy, no kernel (:mod:`iris.ccl.copy_engines`). None: chosen by measurement, else by size
        (:func:`iris.ccl.rules.choose_all_to_all_variant`); with ``use_gluon=True``, pull (the Gluon kernel's).
    broadcast_variant : {None, "push", "copy_engines"}
        broadcast's, scatter's and gather's algorithm (:mod:`iris.ccl.broadcast`): "push", one kernel whose writes
        go straight into the receivers' tensors once they said they are ready; "copy_engines" (GPUs), peer-to-peer
        memcpys between two device barriers. None: by size (:func:`iris.ccl.rules.choose_rooted_variant`).
    reduce_variant : {None, "push", "two_shot"}
        reduce's algorithm (:mod:`iris.ccl.reduce`): "push", every rank writes its input into the root's inbox;
        "two_shot", each rank sums a chunk of every rank's input and writes it into the root's output. None: by
        size (:func:`iris.ccl.rules.choose_reduce_variant`).
    swizzle_size, num_xcds, chunk_size, all_reduce_distribution, all_reduce_num_rings, all_reduce_ring_slice_n
        Upstream's tuning knobs for AMD's tiled kernels: checked, but without effect here.
    num_stages : int
        Upstream's software-pipelining depth for its tiled kernels: checked (>= 1), without effect here (the
        flat kernels have no loop to pipeline).
    threads_per_warp : {32, 64}
        The wavefront width upstream's Gluon kernels build their layouts for (64 on AMD); without effect
        here: the Triton kernels know the warp width, and the Gluon ones read it from the GPU's target (32 on
        NVIDIA; :func:`iris.ccl.gluon_layouts.warp_threads`).
    waves_per_eu : int
        An AMD occupancy hint (>= 0; 0: the compiler chooses). NVIDIA GPUs and the CPU have no such knob:
        without effect here.
    tune : bool
        True (what :meth:`autotune` gives): the fields left None are tuned at this call's first shape, whatever
        the shipped table says (:mod:`iris.ccl.tuning`).

    Examples
    --------
    >>> Config(comm_sms=32, block_size=2048)          # doctest: +ELLIPSIS
    Config(all_reduce_variant=None, block_size=2048, ...)
    """

    all_reduce_variant: str | None = None
    block_size: int | None = None
    block_size_m: int | None = None
    block_size_n: int | None = None
    comm_sms: int | None = None
    num_warps: int | None = None
    use_gluon: bool = False
    reduce_scatter_variant: str | None = None
    swizzle_size: int = 6
    num_xcds: int | None = None
    chunk_size: int | None = None
    all_reduce_distribution: int = 0
    all_reduce_num_rings: int = 1
    all_reduce_ring_slice_n: int | None = None
    all_gather_variant: str | None = None
    num_stages: int = 1
    threads_per_warp: int = 64
    waves_per_eu: int = 0
    all_to_all_variant: str | None = None
    broadcast_variant: str | None = None
    reduce_variant: str | None = None
    tune: bool = field(default=False, repr=False)

    @classmethod
    def autotune(cls, **fixed) -> Config:
        """A config whose unset fields are tuned at the first call of each shape (upstream Iris's
        ``Config.autotune()``); ``fixed`` fields are kept.

        Examples
        --------
        >>> Config.autotune(num_warps=4).tune, Config.autotune(num_warps=4).num_warps
        (True, 4)
        """
        return cls(**fixed, tune=True)

    def with_defaults(self) -> Config:
        """This config with :data:`DEFAULTS` in the fields still unset.

        Examples
        --------
        >>> Config().with_defaults().num_warps
        8
        """
        unset = {name: value for name, value in DEFAULTS.items() if getattr(self, name) is None}
        return replace(self, **unset) if unset else self

    def __post_init__(self):
        if self.all_reduce_variant not in (None, *ALL_REDUCE_VARIANTS):
            raise ValueError(f"all_reduce_variant={self.all_reduce_variant!r}: use one of {ALL_REDUCE_VARIANTS} "
                             "or None (chosen by size)")
        if self.all_gather_variant not in (None, *ALL_GATHER_VARIANTS, *UPSTREAM_ALL_GATHER_VARIANTS):
            raise ValueError(f"all_gather_variant={self.all_gather_variant!r}: use one of {ALL_GATHER_VARIANTS} "
                             "or None (chosen by size)")
        if self.all_to_all_variant not in (None, *ALL_TO_ALL_VARIANTS):
            raise ValueError(f"all_to_all_variant={self.all_to_all_variant!r}: use one of {ALL_TO_ALL_VARIANTS} "
                             "or None (chosen by measurement or size)")
        if self.broadcast_variant not in (None, *BROADCAST_VARIANTS):
            raise ValueError(f"broadcast_variant={self.broadcast_variant!r}: use one of {BROADCAST_VARIANTS} or None "
                             "(chosen by size)")
        if self.reduce_variant not in (None, *REDUCE_VARIANTS):
            raise ValueError(f"reduce_variant={self.reduce_variant!r}: use one of {REDUCE_VARIANTS} or None "
                             "(chosen by size)")
        if self.reduce_scatter_variant not in (None, *REDUCE_SCATTER_VARIANTS):
            raise ValueError(f"reduce_scatter_variant={self.reduce_scatter_variant!r}: use one of "
                             f"{REDUCE_SCATTER_VARIANTS} or None (chosen by measurement or size)")
        for name in ("block_size", "block_size_m", "block_size_n", "comm_sms", "num_warps", "num_xcds", "chunk_size",
                     "all_reduce_ring_slice_n", "swizzle_size", "all_reduce_num_rings", "num_stages", "waves_per_eu"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError(f"Config({name}={value!r}): use an int")
        if self.block_size is not None and not (is_power_of_two(self.block_size)
                                                and MIN_BLOCK <= self.block_size <= MAX_BLOCK):
            raise ValueError(f"Config(block_size={self.block_size}): the flat kernels' blocks (tl.arange) need a power "
                             f"of two from {MIN_BLOCK} to {MAX_BLOCK}; use "
                             f"{min(max(nearest_power_of_two(self.block_size), MIN_BLOCK), MAX_BLOCK)} "
                             "for instance")
        for name in ("block_size_m", "block_size_n"):
            value = getattr(self, name)
            if value is not None and not is_power_of_two(value):
                raise ValueError(f"Config({name}={value}): all_to_all's tile (tl.arange) needs a power of two; use "
                                 f"{nearest_power_of_two(value)} for instance")
        tile_m, tile_n = (DEFAULTS[name] if getattr(self, name) is None else getattr(self, name)
                          for name in ("block_size_m", "block_size_n"))
        if tile_m * tile_n > MAX_BLOCK:
            raise ValueError(f"Config(block_size_m={tile_m}, block_size_n={tile_n}): a tile of {tile_m * tile_n} "
                             f"elements is over Triton's {MAX_BLOCK}; use smaller tiles")
        if self.num_warps is not None and not (is_power_of_two(self.num_warps) and self.num_warps <= MAX_WARPS):
            raise ValueError(f"Config(num_warps={self.num_warps}): Triton launches a power of two of warps, at most "
                             f"{MAX_WARPS} on NVIDIA GPUs; use {min(nearest_power_of_two(self.num_warps), MAX_WARPS)}")
        for name in ("comm_sms", "num_xcds", "chunk_size", "all_reduce_ring_slice_n"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name}={value}: use a positive number or None")
        if self.swizzle_size <= 0 or self.all_reduce_num_rings <= 0:
            raise ValueError(f"Config(swizzle_size={self.swizzle_size}, all_reduce_num_rings="
                             f"{self.all_reduce_num_rings}): both must be positive")
        if self.num_stages < 1 or self.waves_per_eu < 0:
            raise ValueError(f"num_stages={self.num_stages}, waves_per_eu={self.waves_per_eu}: "
                             "num_stages must be >= 1 and waves_per_eu >= 0 (0: the compiler chooses)")
        if self.threads_per_warp not in (32, 64):
            raise ValueError(f"threads_per_warp={self.threads_per_warp}: a warp has 32 threads (NVIDIA) or 64 (AMD)")
        if self.all_reduce_distribution not in (0, 1):
            raise ValueError(f"all_reduce_distribution={self.all_reduce_distribution}: use 0 (striding) or 1 (block)")
        if not isinstance(self.use_gluon, bool):
            raise TypeError(f"Config(use_gluon={self.use_gluon!r}): use True or False")
        if not isinstance(self.tune, bool):
            raise TypeError(f"Config(tune={self.tune!r}): use True or False")


def refuse_gluon(ctx, config: Config | None, collective: str) -> None:
    """A ValueError for ``Config(use_gluon=True)`` passed to a collective with no Gluon kernel (all_reduce,
    reduce_scatter), as upstream Iris refuses them, naming the collective and the rank.

    Examples
    --------
    >>> refuse_gluon(ctx, Config(use_gluon=True), "all_reduce")            # doctest: +SKIP
    ValueError: rank 0: all_reduce has no Gluon kernel (Gluon runs all_gather and all_to_all) ...
    """
    if config is not None and config.use_gluon:
        raise ValueError(f"rank {ctx.cur_rank}: {collective} has no Gluon kernel (Gluon runs "
                         f"{' and '.join(GLUON_COLLECTIVES)}), as in upstream Iris: call {collective} with "
                         "use_gluon=False (the default)")
