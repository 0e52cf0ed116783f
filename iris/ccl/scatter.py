"""scatter: rank i's output becomes chunk i of the root's input.

As ``torch.distributed.scatter`` with the chunks in one tensor (upstream Iris's form): the root's input is
``(world * M, ...)``, every rank's output ``(M, ...)``, rank i getting rows ``[i * M, (i + 1) * M)``; only the root's
input is read. ``src`` is a rank of the group. The algorithms are broadcast's (:mod:`iris.ccl.broadcast`,
``Config(broadcast_variant=...)``): ``push``, one kernel in which the root writes chunk i straight into rank i's
output once rank i said it arrived; ``copy_engines`` on GPUs for large chunks, peer-to-peer memcpys between two
device barriers. The output must not overlap the input, except the root's output being its own chunk.

Examples
--------
>>> inp = ctx.arange(2 * ctx.num_ranks, dtype=torch.float32).view(-1, 2); out = ctx.zeros(1, 2)  # doctest: +SKIP
>>> ctx.ccl.scatter(out, inp, src=0)              # rank i: out == [[2 i, 2 i + 1]]
"""

from __future__ import annotations

from .broadcast import launch_root_push
from .fast_path import call_key, replay
from .groups import kernel_members
from .launch import check_tensors
from .rooted import check_pieces, root_of, rooted_copy_engines, rooted_variant
from .tuning import scratch_runner, tuned_config
from .workspace import Workspace


def scatter(output_tensor, input_tensor, ctx, src=0, group=None, async_op=False, config=None,
            workspace=None) -> Workspace:
    """Send chunk i of the root's ``input_tensor`` (along dim 0) into rank i's ``output_tensor``; collective.

    Parameters
    ----------
    output_tensor : torch.Tensor
        ``(M, ...)``, contiguous, on the heap.
    input_tensor : torch.Tensor
        ``(world * M, ...)`` (``world``: the group's size), same dtype, contiguous, on the heap; read on the root.
    ctx : iris.Iris
    src : int
        The root: a rank of the group.
    group, async_op, config, workspace
        As :func:`iris.ccl.broadcast`.

    Returns
    -------
    Workspace

    Examples
    --------
    >>> ws = iris.ccl.scatter(out, inp, ctx, src=1)     # doctest: +SKIP
    """
    out, inp = output_tensor, input_tensor
    call = call_key(f"scatter:{src}", (out, inp), config, async_op, group=group)
    if replay(ctx, workspace, call, (out, inp)):
        return workspace
    members = kernel_members(ctx, group, "scatter")
    root = root_of(ctx, "scatter", members, ("src", src))
    check_tensors(ctx, "scatter", out, inp)
    world, n = members.size, out.numel()
    check_pieces(ctx, "scatter", inp, out, members)
    config = tuned_config(ctx, "scatter", config, out, members,  # keyed by a piece: what the root sends each rank
                          scratch_runner(ctx, scatter, out, inp, src=src, group=group)).with_defaults()
    variant = rooted_variant(ctx, config, "scatter", n * inp.element_size(), world)
    if variant == "copy_engines":
        def copies():
            if members.rank != root:
                return
            chunks = inp.view(world, -1)
            for index, peer in enumerate(members.ranks):
                target = (out if index == root else ctx.as_remote(out, peer)).view(-1)
                if target.data_ptr() != chunks[index].data_ptr():
                    target.copy_(chunks[index])

        key = ("scatter", variant, n, inp.dtype, 1, None, members.key)
        return rooted_copy_engines(ctx, members, workspace, key, copies)
    return launch_root_push("scatter", ctx, members, call, (out, inp), workspace, out, inp, n, n, root, config)
