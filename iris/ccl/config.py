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

from dataclasses import dataclass, field, fields, replace
from enum import IntEnum
from types import SimpleNamespace

from triton.language import TRITON_MAX_TENSOR_NUMEL

ALL_REDUCE_VARIANTS = ("one_shot", "two_shot", "two_shot_push", "ring", "atomic", "spinlock")
REDUCE_SCATTER_VARIANTS = ("two_shot", "push")
ALL_GATHER_VARIANTS = ("push", "pull", "copy_engines", "ring")
ALL_TO_ALL_VARIANTS = ("push", "pull", "copy_engines")
BROADCAST_VARIANTS = ("push", "copy_engines")  # also scatter's and gather's: one rank against the others
REDUCE_VARIANTS = ("push", "two_shot")
UPSTREAM_REDUCE_VARIANTS = ("one_shot",)  # upstream's name for what push does here: every input to the root at once
UPSTREAM_ALL_GATHER_VARIANTS = ("persistent", "partitioned")  # upstream's tiled kernels: accepted, picked by size
MIN_BLOCK = 16  # remote accesses are hinted 16-aligned
MAX_BLOCK = TRITON_MAX_TENSOR_NUMEL  # the most elements of one block (2**20 in triton 3.6 to 3.9)
MAX_WARPS = 32  # 1024 threads, CUDA's largest block
GLUON_COLLECTIVES = ("all_gather", "all_to_all")  # those with Gluon kernels (Config.use_gluon)
# What a field left unset (None) becomes where no tuning, cache or table chose it (iris.ccl.tuning).
DEFAULTS = {"num_warps": 8, "block_size_m": 32, "block_size_n": 64}
# The fields each collective's tuning chooses (iris.ccl.tuning); the others are the caller's.
TUNED_FIELDS = {
    "all_reduce": ("all_reduce_variant", "block_size", "comm_sms", "num_warps"),
    "all_gather": ("all_gather_variant", "block_size", "comm_sms", "num_warps"),
    "reduce_scatter": ("reduce_scatter_variant", "block_size", "comm_sms", "num_warps"),
    "all_to_all": ("all_to_all_variant", "block_size_m", "block_size_n", "comm_sms", "num_warps"),
    "broadcast": ("broadcast_variant", "block_size", "comm_sms", "num_warps"),
    "gather": ("broadcast_variant", "block_size", "comm_sms", "num_warps"),
    "scatter": ("broadcast_variant", "block_size", "comm_sms", "num_warps"),
    "reduce": ("reduce_variant", "block_size", "comm_sms", "num_warps"),
}
# Fields upstream Iris tunes for its AMD kernels, which mean nothing to these: AUTOTUNE there is accepted and becomes
# the field's default.
AMD_TUNED_FIELDS = ("swizzle_size", "num_stages", "waves_per_eu", "all_reduce_distribution")
TUNABLE_FIELDS = tuple(dict.fromkeys([name for names in TUNED_FIELDS.values() for name in names]
                                     + list(AMD_TUNED_FIELDS)))


