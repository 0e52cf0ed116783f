"""The size rules: which algorithm a collective runs where no table row, tuning or caller chose one.

Measured rules, below the collectives that apply them and the tuner that starts its search from them
(:mod:`iris.ccl.tuning`), so that neither imports the other. On the GPUs measured the shipped tables decide
(``iris/ccl/tables``); these rules serve the others, and the first candidate of every tuning.

Examples
--------
>>> choose_variant(4 << 20, 2), choose_variant(1 << 20, 4), choose_gather_variant(None, 64 << 20, 2)
('one_shot', 'two_shot_push', 'pull')
"""

from __future__ import annotations

from .config import ALL_GATHER_VARIANTS, ALL_TO_ALL_VARIANTS, BROADCAST_VARIANTS, REDUCE_VARIANTS
from .inbox import use_inbox

ONE_SHOT_BYTES = 4 << 20  # one_shot while nbytes * (world - 1) ** 2 is at most this (see choose_variant)
PUSH_SCATTER_BYTES = 16 << 20  # reduce_scatter pushes up to this input size (see choose_scatter_variant)
COPY_ENGINE_BYTES = 4 << 20  # by copy engines from a peer's message of this * (world - 1) ** 2


def choose_variant(nbytes: int, world: int) -> str:
    """The all_reduce rule: one_shot while ``nbytes * (world - 1) ** 2 <= 4 MiB``, else two_shot_push.

    Measured on H200s (2026-11-28, benchmarks/RESULTS.md "Tuned collectives" and "allreduce against every peer"):
    on 2 GPUs one_shot won up to 4 MiB (bf16 4 MiB: 17.6 against 18.2 µs for two_shot_push) and two_shot_push from
    16 MiB (54.0 against two_shot's 57.9 and one_shot's 62.8); on 4 GPUs one_shot won at 256 KiB (7.3 against 8.2)
    and lost at 1 MiB (14.6 against 12.1), and two_shot_push beat two_shot and ring at every size from 1 MiB to
    256 MiB (16 MiB: 78.7 against 91.1 and 96.8). The square puts the crossover at 4 MiB on 2 ranks and 455 KiB on
    4 (vLLM switches at 512 KiB on 4 ranks); on 8 ranks (85 KiB) it is extrapolated, not measured.

    Examples
    --------
    >>> choose_variant(256 << 10, 4), choose_variant(64 << 20, 2), choose_variant(1 << 20, 1)
    ('one_shot', 'two_shot_push', 'one_shot')
    """
    if nbytes * max(world - 1, 1) ** 2 <= ONE_SHOT_BYTES:  # within the inboxes' cap too (use_inbox)
        return "one_shot"
    return "two_shot_push"


def choose_scatter_variant(requested: str | None, nbytes: int, world: int) -> str:
    """The reduce_scatter algorithm: ``requested`` if given, else push up to 16 MiB of input, then two_shot.

    Measured on H200s (2026-11-28): push won from 8 KiB to 16 MiB on 2 and 4 GPUs (bf16 256 KiB: 4.8 against 7.4 µs
    on 2, 5.2 against 6.3 on 4) and two_shot from 64 MiB (no extra traffic to wait for, and no inbox of twice the
    tensor).

    Examples
    --------
    >>> choose_scatter_variant(None, 1 << 20, 4), choose_scatter_variant(None, 64 << 20, 4)
    ('push', 'two_shot')
    """
    if requested is not None:
        return requested
    return "push" if nbytes <= PUSH_SCATTER_BYTES else "two_shot"


def use_copy_engines(message: int, world: int) -> bool:
    """Whether a collective whose every rank sends ``message`` bytes to each peer goes by the copy engines (on a
    backend that has them): from ``message >= 4 MiB * (world - 1) ** 2`` (see :func:`choose_gather_variant`).

    Examples
    --------
    >>> use_copy_engines(4 << 20, 2), use_copy_engines(16 << 20, 4), use_copy_engines(64 << 20, 4)
    (True, False, True)
    """
    return message >= COPY_ENGINE_BYTES * max(world - 1, 1) ** 2


