"""Named operations: what a kernel launch was for, said by whoever knows (the backend, DDP, FSDP, a user).

A training step launches dozens of collective kernels, and a kernel's name (``one_shot_kernel``) says nothing of
why it ran. The code that calls a collective knows: the ``iris`` torch.distributed backend knows the operation
(``all_reduce`` of 17 KiB over 2 ranks), and DDP's bucket hook, FSDP's communication objects and a module's
hooks know what it carries (``DDP bucket 0``, its parameters). Each says so with a context manager here, and the
instruments read :func:`current` where they already look: the traffic recorder at each launch, the race checker
at each access site, the stepper's gate before each access; device tracing listens for each operation's start and
end (:func:`add_listener`) and puts it on the timeline. Outside an operation :func:`current` is None and nothing
changes.

Two kinds of context, nested:

* :func:`about` (``"DDP bucket 0"``, with a ``detail`` such as the parameters' names): what the operations inside
  carry; the innermost one is taken. :func:`push_about` / :func:`pop_about` do the same where a ``with`` cannot
  span it (a module's backward begins in one hook and ends in another);
* :func:`operation` (``"all_reduce"``, its bytes, its ranks): one collective, named after the innermost ``about``
  at its start. The innermost operation is :func:`current`.

The state is one stack per process, not per thread: autograd may run a backward hook (DDP's bucket hook, which
calls the collective) on a thread of its own, while the step's own thread waits; the kernels of an operation are
launched on the thread that called it.

Examples
--------
>>> with about("DDP bucket 0", detail="head.weight, head.bias"):
...     with operation("all_reduce", nbytes=2176, ranks=(0, 1)) as op:
...         current().label
'all_reduce · DDP bucket 0'
>>> op.describe()
'all_reduce · DDP bucket 0 (head.weight, head.bias): 2.1 KiB per rank over ranks 0, 1'
>>> current() is None
True
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import weakref
from typing import NamedTuple

from ..base.sizes import format_size

DETAIL_SHOWN = 160  # characters of an operation's detail that a one-line description keeps


class Operation(NamedTuple):
    """One named operation of this process (a collective of the ``iris`` backend, or one a user names).

    A named tuple: every collective of the backend makes one, and a tuple costs a fraction of a frozen dataclass to
    make (an eager GPU collective takes a few microseconds of host time all told). Its fields, by position or name:

    Parameters
    ----------
    name : str
        What runs, as torch.distributed calls it: ``"all_reduce"``, ``"all_gather_into_tensor"``, ``"send"``...
    about : str
        What it carries (the innermost :func:`about` at its start): ``"DDP bucket 0"``, ``"FSDP block"``; "" if
        nobody said.
    detail : str
        More about it: the parameters of a bucket or of a sharded module.
    nbytes : int
        The bytes this rank puts in (an all-gather's shard, an all-reduce's tensor, a reduce-scatter's whole input):
        what :mod:`iris.instruments.traffic.minimum` takes for the operation.
    ranks : tuple of int
        The global ranks that take part, in the group's order (root and peer positions are in this order).
    root : int or None
        The root's (or a send's destination's, a receive's source's) position in ``ranks``.
    number : int
        This process's count of operations before this one: tells two steps' operations of one name apart.
    """

    name: str
    about: str = ""
    detail: str = ""
    nbytes: int = 0
    ranks: tuple = ()
    root: int | None = None
    number: int = 0

    @property
    def label(self) -> str:
        """``all_reduce · DDP bucket 0``: the name and what it carries, what the views show.

        Examples
        --------
        >>> Operation("all_gather_into_tensor", "FSDP block").label, Operation("barrier").label
        ('all_gather_into_tensor · FSDP block', 'barrier')
        """
        return f"{self.name} · {self.about}" if self.about else self.name

    def describe(self) -> str:
        """One line: the label, the detail (cut at :data:`DETAIL_SHOWN` characters), the bytes and the ranks."""
        detail = self.detail if len(self.detail) <= DETAIL_SHOWN else self.detail[:DETAIL_SHOWN - 1] + "…"
        where = f" over ranks {', '.join(map(str, self.ranks))}" if self.ranks else ""
        root = f", root rank {self.ranks[self.root]}" if self.root is not None and self.ranks else ""
        return (f"{self.label}{f' ({detail})' if detail else ''}: {format_size(self.nbytes)} per rank{where}{root}")


_abouts: list[tuple[int, str, str]] = []  # (token, about, detail), innermost last
_NOBODY = (0, "", "")  # what nobody said
_operations: list[Operation] = []  # innermost last
_tokens = itertools.count(1)
_numbers = itertools.count()
_lock = threading.Lock()
_listeners: weakref.WeakSet = weakref.WeakSet()


def current() -> Operation | None:
    """The innermost operation running in this process, None outside every :func:`operation`.

    Examples
    --------
    >>> current() is None
    True
    """
    return _operations[-1] if _operations else None


def current_label() -> str:
    """:attr:`Operation.label` of :func:`current`, "" outside every operation (what recorders store)."""
    op = current()
    return op.label if op is not None else ""


def push_about(about: str, detail: str = "") -> int:
    """Say what the operations from now on carry, until :func:`pop_about` with the token returned (in any order
    among other pushes: a module's backward may end after another began).

    Examples
    --------
    >>> token = push_about("tensor parallel up (backward)")
    >>> pop_about(token)
    """
    with _lock:
        token = next(_tokens)
        _abouts.append((token, about, detail))
    return token


def pop_about(token: int) -> None:
    """Forget what :func:`push_about` said with ``token`` (nothing happens if it is gone already)."""
    with _lock:
        for index in range(len(_abouts) - 1, -1, -1):
            if _abouts[index][0] == token:
                del _abouts[index]
                return


@contextlib.contextmanager
def about(text: str, detail: str = ""):
    """The operations started inside carry ``text`` (and ``detail``), unless an inner :func:`about` says otherwise.

    Examples
    --------
    >>> with about("FSDP block"):
    ...     with operation("reduce_scatter_tensor", nbytes=64, ranks=(0, 1)):
    ...         current().about
    'FSDP block'
    """
    token = push_about(text, detail)
    try:
        yield
    finally:
        pop_about(token)


class _Running:
    """An operation while it runs: the context manager :func:`operation` returns (a class, not a generator: it runs
    around every collective of the backend, where a generator's overhead would show)."""

    __slots__ = ("op", "start")

    def __init__(self, op: Operation):
        self.op = op

    def __enter__(self) -> Operation:
        _operations.append(self.op)
        self.start = time.monotonic_ns()
        return self.op

    def __exit__(self, *exc) -> None:
        end = time.monotonic_ns()
        if _operations and _operations[-1] is self.op:
            _operations.pop()
        elif self.op in _operations:  # ended out of order (another thread's): still gone
            _operations.remove(self.op)
        if _listeners:
            for listener in list(_listeners):
                listener.operation_finished(self.op, self.start, end)


def operation(name: str, nbytes: int = 0, ranks=(), root: int | None = None) -> _Running:
    """Run the body as one named operation (:class:`Operation`), carrying the innermost :func:`about`; listeners
    (:func:`add_listener`) hear of it when it ends, with its start and end on the host's monotonic clock.

    Parameters
    ----------
    name : str
        What runs: torch.distributed's name of the collective.
    nbytes : int
        The bytes this rank puts in (see :attr:`Operation.nbytes`).
    ranks : sequence of int
        The global ranks taking part, in the group's order.
    root : int, optional
        The root's position in ``ranks``.

    Examples
    --------
    >>> with operation("broadcast", nbytes=16, ranks=(0, 1), root=0) as op:
    ...     pass
    >>> op.describe()
    'broadcast: 16 B per rank over ranks 0, 1, root rank 0'
    """
    said = _abouts[-1] if _abouts else _NOBODY
    return _Running(Operation(name, said[1], said[2], nbytes, tuple(ranks), root, next(_numbers)))


def add_listener(listener) -> None:
    """Tell ``listener`` of every operation that ends: ``listener.operation_finished(op, start_ns, end_ns)`` (host
    monotonic nanoseconds). Held weakly: a listener that is gone hears no more."""
    _listeners.add(listener)


def remove_listener(listener) -> None:
    """Stop telling ``listener`` (nothing happens if it was not listening)."""
    _listeners.discard(listener)
