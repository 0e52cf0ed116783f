"""What the collectives with a root share (broadcast, reduce, gather, scatter): their two spellings, the root's
check, the device-side handshake of one rank against the others, and their copy-engine path.

Upstream Iris's files spell them two ways: in place, ``broadcast(tensor, src=0)`` and ``reduce(tensor, dst=0)``
(the root's tensor is the input; every rank's is the output), and with an output and an input,
``broadcast(output, input, src=0)`` and ``reduce(output, input, root=0)``. :func:`output_and_input` reads either.
The root is a rank *of the group* (``group=None``: of the world), as upstream's ``src`` is.

The handshake: a rank's tensor may be written by another rank only once that rank's earlier work on it is done,
which its arrival in the call says. So a receiver first tells the sender it arrived (one release atomic), the
sender writes straight into the receiver's tensor (posted stores, no inbox and no copy) and then tells it that the
data is there. That is one link round trip in all, and the sender never waits for a receiver's reads.

Examples
--------
>>> output_and_input("broadcast", (t,))              # in place            # doctest: +SKIP
(t, t)
>>> output_and_input("broadcast", (out, inp))        # doctest: +SKIP
(out, inp)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..language.sync import flag_of, signal, wait_for
from .barrier import barrier_on
from .config import Config
from .flag_slots import ARRIVED
from .gluon_layouts import flat_layout, warp_threads
from .launch import has_copy_engines, overlaps
from .rules import choose_rooted_variant
from .workspace import Workspace, reuse_or_allocate


def output_and_input(collective: str, tensors: tuple) -> tuple:
    """``(output, input)`` from a call's positional tensors: one (in place: both are it) or two (output, input).

    Raises
    ------
    TypeError
        Naming the two spellings, for any other number of tensors or something that is not a tensor.
    """
    if len(tensors) in (1, 2) and all(isinstance(t, torch.Tensor) for t in tensors):
        return tensors[0], tensors[-1]
    kinds = ", ".join(type(t).__name__ for t in tensors) or "nothing"
    raise TypeError(f"{collective} takes (tensor) in place or (output, input), got ({kinds}); the root is a "
                    f"keyword: {collective}(tensor, {'src' if collective in ('broadcast', 'scatter') else 'dst'}=0)")


def positional(collective: str, args: tuple, ctx, root, default) -> tuple:
    """``(tensors, ctx, root)`` from a call's positional arguments, in upstream's orders: the tensors, then (in the
    function forms, ``iris.ccl.broadcast(tensor, ctx, src)``) the context, then the root; keywords otherwise.

    Raises
    ------
    TypeError
        A root given both by position and by keyword, something left over, or no context.

    Examples
    --------
    >>> positional("broadcast", (t, ctx, 1), None, 0, 0)           # doctest: +SKIP
    ((t,), ctx, 1)
    """
    count = next((i for i, arg in enumerate(args) if not isinstance(arg, torch.Tensor)), len(args))
    tensors, rest = tuple(args[:count]), list(args[count:])
    if rest and ctx is None and not isinstance(rest[0], int):
        ctx = rest.pop(0)
    if rest and isinstance(rest[0], int) and not isinstance(rest[0], bool):
        if root not in (None, default):
            raise TypeError(f"{collective}: the root was given twice, by position ({rest[0]}) and by keyword ({root})")
        root = rest.pop(0)
    if rest:
        raise TypeError(f"{collective}: unexpected positional arguments {rest!r}; give the tensors, then the root "
                        "(or use keywords)")
    if ctx is None:
        raise TypeError(f"{collective} needs the context: iris.ccl.{collective}(tensor, ctx, ...) or ctx=, or call "
                        f"ctx.ccl.{collective}(...)")
    return tensors, ctx, root


def check_pieces(ctx, collective: str, whole, piece, members) -> bool:
    """Checks of gather's and scatter's tensors: ``whole`` is ``world`` pieces shaped as ``piece`` along dim 0, and
    ``piece`` overlaps ``whole`` only as this rank's own piece; returns whether it is that piece (in place).

    Examples
    --------
    >>> check_pieces(ctx, "gather", out, inp, members)          # doctest: +SKIP
    False
    """
    world, rank = members.size, members.rank
    expected = (world * piece.shape[0], *piece.shape[1:]) if piece.dim() else (world,)
    if tuple(whole.shape) != expected:
        role = "output" if collective == "gather" else "input"
        raise ValueError(f"rank {ctx.cur_rank}: {collective} of pieces {list(piece.shape)} over {world} ranks needs "
                         f"an {role} of shape {list(expected)} (a piece per rank along dim 0), got "
                         f"{list(whole.shape)}")
    own = whole.data_ptr() + rank * piece.numel() * whole.element_size()
    if overlaps(whole, piece) and piece.data_ptr() != own:
        raise ValueError(f"rank {ctx.cur_rank}: {collective}'s tensors overlap other than as this rank's piece "
                         f"[{rank} * M:{rank + 1} * M] of the larger one; use that piece or separate tensors")
    return piece.data_ptr() == own


def root_of(ctx, collective: str, members, *names: tuple) -> int:
    """The root given under one of ``names`` (``(name, value)`` pairs, None for not given; default 0), checked
    against the group: its index in ``members`` (:class:`iris.ccl.groups.Members`).

    Examples
    --------
    >>> root_of(ctx, "reduce", members, ("dst", None), ("root", 1))          # doctest: +SKIP
    1
    """
    given = [(name, value) for name, value in names if value is not None]
    if len({value for _, value in given}) > 1:
        raise ValueError(f"rank {ctx.cur_rank}: {collective} got " + " and ".join(f"{n}={v}" for n, v in given)
                         + ": they name the same root (two spellings of upstream Iris); give one")
    name, root = given[0] if given else (names[0][0], 0)
    if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < members.size:
        where = "the group's" if members.group is not None else "the world's"
        raise ValueError(f"rank {ctx.cur_rank}: {collective} {name}={root!r}: give a rank of {where} "
                         f"{members.size} ranks, 0 to {members.size - 1} (a rank in the group, as upstream Iris)")
    return root


@triton.jit
def arrive_at(ctx, flags, epoch, pid, num_programs, root: tl.constexpr):
    """Tell ``root`` that this rank's program ``pid`` is in call ``epoch``: what its tensors held before may be
    overwritten (the root, too, tells itself, so that it may wait for every rank at once with ``await_all``)."""
    tl.debug_barrier()  # on a GPU: every thread is in the call before the root may write
    signal(ctx, flag_of(flags, ARRIVED, ctx.rank, pid, num_programs, ctx.world_size), epoch, root)


@triton.jit
def hear_from(flags, slot, epoch, pid, num_programs, source: tl.constexpr, world: tl.constexpr):
    """Wait until rank ``source``'s program ``pid`` signalled ``slot`` of call ``epoch`` to this rank."""
    wait_for(flag_of(flags, slot, source, pid, num_programs, world), epoch)