def choose_gather_variant(requested: str | None, nbytes: int, world: int, copy_engines: bool = False) -> str:
    """The all_gather algorithm: ``requested`` if it is ours; else, where the backend has ``copy_engines`` (GPUs,
    and no Gluon kernel asked for), copy_engines from ``nbytes >= 4 MiB * (world - 1) ** 2``; else push while
    ``nbytes * (world - 1) <= 4 MiB`` (``nbytes``: one rank's input; :func:`iris.ccl.inbox.use_inbox`), else
    pull. Upstream's names ("persistent", "partitioned": work distributions of its tiled AMD kernels) also pick by
    size.

    The copy engines' crossover, measured on H200s (2026-11-28, benchmarks/RESULTS.md "copy engines" and
    "collectives against NCCL"): on 2 GPUs their pushes moved a 16 MiB output in 24.2 µs (with the variant's two
    barriers about 30) where pull took 35.9, and a 4 MiB output in 8.3 (about 14) where push took 11.4; on 4 GPUs,
    kept in step by a barrier a step, 571 µs for 256 MiB where pull took 657, and 177 for 64 MiB where pull took
    168. The square of the peers puts the crossover between those points: 4 MiB of input on 2 ranks, 36 on 4 (on
    8, 196: extrapolated, not measured).

    Examples
    --------
    >>> choose_gather_variant(None, 1 << 20, 4), choose_gather_variant("partitioned", 2 << 20, 4)
    ('push', 'pull')
    >>> choose_gather_variant(None, 64 << 20, 4, copy_engines=True), choose_gather_variant(None, 16 << 20, 4, True)
    ('copy_engines', 'pull')
    """
    if requested in ALL_GATHER_VARIANTS:
        return requested
    if copy_engines and use_copy_engines(nbytes, world):
        return "copy_engines"
    return "push" if use_inbox(nbytes, world) else "pull"


def choose_all_to_all_variant(requested: str | None, nbytes: int, world: int, gluon: bool = False,
                              copy_engines: bool = False) -> str:
    """The all_to_all algorithm: pull with ``gluon`` (the Gluon kernel's; all_to_all refuses another asked of it);
    else ``requested`` if given; else, where the backend has ``copy_engines``, copy_engines where each peer's chunk
    (``nbytes / world``) is large enough (:func:`use_copy_engines`, all_gather's rule for its input); else push while
    the bytes each rank writes into its peers' inboxes, ``nbytes * (world - 1) / world`` (``nbytes``: one rank's
    input), are at most 4 MiB (:func:`iris.ccl.inbox.use_inbox`'s cap, all_gather's push rule), else pull.

    Examples
    --------
    >>> choose_all_to_all_variant(None, 1 << 20, 4), choose_all_to_all_variant(None, 16 << 20, 4)
    ('push', 'pull')
    >>> choose_all_to_all_variant(None, 256 << 20, 4, copy_engines=True)
    'copy_engines'
    """
    if gluon:
        return "pull"
    if requested in ALL_TO_ALL_VARIANTS:
        return requested
    if copy_engines and use_copy_engines(nbytes // max(world, 1), world):
        return "copy_engines"
    return "push" if use_inbox(nbytes // max(world, 1), world) else "pull"


def choose_rooted_variant(requested: str | None, nbytes: int, world: int, copy_engines: bool = False) -> str:
    """broadcast's, scatter's and gather's algorithm: ``requested`` if given; else, where the backend has
    ``copy_engines``, copy_engines for messages of ``nbytes`` (the bytes one rank sends one peer) from
    :func:`use_copy_engines` (all_gather's crossover); else push, which keeps no inbox and so serves every size.

    Examples
    --------
    >>> choose_rooted_variant(None, 1 << 20, 2), choose_rooted_variant(None, 64 << 20, 2, copy_engines=True)
    ('push', 'copy_engines')
    """
    if requested in BROADCAST_VARIANTS:
        return requested
    return "copy_engines" if copy_engines and use_copy_engines(nbytes, world) else "push"


def choose_reduce_variant(requested: str | None, nbytes: int, world: int) -> str:
    """reduce's algorithm: ``requested`` if given (upstream's "one_shot" is push), else push (through the root's
    inbox) while the inbox rule holds (:func:`iris.ccl.inbox.use_inbox`: ``nbytes * (world - 1) <= 4 MiB``), else
    two_shot.

    Examples
    --------
    >>> choose_reduce_variant(None, 256 << 10, 4), choose_reduce_variant(None, 64 << 20, 2)
    ('push', 'two_shot')
    """
    if requested == "one_shot":  # upstream's name: every input reaches the root in one step, as push does here
        return "push"
    if requested in REDUCE_VARIANTS:
        return requested
    return "push" if use_inbox(nbytes, world) else "two_shot"
