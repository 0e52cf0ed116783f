"""broadcast: every rank's output becomes the root's input.

As ``torch.distributed.broadcast``, in either of upstream Iris's spellings (:mod:`iris.ccl.rooted`): in place,
``broadcast(tensor, src=0)``, the root's tensor going into every rank's; or ``broadcast(output, input, src=0)``,
the root's input going into every rank's output (the other ranks' inputs are not read). ``src`` is a rank of the
group. Two algorithms, ``Config(broadcast_variant="push" | "copy_engines")``:

* ``push``: one kernel. Every rank tells the root that it arrived (its output may be overwritten), the root writes
  its input straight into every rank's output (posted stores, every program its blocks) and tells them it is
  there. One link round trip and no scratch, whatever the size.
* ``copy_engines`` (GPUs, large messages; ours): the root copies its input into every output by peer-to-peer
  memcpys between two device barriers; no kernel moves the data and no SM is taken.

Size rule (:func:`iris.ccl.rules.choose_rooted_variant`): copy_engines on GPUs where all_gather takes them
(``nbytes >= 4 MiB * (world - 1) ** 2``), else push. The root's output and input may be one tensor, or separate;
no other overlap. :mod:`iris.ccl.scatter` runs the same kernel with a chunk per rank.

Examples
--------
>>> t = ctx.full((4, 3), float(ctx.cur_rank))          # doctest: +SKIP
>>> ctx.ccl.broadcast(t, src=1)                          # t == 1.0 on every rank
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..language.sync import announce, await_all
from .config import Config
from .fast_path import call_key, launch, replay
from .flag_slots import ARRIVED, DONE, SLOTS
from .groups import GroupContext, kernel_members
from .launch import block_size, cdiv, check_tensors, hint, overlaps, programs
from .rooted import (
    arrive_at,
    hear_from,
    kernel_for,
    output_and_input,
    positional,
    root_of,
    rooted_copy_engines,
    rooted_variant,
)
from .tuning import scratch_runner, tuned_config
from .workspace import Workspace, reuse_or_allocate


@triton.jit
def root_push_kernel(context, inp, inp_step, out, flags, epochs, n, root: tl.constexpr, rank: tl.constexpr,
                     world: tl.constexpr, rank_start: tl.constexpr, rank_stride: tl.constexpr,
                     num_ranks: tl.constexpr, BLOCK: tl.constexpr, COPY_OWN: tl.constexpr, HINT: tl.constexpr):
    # Member i's output gets the root's ``inp + i * inp_step``: inp_step 0 broadcasts, n scatters.
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    epoch = tl.load(epochs + pid) + 1
    arrive_at(ctx, flags, epoch, pid, num_programs, root)
    if rank == root:
        await_all(ctx, flags, ARRIVED, epoch, pid, num_programs)  # every output may be overwritten
        for block in range(pid, tl.cdiv(n, BLOCK), num_programs):
            offs = block * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            for i in tl.static_range(1, world + 1):
                member = (rank + i) % world  # the peers first, every root starting with the next one
                if member != rank or COPY_OWN:
                    value = tl.load(inp + member * inp_step + offs, mask=mask)
                    if member == rank:
                        tl.store(out + offs, value, mask=mask)
                    else:
                        tl.store(ctx.as_remote(out + offs, member, mask, HINT), value, mask=mask)
        announce(ctx, flags, DONE, epoch, pid, num_programs)  # after every store of this program
    else:
        hear_from(flags, DONE, epoch, pid, num_programs, root, world)
    tl.store(epochs + pid, epoch)


def launch_root_push(collective: str, ctx, members, call, tensors, workspace, out, inp, inp_step: int, n: int,
                     root: int, config: Config) -> Workspace:
    """Launch :func:`root_push_kernel` for ``collective`` (broadcast, scatter): member i's ``out`` gets the root's
    ``inp`` from element ``i * inp_step`` on, ``n`` elements (contiguous tensors, read flat); the root copies its
    own piece unless it is already there. The tensors go to the kernel as they are, so that a replay under the
    interpreter (:mod:`iris.ccl.fast_path`) puts the next call's in their place."""
    block = block_size(ctx, config)
    grid = programs(ctx, config, cdiv(n, block))
    key = (collective, "push", n, inp.dtype, grid, block, members.key)
    workspace = reuse_or_allocate(ctx, workspace, key, grid, SLOTS, members=members)
    own = inp.data_ptr() + members.rank * inp_step * inp.element_size()
    kernel, extra = kernel_for(ctx, config, root_push_kernel, inp.element_size(), block)
    launch(workspace, call, tensors, kernel, (grid,), ctx.get_device_context(), inp, inp_step, out,
           workspace.flags, workspace.epochs, n, root=root, **members.kernel_args(), BLOCK=block,
           COPY_OWN=own != out.data_ptr(), HINT=hint((out, 0)), num_warps=config.num_warps, **extra)
    return workspace