def rooted_copy_engines(ctx, members, workspace: Workspace | None, key: tuple, copies) -> Workspace:
    """The copy-engine path of a rooted collective: a device barrier (every receiver is done with what its tensor
    held), ``copies()`` (this rank's peer-to-peer memcpys, on its stream; none on most ranks), a device barrier
    (every piece has landed). Collective over ``members``; the barriers' flags live in the returned workspace.
    """
    workspace = reuse_or_allocate(ctx, workspace, key, 1, 1, members=members)
    barrier_on(ctx, workspace, members)
    copies()
    barrier_on(ctx, workspace, members)
    return workspace


def rooted_variant(ctx, config: Config, collective: str, nbytes: int, world: int) -> str:
    """broadcast's, scatter's or gather's algorithm for this call (:func:`iris.ccl.rules.choose_rooted_variant`);
    the copy engines asked of a Gluon call are refused: they run no kernel, Gluon's or Triton's."""
    if config.use_gluon and config.broadcast_variant == "copy_engines":
        raise ValueError(f"rank {ctx.cur_rank}: {collective} with Config(broadcast_variant='copy_engines', "
                         "use_gluon=True): the copy engines run no kernel, Gluon's or Triton's; use "
                         "broadcast_variant='push' or None with Gluon, or use_gluon=False")
    return choose_rooted_variant(config.broadcast_variant, nbytes, world, has_copy_engines(ctx, config))


def kernel_for(ctx, config: Config, kernel, element_size: int, block: int) -> tuple:
    """``(kernel, extra options)``: ``kernel`` itself, or with ``config.use_gluon`` its Gluon twin (same name with
    ``gluon_`` in front, in :mod:`iris.ccl.gluon_rooted`, defined on first use) and the twin's ``LAYOUT``."""
    if not config.use_gluon:
        return kernel, {}
    from . import gluon_rooted

    layout = flat_layout(element_size, block, config.num_warps, warp_threads(ctx))
    return getattr(gluon_rooted, f"gluon_{kernel.__name__}"), {"LAYOUT": layout}
