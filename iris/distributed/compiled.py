"""Collectives that torch.compile traces whole: ``torch.ops.iris.all_reduce``, ``all_gather``, ``reduce_scatter``
and ``wait_tensor``, custom operators with fake-tensor rules, run by our kernels (upstream Iris's
``iris.compile.functional_collectives``, whose path is this module).

torch.compile traces a function by running it on fake tensors, which have a shape and a dtype but no data; a call
it cannot trace splits the graph, and ``fullgraph=True`` refuses that. Each collective here is registered with
:func:`torch.library.custom_op`, so it is one node of the graph: its fake rule says what shape and dtype come out,
and when the graph runs, its body runs :mod:`iris.ccl`'s kernels over the context given to :func:`setup`, or, where
none was set up, the context of the ``"iris"`` backend of torch.distributed (:func:`iris.distributed.context`).

The operators are functional, as torch's ``_c10d_functional`` ones: each returns a new tensor on the input's device
and leaves the input as it was. Inputs come from the caller's memory, so each call stages its input through heap
buffers (:class:`~iris.distributed.staging.Staging`), runs there, and copies the result out. Every rank makes the
same calls in the same order with tensors of the same shape and dtype, as with any collective.

=====================================  =====================  ===========================================
operator                               result                 torch.distributed's twin
=====================================  =====================  ===========================================
``all_reduce(x, op="sum")``            ``x``'s shape          ``all_reduce``
``all_gather(x, world_size)``          ``(world * M, ...)``   ``all_gather_into_tensor`` (along dim 0)
``reduce_scatter(x, world_size, op)``  ``(M / world, ...)``   ``reduce_scatter_tensor`` (along dim 0)
``wait_tensor(x)``                     a copy of ``x``        ``wait_tensor``
=====================================  =====================  ===========================================

``op`` is one of torch's names: ``sum``, ``avg``, ``product``, ``min``, ``max``, ``band``, ``bor``, ``bxor``. Sums
and averages of float32, float16 and bfloat16 run on our all_reduce and reduce_scatter kernels (their variant as
the config asks, else chosen by size); the other operators and dtypes gather every rank's tensor with our all_gather
kernel and reduce with torch, in rank order, as the ``"iris"`` backend does (:mod:`iris.distributed.reductions`).
``world_size`` may be left out (the context's); given, it must be the context's. Every operator also takes
``context=``, the :attr:`IrisCompileContext.name` of a context other than the default, as torch's functional
collectives take a group's name: a graph holds strings, not contexts.

all_reduce (sum, avg), all_gather and reduce_scatter (sum, avg) have gradients (all_reduce's is the all_reduce of
the gradient, as upstream's; all_gather's a reduce_scatter; reduce_scatter's an all_gather; wait_tensor's the
gradient itself), so a compiled training step's backward runs on our kernels too. Each operator is marked as
having a side effect, so that no graph drops a collective whose result it does not use: the other ranks would wait
for it.

Upstream has two spellings of the set-up, on two branches: ``setup(ctx, config=)`` returning an
:class:`IrisCompileContext` and ``set_context(ctx)`` / ``get_context()``; both are here.

Examples
--------
>>> import iris, torch
>>> from iris.compile import functional_collectives as fc       # this module, by upstream's path
>>> ctx = iris.iris("256MiB")                                     # doctest: +SKIP
>>> fc.setup(ctx)                                                  # doctest: +SKIP
>>> @torch.compile(fullgraph=True)
... def layer(x, w):
...     return torch.relu(torch.ops.iris.all_reduce(x @ w))
>>> layer(torch.ones(4, 8), torch.ones(8, 8))     # 2 ranks: every element 16.0   # doctest: +SKIP
>>> fc.all_gather(torch.full((2, 3), float(ctx.cur_rank))).shape                  # doctest: +SKIP
torch.Size([4, 3])
"""

from __future__ import annotations

import itertools
import threading
import weakref

import torch
import torch.distributed as dist

from ..ccl.chunks import chunk_size, owned_range
from ..ccl.tuning import untuned
from ..runtime.context import Iris
from . import reductions, registration
from .staging import Staging

