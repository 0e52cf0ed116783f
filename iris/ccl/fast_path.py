"""The eager fast path: a collective called again with the same tensors relaunches its kernel directly.

Why: called in a host loop (as a notebook or an eager model calls it), ``ctx.ccl.all_reduce`` cost 63-69 µs
per call on 2xH200 where its kernel takes under 5 µs: the host path (argument checks, the size rule, the
workspace lookup, and above all Triton's Python launcher binding and specialising a dozen arguments and
asking the driver about every pointer) cost more than the work. A repeated call needs none of it: the
checks passed, the workspace exists, the kernel is compiled for exactly these arguments.

So the first call with a :func:`call_key` (the tensors' addresses, shapes, strides and dtypes, and the
arguments that choose the algorithm) takes the full path and records a :class:`BoundLaunch` in its
workspace (:func:`launch`); a later call with that key only relaunches it (:func:`replay`). Because the key
holds the addresses, everything a check or the size rule concluded still holds, and so does Triton's
specialisation (alignment) of the compiled kernel. On a GPU the recorded arguments are plain addresses, so
a record keeps no tensor alive; it lives in its workspace and goes with it. The stream is read at every call,
so replays can be captured in a CUDA graph. Under the CPU interpreter there is no compiled kernel to keep:
a replay launches through Triton with the call's own tensors, skipping only iris's host path.

Examples
--------
>>> key = call_key("all_reduce", (out, inp), config, async_op)       # doctest: +SKIP
>>> if replay(ctx, workspace, key, (out, inp)):                     # the same call as before: launched
...     return workspace
>>> launch(workspace, key, (out, inp), one_shot_kernel, grid, context, inp, out, ..., BLOCK=4096)
"""

from __future__ import annotations

import torch
from triton import knobs
from triton.runtime.driver import driver

from .config import ReduceOp
from .groups import group_ranks

MAX_LAUNCHES = 64  # records per workspace: a loop over many buffers must not grow memory without bound


def call_key(collective: str, tensors: tuple, config, async_op: bool, op=None, group=None) -> tuple | None:
    """What identifies a call for :func:`replay`, or None when it must take the full path.

    ``op`` other than SUM is refused by the full path, so it never replays. ``config`` is compared by its
    field values: a Config changed between calls is a new key. The key holds the group's ranks (None for
    every rank, :func:`iris.ccl.groups.group_ranks`): a call over another group is another call.

    Examples
    --------
    >>> call_key("barrier", (), None, False)
    ('barrier', (), None, False, None)
    """
    if not (op is None or op == ReduceOp.SUM or op == torch.distributed.ReduceOp.SUM):
        return None
    layout = tuple([(t.data_ptr(), t.dtype, t.shape, t.stride()) for t in tensors])
    return collective, layout, None if config is None else tuple(vars(config).values()), async_op, group_ranks(group)


def replay(ctx, workspace, key: tuple | None, tensors: tuple) -> bool:
    """Relaunch the call recorded under ``key`` in ``workspace`` (if it is ``ctx``'s); False when there is
    none (take the full path).

    Examples
    --------
    >>> replay(ctx, None, key, (out, inp))                # doctest: +SKIP
    False
    """
    if workspace is None or key is None or workspace.ctx is not ctx:
        return False
    bound = workspace.launches.get(key)
    if bound is None:
        return False
    bound(tensors)
    return True


def launch(workspace, key: tuple | None, tensors: tuple, kernel, grid: tuple, *args, **options) -> None:
    """``kernel[grid](*args, **options)`` through Triton, recorded under ``key`` for :func:`replay`.

    ``tensors`` are the call's own tensors (those in ``key``); any of them in ``args`` is replaced by the
    next call's at each replay. Every other argument is fixed: the workspace's tensors, sizes, constexprs.
    """
    compiled = kernel[grid](*args, **options)
    if key is None:
        return
    if len(workspace.launches) >= MAX_LAUNCHES:
        workspace.launches.pop(next(iter(workspace.launches)))  # the oldest
    workspace.launches[key] = BoundLaunch(kernel, compiled, grid, args, options, tensors)


class BoundLaunch:
    """One kernel launch with every argument fixed except the call's own tensors.

    Parameters
    ----------
    kernel : triton.JITFunction
        The kernel, as launched the first time.
    compiled : triton.compiler.CompiledKernel or None
        What that launch returned (None under the CPU interpreter).
    grid : tuple
        Programs per dimension.
    args, options : tuple, dict
        The first launch's positional and keyword arguments.
    tensors : tuple
        The first call's own tensors: under the interpreter, where ``args`` holds one of them, a replay puts
        the next call's (on a GPU their addresses, which the replay's key fixes, are enough).

    Attributes
    ----------
    direct : bool
        True on a GPU: replays call the compiled kernel's launcher, not Triton's Python dispatcher.
    replays : int
        Calls that took this fast path (read by tests and the benchmark, so the path taken is visible).
    """

    def __init__(self, kernel, compiled, grid: tuple, args: tuple, options: dict, tensors: tuple):
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.direct, self.replays = compiled is not None, 0
        if compiled is None:  # the interpreter: relaunch through Triton, with tensors (never the call's own)
            self.kernel, self.options, self.compiled = kernel, options, None
            self.slots = [(i, index) for i, arg in enumerate(args) for index, tensor in enumerate(tensors)
                          if arg is tensor]
            self.args = [None if any(i == slot for slot, _ in self.slots) else arg for i, arg in enumerate(args)]
            return
        # The launcher takes every parameter in order (it skips constexprs itself); pointers as addresses,
        # the call's own tensors' too: a replay's key holds the same addresses, so every argument is fixed.
        values = list(args) + [options.get(name, param.default) for name, param in
                               zip(kernel.arg_names[len(args):], kernel.params[len(args):], strict=True)]
        self.args = [value.data_ptr() if isinstance(value, torch.Tensor) else value for value in values]
        self.compiled = compiled
        self.run, self.function, self.metadata = compiled.run, compiled.function, compiled.packed_metadata

    def __call__(self, tensors: tuple) -> None:
        self.replays += 1
        if self.direct:
            stream = driver.active.get_current_stream(driver.active.get_current_device())
            enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
            # Triton's launch metadata is None without an enter hook (3.6-3.9): not asking saves about 1 µs of the
            # 11 µs this replay took on 4x H200 (2026-11-28), where the launcher itself took 8
            metadata = None if enter is None else self.compiled.launch_metadata(self.grid, stream, *self.args)
            self.run(*self.grid, stream, self.function, self.metadata, metadata, enter, leave, *self.args)
            return
        args = self.args.copy()
        for i, index in self.slots:
            args[i] = tensors[index]
        self.kernel[self.grid](*args, **self.options)