def broadcast(*args, ctx=None, src=0, group=None, async_op=False, config=None, workspace=None) -> Workspace:
    """Copy the root's tensor into every rank's; collective over ``group``.

    Parameters
    ----------
    *args
        The tensors: ``(tensor,)`` in place, the root's tensor the input and every rank's the output, or ``(output,
        input)`` of one shape and dtype (only the root's input is read), contiguous, on the heap; then, as
        upstream's function takes them, the context and the root (``broadcast(tensor, ctx, 0)``).
    ctx : iris.Iris, optional
        The context, if not given by position.
    src : int
        The root: a rank of the group (``group=None``: of the world).
    group : torch.distributed.ProcessGroup, optional
        None or ``dist.group.WORLD``: every rank; else its members, who alone call (:mod:`iris.ccl.groups`).
    async_op : bool
        True: returns at once as the others; ``wait()`` on the result is a device barrier over the group.
    config : Config, optional
        ``broadcast_variant`` picks the algorithm (None: by size); ``block_size``, ``comm_sms``, ``num_warps``;
        ``use_gluon=True`` runs the push kernel's Gluon twin (:mod:`iris.ccl.gluon_rooted`).
    workspace : Workspace, optional
        From an earlier call with the same shapes (``ctx.ccl`` keeps one for you).

    Returns
    -------
    Workspace
        Pass it to the next call; also the Work handle of an ``async_op=True`` call.

    Examples
    --------
    >>> ws = iris.ccl.broadcast(t, ctx=ctx, src=0)        # doctest: +SKIP
    """
    tensors, ctx, src = positional("broadcast", args, ctx, src, 0)
    out, inp = output_and_input("broadcast", tensors)
    call = call_key(f"broadcast:{src}", (out, inp), config, async_op, group=group)
    if replay(ctx, workspace, call, (out, inp)):
        return workspace
    members = kernel_members(ctx, group, "broadcast")
    root = root_of(ctx, "broadcast", members, ("src", src))
    check_tensors(ctx, "broadcast", out, inp)
    if out.shape != inp.shape:
        raise ValueError(f"rank {ctx.cur_rank}: broadcast output {list(out.shape)} and input {list(inp.shape)} "
                         "must have one shape")
    if overlaps(out, inp) and out.data_ptr() != inp.data_ptr():
        raise ValueError(f"rank {ctx.cur_rank}: broadcast output overlaps its input other than as the same tensor; "
                         "use broadcast(tensor) in place or separate tensors")
    n = inp.numel()
    config = tuned_config(ctx, "broadcast", config, inp, members,
                          scratch_runner(ctx, broadcast, out, inp, src=src, group=group)).with_defaults()
    variant = rooted_variant(ctx, config, "broadcast", n * inp.element_size(), members.size)
    if variant == "copy_engines":
        def copies():
            if members.rank != root:
                return
            for index, peer in enumerate(members.ranks):
                target = out if index == root else ctx.as_remote(out, peer)
                if target.data_ptr() != inp.data_ptr():
                    target.copy_(inp)

        key = ("broadcast", variant, n, inp.dtype, 1, None, members.key)
        return rooted_copy_engines(ctx, members, workspace, key, copies)
    return launch_root_push("broadcast", ctx, members, call, (out, inp), workspace, out, inp, 0, n, root, config)
