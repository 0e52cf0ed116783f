"""The size rules: which algorithm a collective runs where no table row, tuning or caller chose one.

Measured rules, below the collectives that apply them and the tuner that starts its search from them
(:mod:`iris.ccl.tuning`), so that neither imports the other.

Examples
--------
>>> choose_variant(4 << 20, 2), choose_gather_variant(None, 64 << 20, 2)
('one_shot', 'pull')
"""

from __future__ import annotations

from .config import ALL_GATHER_VARIANTS
from .inbox import use_inbox

RING_FROM_BYTES, RING_FROM_WORLD = 16 << 20, 4  # ring for large tensors on 4 ranks or more, else two_shot


def choose_variant(nbytes: int, world: int) -> str:
    """The size rule: one_shot while ``nbytes * (world - 1) <= 4 MiB`` (:func:`iris.ccl.inbox.use_inbox`);
    above, ring from 16 MiB on 4 ranks or more, else two_shot.

    Measured on H200s (2026-11-21, benchmarks/RESULTS.md): on 4 GPUs ring beat two_shot from 64 MiB (fp32
    1 GiB: 336 against 319 GB/s bus bandwidth) and was within 6% of it at 16 MiB (faster in fp32, slower in
    bf16); on 2 GPUs two_shot was as fast or faster at every size above one_shot's.

    Examples
    --------
    >>> choose_variant(4 << 20, 2), choose_variant(1 << 20, 8), choose_variant(64 << 20, 2)
    ('one_shot', 'two_shot', 'two_shot')
    >>> choose_variant(64 << 20, 4)
    'ring'
    """
    if use_inbox(nbytes, world):
        return "one_shot"
    return "ring" if world >= RING_FROM_WORLD and nbytes >= RING_FROM_BYTES else "two_shot"


def choose_gather_variant(requested: str | None, nbytes: int, world: int) -> str:
    """The all_gather algorithm: ``requested`` if it is ours, else push while ``nbytes * (world - 1) <= 4 MiB``
    (``nbytes``: one rank's input; :func:`iris.ccl.inbox.use_inbox`), else pull. Upstream's names
    ("persistent", "partitioned": work distributions of its tiled AMD kernels) also pick by size.

    Examples
    --------
    >>> choose_gather_variant(None, 1 << 20, 4), choose_gather_variant("partitioned", 2 << 20, 4)
    ('push', 'pull')
    """
    if requested in ALL_GATHER_VARIANTS:
        return requested
    return "push" if use_inbox(nbytes, world) else "pull"