class _Autotune:
    """The type of :data:`AUTOTUNE`, upstream Iris's sentinel (one object: compare with ``is``)."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "AUTOTUNE"

    def __reduce__(self):  # pickled and copied as the one object
        return "AUTOTUNE"

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __bool__(self):
        raise TypeError("iris.ccl.AUTOTUNE is upstream Iris's sentinel, not a switch: put it in the Config fields to "
                        "tune (Config(all_reduce_variant=AUTOTUNE)) and compare with `is`; whether autotuning is on: "
                        "iris.ccl.tuning.autotune_on() (IRIS_AUTOTUNE=0 turns it off)")


AUTOTUNE = _Autotune()
"""Upstream Iris's marker of a :class:`Config` field to tune: ``Config(all_reduce_variant=AUTOTUNE)`` tunes the variant
at the first call of each shape (and keeps the other fields as given), ``Config.autotune(**fixed)`` marks every tunable
field but ``fixed``. :mod:`iris.ccl.tuning` says how, and what None (unset) means instead."""


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
    reduce_variant : {None, "push", "two_shot", "one_shot"}
        reduce's algorithm (:mod:`iris.ccl.reduce`): "push", every rank writes its input into the root's inbox;
        "two_shot", each rank sums a chunk of every rank's input and writes it into the root's output;
        "one_shot", upstream's name for the root getting every input in one step, runs push. None: by size
        (:func:`iris.ccl.rules.choose_reduce_variant`).
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
        The older spelling of :meth:`autotune`: True marks every tunable field left None with :data:`AUTOTUNE` (and
        reads False after).

    Notes
    -----
    Any tunable field (:data:`TUNABLE_FIELDS`: the variants of all_reduce, all_gather, reduce_scatter, all_to_all,
    broadcast (also gather's and scatter's) and reduce,
    ``block_size``, ``block_size_m``, ``block_size_n``, ``comm_sms``, ``num_warps``, and upstream's AMD-only
    ``swizzle_size``, ``num_stages``, ``waves_per_eu``, ``all_reduce_distribution``) may hold :data:`AUTOTUNE`:
    tuned at the first call of each shape (:mod:`iris.ccl.tuning`; the AMD-only ones have nothing to tune here and
    take their defaults).

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
        """Upstream Iris's ``Config.autotune(**fixed)``: every tunable field :data:`AUTOTUNE` but those in ``fixed``,
        which are kept; the tuning runs at the first call of each shape (cached: the next call and the next process
        of this machine reuse it).

        Examples
        --------
        >>> config = Config.autotune(num_warps=4)
        >>> config.num_warps, config.block_size, "all_reduce_variant" in config.get_autotune_fields()
        (4, AUTOTUNE, True)
        """
        unknown = sorted(set(fixed) - {f.name for f in fields(cls)})
        if unknown:
            raise TypeError(f"Config.autotune: no Config field named {', '.join(unknown)}")
        return cls(**{**{name: AUTOTUNE for name in TUNABLE_FIELDS}, **fixed})

    def get_autotune_fields(self) -> list[str]:
        """The fields that hold :data:`AUTOTUNE` (upstream's name).

        Examples
        --------
        >>> Config(all_reduce_variant=AUTOTUNE, num_warps=4).get_autotune_fields()
        ['all_reduce_variant']
        """
        return [f.name for f in fields(self) if getattr(self, f.name) is AUTOTUNE]

    @classmethod
    def get_tunable_fields(cls, collective: str) -> list[str]:
        """The fields a tuning of ``collective`` chooses here (all_reduce, all_gather, reduce_scatter, all_to_all).

        Examples
        --------
        >>> Config.get_tunable_fields("all_gather")
        ['all_gather_variant', 'block_size', 'comm_sms', 'num_warps']
        """
        if collective not in TUNED_FIELDS:
            raise ValueError(f"{collective!r} is not tuned: the tuned collectives are {', '.join(TUNED_FIELDS)}")
        return list(TUNED_FIELDS[collective])

    def with_resolved(self, **values) -> Config:
        """A copy with ``values`` in their fields (upstream's name; checked as any Config)."""
        return replace(self, **values)

    def with_defaults(self) -> Config:
        """This config as a kernel runs it: :data:`AUTOTUNE` left in a field (a collective that tunes nothing, or a
        tuning refused) becomes unset, then :data:`DEFAULTS` fill the fields still unset (the size rules choose the
        rest); upstream's AMD-only fields take their defaults.

        Examples
        --------
        >>> Config().with_defaults().num_warps
        8
        >>> Config.autotune().with_defaults().get_autotune_fields()
        []
        """
        values = {name: (field_default(name) if name in AMD_TUNED_FIELDS else None)
                  for name in self.get_autotune_fields()}
        values.update({name: value for name, value in DEFAULTS.items()
                       if values.get(name, getattr(self, name)) is None})
        return replace(self, **values) if values else self

    def __post_init__(self):
        if self.tune is True:  # the older spelling of Config.autotune(): every unset tunable field
            for name in TUNABLE_FIELDS:
                if getattr(self, name) is None:
                    setattr(self, name, AUTOTUNE)
            self.tune = False
        refused = [name for name in self.get_autotune_fields() if name not in TUNABLE_FIELDS]
        if refused:
            raise ValueError(f"Config({refused[0]}=AUTOTUNE): {refused[0]} is not a tunable field; the tunable ones "
                             f"are {', '.join(TUNABLE_FIELDS)}")
        _validate(SimpleNamespace(**self._without_autotune()))

    def _without_autotune(self) -> dict:
        """The field values to check: :data:`AUTOTUNE` in a tunable field checks as unset (or as the default)."""
        return {f.name: (None if f.name not in AMD_TUNED_FIELDS else field_default(f.name))
                if getattr(self, f.name) is AUTOTUNE else getattr(self, f.name) for f in fields(self)}


def _validate(config: SimpleNamespace) -> None:
    """Config's checks, on its field values (:data:`AUTOTUNE` read as unset: see ``Config._without_autotune``)."""
    if config.all_reduce_variant not in (None, *ALL_REDUCE_VARIANTS):
        raise ValueError(f"all_reduce_variant={config.all_reduce_variant!r}: use one of {ALL_REDUCE_VARIANTS} "
                         "or None (chosen by size)")
    if config.all_gather_variant not in (None, *ALL_GATHER_VARIANTS, *UPSTREAM_ALL_GATHER_VARIANTS):
        raise ValueError(f"all_gather_variant={config.all_gather_variant!r}: use one of {ALL_GATHER_VARIANTS} "
                         "or None (chosen by size)")
    if config.all_to_all_variant not in (None, *ALL_TO_ALL_VARIANTS):
        raise ValueError(f"all_to_all_variant={config.all_to_all_variant!r}: use one of {ALL_TO_ALL_VARIANTS} "
                         "or None (chosen by measurement or size)")
    if config.broadcast_variant not in (None, *BROADCAST_VARIANTS):
        raise ValueError(f"broadcast_variant={config.broadcast_variant!r}: use one of {BROADCAST_VARIANTS} or None "
                         "(chosen by size)")
    if config.reduce_variant not in (None, *REDUCE_VARIANTS, *UPSTREAM_REDUCE_VARIANTS):
        raise ValueError(f"reduce_variant={config.reduce_variant!r}: use one of {REDUCE_VARIANTS} or None "
                         "(chosen by size)")
    if config.reduce_scatter_variant not in (None, *REDUCE_SCATTER_VARIANTS):
        raise ValueError(f"reduce_scatter_variant={config.reduce_scatter_variant!r}: use one of "
                         f"{REDUCE_SCATTER_VARIANTS} or None (chosen by measurement or size)")
    for name in ("block_size", "block_size_m", "block_size_n", "comm_sms", "num_warps", "num_xcds", "chunk_size",
                 "all_reduce_ring_slice_n", "swizzle_size", "all_reduce_num_rings", "num_stages", "waves_per_eu"):
        value = getattr(config, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"Config({name}={value!r}): use an int")
    if config.block_size is not None and not (is_power_of_two(config.block_size)
                                            and MIN_BLOCK <= config.block_size <= MAX_BLOCK):
        raise ValueError(f"Config(block_size={config.block_size}): the flat kernels' blocks (tl.arange) need a power "
                         f"of two from {MIN_BLOCK} to {MAX_BLOCK}; use "
                         f"{min(max(nearest_power_of_two(config.block_size), MIN_BLOCK), MAX_BLOCK)} "
                         "for instance")
    for name in ("block_size_m", "block_size_n"):
        value = getattr(config, name)
        if value is not None and not is_power_of_two(value):
            raise ValueError(f"Config({name}={value}): all_to_all's tile (tl.arange) needs a power of two; use "
                             f"{nearest_power_of_two(value)} for instance")
    tile_m, tile_n = (DEFAULTS[name] if getattr(config, name) is None else getattr(config, name)
                      for name in ("block_size_m", "block_size_n"))
    if tile_m * tile_n > MAX_BLOCK:
        raise ValueError(f"Config(block_size_m={tile_m}, block_size_n={tile_n}): a tile of {tile_m * tile_n} "
                         f"elements is over Triton's {MAX_BLOCK}; use smaller tiles")
    if config.num_warps is not None and not (is_power_of_two(config.num_warps) and config.num_warps <= MAX_WARPS):
        raise ValueError(f"Config(num_warps={config.num_warps}): Triton launches a power of two of warps, at most "
                         f"{MAX_WARPS} on NVIDIA GPUs; use {min(nearest_power_of_two(config.num_warps), MAX_WARPS)}")
    for name in ("comm_sms", "num_xcds", "chunk_size", "all_reduce_ring_slice_n"):
        value = getattr(config, name)
        if value is not None and value <= 0:
            raise ValueError(f"{name}={value}: use a positive number or None")
    if config.swizzle_size <= 0 or config.all_reduce_num_rings <= 0:
        raise ValueError(f"Config(swizzle_size={config.swizzle_size}, all_reduce_num_rings="
                         f"{config.all_reduce_num_rings}): both must be positive")
    if config.num_stages < 1 or config.waves_per_eu < 0:
        raise ValueError(f"num_stages={config.num_stages}, waves_per_eu={config.waves_per_eu}: "
                         "num_stages must be >= 1 and waves_per_eu >= 0 (0: the compiler chooses)")
    if config.threads_per_warp not in (32, 64):
        raise ValueError(f"threads_per_warp={config.threads_per_warp}: a warp has 32 threads (NVIDIA) or 64 (AMD)")
    if config.all_reduce_distribution not in (0, 1):
        raise ValueError(f"all_reduce_distribution={config.all_reduce_distribution}: use 0 (striding) or 1 (block)")
    if not isinstance(config.use_gluon, bool):
        raise TypeError(f"Config(use_gluon={config.use_gluon!r}): use True or False")
    if not isinstance(config.tune, bool):
        raise TypeError(f"Config(tune={config.tune!r}): use True or False")


def field_default(name: str):
    """The default value of Config's field ``name``.

    Examples
    --------
    >>> field_default("swizzle_size")
    6
    """
    return Config.__dataclass_fields__[name].default


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
