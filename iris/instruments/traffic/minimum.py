"""The bytes the collectives must move between ranks: ``(world, world)`` matrices, ``need[a, b]`` the bytes
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
REDUCE_ALGORITHMS = ("lower_bound", "direct")


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


def _from_root(nbytes: int, world: int, root: int, what: str) -> np.ndarray:
    _check_rank(root, world, "root")
    need = np.zeros((world, world), dtype=np.int64)
    need[root, :] = _share(nbytes, 1, what)
    need[root, root] = 0
    return need


def _check_rank(rank: int, world: int, name: str) -> None:
    if world < 1:
        raise ValueError(f"world: at least 1 rank, got {world}")
    if not 0 <= rank < world:
        raise ValueError(f"{name}={rank}: a rank from 0 to {world - 1}")


def broadcast(nbytes: int, world: int, root: int = 0) -> np.ndarray:
    """The root's ``nbytes`` must reach every other rank: ``need[root, b] = nbytes``. (A tree or a pipeline may
    relay through other ranks, moving as much in all but less out of the root; this is what a root sending to every
    rank moves, our kernels' algorithm.)

    Examples
    --------
    >>> broadcast(8, 3, root=1).tolist()
    [[0, 0, 0], [8, 0, 8], [0, 0, 0]]
    """
    return _from_root(nbytes, world, root, "nbytes")


def scatter(bytes_per_rank: int, world: int, root: int = 0) -> np.ndarray:
    """Chunk b of the root's input (``bytes_per_rank``, the size of one rank's output) must reach rank b.

    Examples
    --------
    >>> scatter(16, 2).tolist()
    [[0, 16], [0, 0]]
    """
    return _from_root(bytes_per_rank, world, root, "bytes_per_rank")


def gather(bytes_per_rank: int, world: int, root: int = 0) -> np.ndarray:
    """Every rank's ``bytes_per_rank`` input must reach the root: ``need[a, root] = bytes_per_rank``.

    Examples
    --------
    >>> gather(16, 3, root=2).tolist()
    [[0, 0, 16], [0, 0, 16], [0, 0, 0]]
    """
    return scatter(bytes_per_rank, world, root).T.copy()


def reduce(nbytes: int, world: int, root: int = 0, algorithm: str = "lower_bound") -> np.ndarray:
    """Every rank holds ``nbytes``; the root ends with the sum.

    ``algorithm="lower_bound"`` (default): a reduce-scatter, then every rank's summed chunk to the root, ``nbytes /
    world`` from each rank to each other plus as much again into the root (the root receives ``(world - 1) / world
    * nbytes`` twice: no rank receives more; the two_shot variant's traffic); ``"direct"``: every rank's whole input
    to the root (``need[a, root] = nbytes``), the push variant's, the fastest for small messages.

    Examples
    --------
    >>> reduce(64, 2).tolist(), reduce(64, 2, algorithm="direct").tolist()
    ([[0, 32], [64, 0]], [[0, 0], [64, 0]])
    """
    if algorithm not in REDUCE_ALGORITHMS:
        raise ValueError(f"algorithm={algorithm!r}: use one of {', '.join(map(repr, REDUCE_ALGORITHMS))}")
    if algorithm == "direct":
        return gather(nbytes, world, root)
    need = reduce_scatter(nbytes, world)
    need[:, root] += need[:, root]
    need[root, root] = 0
    return need


def send(nbytes: int, world: int, src: int, dst: int) -> np.ndarray:
    """One message of ``nbytes`` from ``src`` to ``dst``: ``need[src, dst] = nbytes``.

    Examples
    --------
    >>> send(32, 2, src=0, dst=1).tolist()
    [[0, 32], [0, 0]]
    """
    _check_rank(src, world, "src")
    _check_rank(dst, world, "dst")
    need = np.zeros((world, world), dtype=np.int64)
    if src != dst:
        need[src, dst] = _share(nbytes, 1, "nbytes")
    return need


# What each named operation of the iris backend must move (iris.instruments.operations.Operation.name), as the
# functions above count it for the operation's own ranks. all_to_all is left out: its minimum depends on the split
# sizes, which the name does not carry; a receive is left out, its send counts the message.
_OF_OPERATION = {
    "all_reduce": lambda nbytes, n, root: all_reduce(nbytes, n),
    "all_gather": lambda nbytes, n, root: all_gather(nbytes, n),
    "all_gather_into_tensor": lambda nbytes, n, root: all_gather(nbytes, n),
    "reduce_scatter": lambda nbytes, n, root: reduce_scatter(nbytes, n),
    "reduce_scatter_tensor": lambda nbytes, n, root: reduce_scatter(nbytes, n),
    "broadcast": lambda nbytes, n, root: broadcast(nbytes, n, root),
    "reduce": lambda nbytes, n, root: reduce(nbytes, n, root),
    "gather": lambda nbytes, n, root: gather(nbytes, n, root),
    "scatter": lambda nbytes, n, root: scatter(nbytes, n, root),
    "send": lambda nbytes, n, root: send(nbytes, n, src=0, dst=1),  # its ranks: (sender, receiver)
}


def of_operation(operation, world: int) -> np.ndarray | None:
    """What a named operation (:class:`iris.instruments.operations.Operation`) must move, as a ``(world, world)``
    matrix over every rank of the context (its own ranks placed where they are); None where no minimum is known
    (an all-to-all, a receive, a barrier) or its bytes do not split as the operation splits them.

    Examples
    --------
    >>> from iris.instruments.operations import Operation
    >>> of_operation(Operation("all_gather_into_tensor", nbytes=8, ranks=(0, 2)), world=3).tolist()
    [[0, 0, 8], [0, 0, 0], [8, 0, 0]]
    >>> of_operation(Operation("all_reduce", nbytes=4, ranks=(0, 1, 2)), world=3) is None   # 4 B: no 3 equal shares
    True
    >>> of_operation(Operation("all_to_all_single", nbytes=64, ranks=(0, 1)), world=2) is None
    True
    """
    count = _OF_OPERATION.get(operation.name)
    ranks = list(operation.ranks)
    if count is None or not ranks or max(ranks) >= world:
        return None
    try:
        need = count(operation.nbytes, len(ranks), operation.root or 0)
    except ValueError:  # bytes that do not split into the operation's shares
        return None
    everyone = np.zeros((world, world), dtype=np.int64)
    everyone[np.ix_(ranks, ranks)] = need
    return everyone
