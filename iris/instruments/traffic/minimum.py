"""The bytes common collectives must move between ranks: ``(world, world)`` matrices, ``need[a, b]`` the bytes
that must cross from rank a to rank b (the diagonal is 0: nothing needs to cross to stay home).

Pass one to :meth:`iris.instruments.traffic.TrafficMatrix.with_minimum`; its
:meth:`~iris.instruments.traffic.TrafficMatrix.crossing`
counts in the same terms. Sizes are per rank, in bytes, and must split evenly where the operation splits them.

Examples
--------
>>> all_gather(1024, world=2).tolist()
[[0, 1024], [1024, 0]]
>>> int(all_reduce(4096, world=4).sum()), int(all_reduce(4096, world=4, algorithm="one_shot").sum())
(24576, 49152)
"""

from __future__ import annotations

import numpy as np

ALL_REDUCE_ALGORITHMS = ("lower_bound", "one_shot")


def _between_every_pair(nbytes: int, world: int) -> np.ndarray:
    if world < 1:
        raise ValueError(f"world: at least 1 rank, got {world}")
    need = np.full((world, world), int(nbytes), dtype=np.int64)
    np.fill_diagonal(need, 0)
    return need


def _share(nbytes: int, parts: int, what: str) -> int:
    if nbytes < 0 or int(nbytes) != nbytes:
        raise ValueError(f"{what}: a whole number of bytes >= 0, got {nbytes!r}")
    if nbytes % parts:
        raise ValueError(f"{what}: {nbytes} bytes do not split into {parts} equal parts; give a size that does")
    return int(nbytes) // parts


def all_gather(bytes_per_rank: int, world: int) -> np.ndarray:
    """Every rank's ``bytes_per_rank`` shard must reach every other rank: ``need[a, b] = bytes_per_rank``.

    Examples
    --------
    >>> all_gather(8, 3).tolist()
    [[0, 8, 8], [8, 0, 8], [8, 8, 0]]
    """
    return _between_every_pair(_share(bytes_per_rank, 1, "bytes_per_rank"), world)


def reduce_scatter(bytes_per_rank: int, world: int) -> np.ndarray:
    """Each rank holds ``bytes_per_rank`` of input; rank b keeps the sum of block b (``bytes_per_rank / world``),
    so every other rank's block b must reach it: ``need[a, b] = bytes_per_rank / world``.

    Examples
    --------
    >>> reduce_scatter(64, 2).tolist()
    [[0, 32], [32, 0]]
    """
    return _between_every_pair(_share(bytes_per_rank, world, "bytes_per_rank"), world)


def all_to_all(bytes_per_rank: int, world: int) -> np.ndarray:
    """Each rank's ``bytes_per_rank`` of input is ``world`` equal chunks, chunk b for rank b:
    ``need[a, b] = bytes_per_rank / world``.

    Examples
    --------
    >>> all_to_all(64, 4)[0].tolist()
    [0, 16, 16, 16]
    """
    return _between_every_pair(_share(bytes_per_rank, world, "bytes_per_rank"), world)


def all_reduce(nbytes: int, world: int, algorithm: str = "lower_bound") -> np.ndarray:
    """Every rank holds ``nbytes`` and ends with the sum.

    ``algorithm="lower_bound"`` (default): the least any algorithm moves, a reduce-scatter then an all-gather,
    ``2 * nbytes / world`` from each rank to each other (each rank sends and receives ``2 (world - 1) / world *
    nbytes``); ``"one_shot"``: what a one-shot all-reduce moves, every rank's whole buffer to every other rank
    (``need[a, b] = nbytes``), the fastest for small messages but ``world / 2`` times the lower bound.

    Examples
    --------
    >>> all_reduce(64, 2).tolist(), all_reduce(64, 2, algorithm="one_shot").tolist()
    ([[0, 64], [64, 0]], [[0, 64], [64, 0]])
    """
    if algorithm not in ALL_REDUCE_ALGORITHMS:
        raise ValueError(f"algorithm={algorithm!r}: use one of {', '.join(map(repr, ALL_REDUCE_ALGORITHMS))}")
    if algorithm == "one_shot":
        return _between_every_pair(_share(nbytes, 1, "nbytes"), world)
    return _between_every_pair(2 * _share(nbytes, world, "nbytes"), world)