RedOp = reductions.RedOp
# torch's names of the operators (torch.distributed._functional_collectives takes "sum", "avg", ...), lower case
OPS = {name.lower(): kind for name, kind in RedOp.__members__.items() if kind in reductions.GATHERED}
DIFFERENTIABLE = ("sum", "avg")

_names = itertools.count()
_registry: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # name -> IrisCompileContext
_default: IrisCompileContext | None = None  # setup()'s: kept alive until the next setup
_of_backend: IrisCompileContext | None = None  # made for the "iris" backend's context when nothing was set up


class IrisCompileContext:
    """The context the compiled collectives run on, with its staging buffers and workspaces (upstream's name).

    Parameters
    ----------
    iris_instance : iris.Iris
        The context whose heap and kernels the collectives use; every rank of it takes part in every call.
    config : iris.ccl.Config, optional
        Passed to every collective (each reads its own fields: ``all_reduce_variant``, ``all_gather_variant``,
        ``reduce_scatter_variant``...); None: the collectives' own choice, as ``ctx.ccl``'s.

    Attributes
    ----------
    ctx : iris.Iris
    config : iris.ccl.Config or None
    name : str
        What the operators' ``context=`` argument names this context by (unique in this process).

    Examples
    --------
    >>> tp = IrisCompileContext(ctx)                                    # doctest: +SKIP
    >>> torch.ops.iris.all_reduce(x, "sum", tp.name)                  # on tp rather than the default
    """

    def __init__(self, iris_instance: Iris, config=None):
        if not isinstance(iris_instance, Iris):
            raise TypeError(f"the compiled collectives run on an iris.Iris context (iris.iris(...)), not a "
                            f"{type(iris_instance).__name__}")
        self.ctx = iris_instance
        self.config = config
        self.name = f"iris-compile-{next(_names)}"
        self.staging = Staging(iris_instance)
        self._workspaces: dict[tuple, object] = {}
        # One call at a time: the staging buffers are shared by the calls, and a collective's calls must come in the
        # same order on every rank anyway (two threads of one rank issuing collectives could not keep it).
        self._lock = threading.RLock()
        _registry[self.name] = self

    def __repr__(self) -> str:
        return f"IrisCompileContext({self.name!r}, rank={self.ctx.cur_rank}, num_ranks={self.ctx.num_ranks})"

    # upstream keeps one Config per collective; here each collective reads its own fields of the one config
    @property
    def ag_config(self):
        """all_gather's config (the context's)."""
        return self.config

    @property
    def rs_config(self):
        """reduce_scatter's config (the context's)."""
        return self.config

    def clear_workspaces(self) -> None:
        """Forget the workspaces kept per shape (their heap memory comes back when no rank holds them)."""
        with self._lock:
            self._workspaces.clear()

    # -- the collectives, eagerly (the operators' bodies) ------------------------------------------------------
    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """``op`` over every rank's ``tensor``, as a new tensor of its shape."""
        plan = self._plan("all_reduce", op, tensor.dtype)
        self._check_device("all_reduce", tensor)
        out = torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)
        if tensor.numel() == 0:
            return out
        with self._lock:
            if plan.kind == "gathered":
                out.copy_(reductions.reduce_rows(self._rows(tensor), plan))
                return out
            n = tensor.numel()
            staged = self.staging.put("input", tensor, (n,))
            summed = self.staging.view("output", (n,), tensor.dtype)
            key = ("all_reduce", n, tensor.dtype)
            with untuned():  # a tuning would exchange over torch.distributed, which may be the iris backend itself
                self._workspaces[key] = self.ctx.ccl.all_reduce(summed, staged, config=self.config,
                                                                workspace=self._workspaces.get(key))
            out.copy_(reductions.finish(summed, plan, self.ctx.num_ranks).view(tensor.shape))
        return out

    def all_gather(self, tensor: torch.Tensor, world_size: int | None = None) -> torch.Tensor:
        """Every rank's ``tensor`` (one shape on every rank) concatenated along dim 0, in rank order."""
        world = self._world("all_gather", world_size)
        out_shape = gathered_shape(tensor.shape, world, self.ctx.cur_rank)
        self._check_device("all_gather", tensor)
        out = torch.empty(out_shape, dtype=tensor.dtype, device=tensor.device)
        if tensor.numel() == 0:
            return out
        with self._lock:
            out.copy_(self._rows(tensor).reshape(out_shape))
        return out

    def reduce_scatter(self, tensor: torch.Tensor, world_size: int | None = None, op: str = "sum") -> torch.Tensor:
        """``op`` over every rank's ``tensor``, cut along dim 0 into one block per rank: this rank's block."""
        world = self._world("reduce_scatter", world_size)
        me = self.ctx.cur_rank
        out_shape = scattered_shape(tensor.shape, world, me)
        plan = self._plan("reduce_scatter", op, tensor.dtype)
        self._check_device("reduce_scatter", tensor)
        out = torch.empty(out_shape, dtype=tensor.dtype, device=tensor.device)
        n = out.numel()  # elements of each rank's block
        if n == 0:
            return out
        with self._lock:
            if plan.kind == "gathered":
                rows = self._rows(tensor).reshape(world, world, n)[:, me]  # every rank's block `me`
                out.copy_(reductions.reduce_rows(rows, plan).view(out_shape))
                return out
            # Our kernel cuts the flat tensor into chunks of 16-element multiples (iris.ccl.chunks), which need not
            # fall on the blocks' borders: each block is padded to chunk_size, so that chunk r is exactly block r.
            padded = chunk_size(world * n, world)
            staged = self.staging.view("input", (world, padded), tensor.dtype)
            staged[:, :n].copy_(tensor.reshape(world, n))
            staged[:, n:].zero_()  # the padding is summed too: zeros, not what the buffer held before
            summed = self.staging.view("output", (world * padded,), tensor.dtype)
            with untuned():
                self.ctx.ccl.reduce_scatter(summed, staged.view(-1), config=self.config)
            lo, _ = owned_range(world * padded, me, world)  # this rank's chunk: [me * padded, (me + 1) * padded)
            out.copy_(reductions.finish(summed[lo:lo + n], plan, world).view(out_shape))
        return out

    # -- helpers ------------------------------------------------------------------------------------------------
    def _plan(self, what: str, op: str, dtype: torch.dtype) -> reductions.Plan:
        return reduction_plan(what, op, dtype, self.ctx.cur_rank)

    def _world(self, what: str, world_size: int | None) -> int:
        world = self.ctx.num_ranks
        if world_size is not None and world_size != world:
            raise ValueError(f"rank {self.ctx.cur_rank}: {what}: world_size={world_size}, but the context it runs on "
                             f"({self.name}) has {world} ranks; leave world_size out, or give {world}")
        return world

    def _check_device(self, what: str, tensor: torch.Tensor) -> None:
        """The heap's device or the CPU (copied through the heap either way); another GPU is refused."""
        device = self.ctx.get_device()
        if tensor.device != device and tensor.device.type != "cpu":
            raise ValueError(f"rank {self.ctx.cur_rank}: {what} got a tensor on {tensor.device}; this rank's heap "
                             f"and kernels are on {device}: move it there")

    def _rows(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's ``tensor`` as a (ranks, *tensor.shape) heap tensor, gathered as bytes (any dtype)."""
        flat = tensor.contiguous().view(-1).view(torch.uint8)
        word = torch.int32 if flat.numel() % 4 == 0 else torch.uint8  # the widest word that divides the bytes
        # copied in as bytes: the tensor itself may not start on a word (a float16 slice x[1:]), the buffer does
        staged = self.staging.view("input", (flat.numel() // word.itemsize,), word)
        staged.view(torch.uint8).copy_(flat)
        rows = self.staging.view("output", (self.ctx.num_ranks, staged.numel()), word)
        key = ("all_gather", staged.numel(), word)
        with untuned():
            self._workspaces[key] = self.ctx.ccl.all_gather(rows.view(-1), staged, config=self.config,
                                                            workspace=self._workspaces.get(key))
        return rows.view(torch.uint8).view(tensor.dtype).view(self.ctx.num_ranks, *tensor.shape)


# -- shapes and refusals, shared by the fake rules and the bodies ------------------------------------------------------
def _who(rank: int | None) -> str:
    return f"rank {rank}: " if rank is not None else ""


def reduction_plan(what: str, op: str, dtype: torch.dtype, rank: int | None) -> reductions.Plan:
    """How ``op`` over ``dtype`` runs (:mod:`iris.distributed.reductions`); a ValueError naming the rank if it
    cannot."""
    kind = OPS.get(op.lower()) if isinstance(op, str) else None
    if kind is None:
        raise ValueError(f"{_who(rank)}{what}: op={op!r} is none of torch's reductions {sorted(OPS)}")
    if rank is not None:
        return reductions.plan(kind, dtype, rank)
    try:  # tracing before any context exists: the same refusal, without a rank to name
        return reductions.plan(kind, dtype, 0)
    except ValueError as error:
        raise ValueError(str(error).removeprefix("rank 0: ")) from None


def gathered_shape(shape, world: int, rank: int | None) -> tuple:
    """all_gather's result: ``(world * shape[0], *shape[1:])``."""
    if len(shape) == 0:
        raise ValueError(f"{_who(rank)}all_gather concatenates along dim 0: give a tensor of at least one "
                         "dimension (x.reshape(1) for a scalar)")
    return (world * shape[0], *shape[1:])


def scattered_shape(shape, world: int, rank: int | None) -> tuple:
    """reduce_scatter's result: ``(shape[0] // world, *shape[1:])``; dim 0 must divide by ``world``."""
    if len(shape) == 0 or shape[0] % world != 0:
        raise ValueError(f"{_who(rank)}reduce_scatter cuts dim 0 into {world} equal blocks, one per rank: its "
                         f"input's shape {list(shape)} has {shape[0] if len(shape) else 'no'} rows; pad dim 0 to a "
                         f"multiple of {world}")
    return (shape[0] // world, *shape[1:])


# -- which context a call runs on --------------------------------------------------------------------------------------
def setup(iris_instance: Iris, config=None) -> IrisCompileContext:
    """Make ``iris_instance`` the context of the compiled collectives (upstream's call); returns it wrapped.

    Collective in effect: the first call of each operator allocates staging buffers on every rank's heap, so
    every rank sets up the same way. A later ``setup`` replaces the default.

    Parameters
    ----------
    iris_instance : iris.Iris
    config : iris.ccl.Config, optional
        Passed to every collective.

    Returns
    -------
    IrisCompileContext

    Examples
    --------
    >>> config = iris.ccl.Config(all_reduce_variant="two_shot")
    >>> compile_ctx = setup(iris.iris("256MiB"), config=config)                        # doctest: +SKIP
    >>> torch.ops.iris.all_reduce(torch.ones(3))          # on 2 ranks: tensor([2., 2., 2.])   # doctest: +SKIP
    """
    global _default
    _default = IrisCompileContext(iris_instance, config)
    return _default


def set_context(ctx: Iris) -> None:
    """Upstream's other spelling of :func:`setup` (its ``iris.compile.set_context``), without a config."""
    setup(ctx)


def get_context() -> Iris:
    """The :class:`iris.Iris` context the operators run on when no ``context=`` names another.

    Raises
    ------
    RuntimeError
        When nothing was set up and no ``"iris"`` group exists.
    """
    return resolve("").ctx


def resolve(name: str) -> IrisCompileContext:
    """The context ``name`` names; ``""``: :func:`setup`'s, else one over the ``"iris"`` backend's context."""
    global _of_backend
    if name:
        found = _registry.get(name)
        if found is None:
            raise RuntimeError(f"no iris compile context named {name!r} in this process (each process sets up its "
                               "own, and one nobody holds any more is gone)")
        return found
    if _default is not None:
        return _default
    try:
        ctx = registration.context()
    except RuntimeError:
        who = _who(dist.get_rank() if dist.is_initialized() else None)
        raise RuntimeError(f"{who}torch.ops.iris's collectives have no context: call iris.compile.setup(ctx) (ctx = "
                           "iris.iris(...)) on every rank first, or make the default group iris "
                           "(dist.init_process_group('iris'))") from None
    if _of_backend is None or _of_backend.ctx is not ctx:
        _of_backend = IrisCompileContext(ctx)
    return _of_backend


def _rank(name: str) -> int | None:
    """This rank, for messages of the fake rules, which may run before any context exists (then None)."""
    try:
        return resolve(name).ctx.cur_rank
    except RuntimeError:
        return None


def _name(ctx) -> str:
    """The ``context=`` string for a wrapper's ``ctx`` argument (None: the default's)."""
    if ctx is None:
        return ""
    if isinstance(ctx, IrisCompileContext):
        return ctx.name
    if _default is not None and ctx is _default.ctx:
        return _default.name
    raise TypeError("ctx= takes what setup(ctx) returned (an IrisCompileContext), or IrisCompileContext(ctx) for a "
                    f"context other than the default, not a {type(ctx).__name__}")


# -- the operators -----------------------------------------------------------------------------------------------------
@torch.library.custom_op("iris::all_reduce", mutates_args=(),
                         schema="(Tensor input, str op='sum', str context='') -> Tensor")
def _all_reduce_op(input, op="sum", context=""):
    return resolve(context).all_reduce(input, op)


@_all_reduce_op.register_fake
def _(input, op="sum", context=""):
    reduction_plan("all_reduce", op, input.dtype, _rank(context))  # refused while tracing, not first at run time
    return input.new_empty(input.shape)


@torch.library.custom_op("iris::all_gather", mutates_args=(),
                         schema="(Tensor input, int? world_size=None, str context='') -> Tensor")
def _all_gather_op(input, world_size=None, context=""):
    return resolve(context).all_gather(input, world_size)


@_all_gather_op.register_fake
def _(input, world_size=None, context=""):
    # world_size as given, not checked against a context: tracing needs none (upstream's fake test asks for 8)
    world = world_size if world_size is not None else resolve(context).ctx.num_ranks
    return input.new_empty(gathered_shape(input.shape, world, _rank(context)))


@torch.library.custom_op("iris::reduce_scatter", mutates_args=(),
                         schema="(Tensor input, int? world_size=None, str op='sum', str context='') -> Tensor")
def _reduce_scatter_op(input, world_size=None, op="sum", context=""):
    return resolve(context).reduce_scatter(input, world_size, op)


@_reduce_scatter_op.register_fake
def _(input, world_size=None, op="sum", context=""):
    rank = _rank(context)
    world = world_size if world_size is not None else resolve(context).ctx.num_ranks
    reduction_plan("reduce_scatter", op, input.dtype, rank)
    return input.new_empty(scattered_shape(input.shape, world, rank))


@torch.library.custom_op("iris::wait_tensor", mutates_args=(), schema="(Tensor input) -> Tensor")
def _wait_tensor_op(input):
    # Our collectives are queued on the caller's stream and complete in its order (CPU: before they return), so
    # there is nothing to wait for; a custom operator may not return its input, hence the copy.
    return input.clone()


@_wait_tensor_op.register_fake
def _(input):
    return torch.empty_like(input)


# -- gradients ---------------------------------------------------------------------------------------------------------
def _keep_arguments(ctx, inputs, output) -> None:  # torch's names: ctx is autograd's, not an iris context
    ctx.arguments = inputs[1:]


def _differentiable(what: str, op: str) -> None:
    if op.lower() not in DIFFERENTIABLE:
        raise RuntimeError(f"{what} with op={op!r} has no gradient here; sum and avg have one")


def _all_reduce_backward(ctx, grad):
    op, context = ctx.arguments
    _differentiable("all_reduce", op)
    # every rank's output holds every rank's input: the input's gradient is the sum (avg: mean) of the outputs'
    return torch.ops.iris.all_reduce(grad, op, context), None, None


def _all_gather_backward(ctx, grad):
    world_size, context = ctx.arguments
    return torch.ops.iris.reduce_scatter(grad, world_size, "sum", context), None, None


def _reduce_scatter_backward(ctx, grad):
    world_size, op, context = ctx.arguments
    _differentiable("reduce_scatter", op)
    gathered = torch.ops.iris.all_gather(grad, world_size, context)
    if op.lower() == "avg":
        gathered = gathered / (world_size or resolve(context).ctx.num_ranks)
    return gathered, None, None, None


def _wait_tensor_backward(ctx, grad):
    return grad


_all_reduce_op.register_autograd(_all_reduce_backward, setup_context=_keep_arguments)
_wait_tensor_op.register_autograd(_wait_tensor_backward)
_all_gather_op.register_autograd(_all_gather_backward, setup_context=_keep_arguments)
_reduce_scatter_op.register_autograd(_reduce_scatter_backward, setup_context=_keep_arguments)

for _op in (torch.ops.iris.all_reduce, torch.ops.iris.all_gather, torch.ops.iris.reduce_scatter,
            torch.ops.iris.wait_tensor):
    torch.fx.node.has_side_effect(_op.default)  # never dropped from a graph: the other ranks would wait for it


# -- upstream's functions ----------------------------------------------------------------------------------------------
def all_reduce(input: torch.Tensor, ctx: IrisCompileContext | None = None, *, op: str = "sum") -> torch.Tensor:
    """``op`` (default sum) over every rank's ``input``: a new tensor of its shape; traceable by torch.compile.

    Parameters
    ----------
    input : torch.Tensor
        The same shape and dtype on every rank.
    ctx : IrisCompileContext, optional
        None: :func:`setup`'s (or the ``"iris"`` backend's) context.
    op : str
        ``sum``, ``avg``, ``product``, ``min``, ``max``, ``band``, ``bor`` or ``bxor``.

    Examples
    --------
    >>> all_reduce(torch.full((2,), float(rank + 1)))      # 2 ranks: tensor([3., 3.])     # doctest: +SKIP
    """
    return torch.ops.iris.all_reduce(input, op, _name(ctx))


def all_gather(input: torch.Tensor, world_size: int | None = None,
               ctx: IrisCompileContext | None = None) -> torch.Tensor:
    """Every rank's ``input`` concatenated along dim 0: shape ``(world_size * M, ...)``; traceable.

    Parameters
    ----------
    input : torch.Tensor
        Shape ``(M, ...)``, the same on every rank.
    world_size : int, optional
        The context's number of ranks (checked when given).
    ctx : IrisCompileContext, optional

    Examples
    --------
    >>> all_gather(torch.full((1, 2), float(rank)))        # 2 ranks: tensor([[0., 0.], [1., 1.]])  # doctest: +SKIP
    """
    return torch.ops.iris.all_gather(input, world_size, _name(ctx))


def reduce_scatter(input: torch.Tensor, world_size: int | None = None,
                   ctx: IrisCompileContext | None = None, *, op: str = "sum") -> torch.Tensor:
    """This rank's block of ``op`` over every rank's ``input``, cut along dim 0: shape ``(M // world_size, ...)``.

    Parameters
    ----------
    input : torch.Tensor
        Shape ``(M, ...)``, ``M`` a multiple of the number of ranks; the same on every rank.
    world_size : int, optional
        The context's number of ranks (checked when given).
    ctx : IrisCompileContext, optional
    op : str
        As :func:`all_reduce`'s.

    Examples
    --------
    >>> reduce_scatter(torch.arange(4.0))     # 2 ranks: rank 0 [0., 2.], rank 1 [4., 6.]   # doctest: +SKIP
    """
    return torch.ops.iris.reduce_scatter(input, world_size, op, _name(ctx))


def wait_tensor(input: torch.Tensor) -> torch.Tensor:
    """The result of a collective, ready for what follows on this stream (here: a copy; nothing is pending).

    Examples
    --------
    >>> y = wait_tensor(all_reduce(x))                                                  # doctest: +SKIP
    """
    return torch.ops.iris.wait_tensor(input)


__all__ = ["IrisCompileContext", "all_gather", "all_reduce", "get_context", "reduce_scatter", "resolve",
           "set_context", "setup", "wait_tensor"]
