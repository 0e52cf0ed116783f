"""What each collective of a training step carries, said where the parallel wrappers know it: DDP's buckets, FSDP's
sharded modules, tensor parallelism's modules.

The ``iris`` backend names every operation it runs (``all_reduce``, its bytes, its ranks), but it gets a DDP bucket
or an FSDP module's flat parameters as bare tensors. :func:`name_collectives` tells it the rest, each through the
wrapper's own door, around the wrapper's call to the collective (:func:`iris.instruments.operations.about`):

* **DDP**: a communication hook (``model.register_comm_hook``) that averages and all-reduces each bucket as DDP's own
  does, inside ``about("DDP bucket <index>", <its parameters' names>)`` (``GradBucket.index()``,
  ``GradBucket.parameters()``);
* **FSDP2** (``fully_shard``): each sharded module's all-gather and reduce-scatter (``set_custom_all_gather``,
  ``set_custom_reduce_scatter``: torch's default ones, called inside ``about("FSDP <module>")``; an all-gather that
  runs in backward, to gather the parameters again, says so);
* **tensor parallelism** (``parallelize_module``) and any modules named: the collectives a module's forward calls (its
  hooks, which parallelize_module added, included) carry ``"<module> (forward)"``; those called between the gradient
  of its output arriving and the gradient of its input leaving carry ``"<module> (backward)"``.

The views then show ``all_reduce · DDP bucket 0``, ``all_gather_into_tensor · FSDP block``, ``all_reduce · TP down
(forward)`` (:mod:`iris.instruments.traffic.per_operation`, the timeline, the race checker's reports, the stepper).

Examples
--------
>>> group = iris.distributed.group_of(ctx)                                             # doctest: +SKIP
>>> model = DistributedDataParallel(net, process_group=group, bucket_cap_mb=0.01)     # doctest: +SKIP
>>> iris.distributed.name_collectives(model)                                           # doctest: +SKIP
"""

from __future__ import annotations

import functools
import warnings

import torch
import torch.nn as nn

from ..instruments import operations

DETAIL_NAMES = 12  # parameter names a detail lists before it says how many more


def name_collectives(model: nn.Module, modules=None, ddp_hook=None) -> nn.Module:
    """Make the collectives that ``model`` runs say what they carry (see the module's docstring); returns ``model``.

    Parameters
    ----------
    model : torch.nn.Module
        A ``DistributedDataParallel`` model, a model with ``fully_shard`` modules, a model ``parallelize_module``
        distributed, or any model with ``modules`` to name.
    modules : list of str, optional
        Qualified names (``model.named_modules()``'s) of modules whose forward and backward collectives are named
        after them. Default: the modules tensor parallelism distributed (those holding DTensor parameters), unless
        the model is sharded by FSDP, whose parameters are DTensors too (then FSDP's modules name their own).
    ddp_hook : callable, optional
        A DDP communication hook of yours, ``hook(state, bucket) -> Future``, to run inside each bucket's name
        instead of the averaging all-reduce (DDP takes one hook only).

    Raises
    ------
    ValueError
        For a DDP model that already has a communication hook (pass yours as ``ddp_hook``), a module name that
        ``model`` does not have, or a model in which there is nothing to name.

    Examples
    --------
    >>> fully_shard(model.block); fully_shard(model)                                   # doctest: +SKIP
    >>> name_collectives(model)     # all_gather_into_tensor · FSDP block, reduce_scatter_tensor · FSDP root, ...
    """
    named, given = [], model
    if isinstance(model, nn.parallel.DistributedDataParallel):
        _name_buckets(model, ddp_hook)
        named.append("DDP buckets")
        model = model.module  # its modules, for the rest
    elif ddp_hook is not None:
        raise ValueError("ddp_hook is for a DistributedDataParallel model; this one is a "
                         f"{type(model).__name__}")
    sharded = _fsdp_modules(model)
    for name, module in sharded.items():
        _name_fsdp(module, name, _own_parameters(module, name, sharded))
    named += [f"FSDP {name or 'root'}" for name in sharded]
    everything = dict(model.named_modules())
    if modules is None:
        chosen = {} if sharded else {name: f"TP {name}" for name, module in everything.items()
                                     if any(_is_dtensor(p) for p in module.parameters(recurse=False))}
    else:
        missing = [name for name in modules if name not in everything]
        if missing:
            raise ValueError(f"name_collectives: the model has no module {', '.join(map(repr, missing))} (its modules: "
                             f"{', '.join(repr(n) for n in list(everything)[1:8])}, ...)")
        chosen = {name: name or type(model).__name__ for name in modules}
    for name, about in chosen.items():
        _name_passes(everything[name], about, _names(n for n, _ in everything[name].named_parameters(prefix=name)))
    named += list(chosen.values())
    if not named:
        raise ValueError(f"name_collectives: {type(model).__name__} is not DistributedDataParallel, has no fully_shard "
                         "module and no tensor-parallel module: pass modules=[...] to name the collectives of some")
    return given


# -- DDP ---------------------------------------------------------------------------------------------------------------

def _name_buckets(ddp, hook) -> None:
    """A communication hook: each bucket's all-reduce (``hook``'s, else DDP's averaging one) inside its name."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    if getattr(ddp, "_iris_named", False):
        return  # named already (a notebook cell run again): DDP takes one hook only
    if getattr(ddp, "_comm_hooks", None):
        raise ValueError("name_collectives: this DDP model has a communication hook already, and DDP takes one only: "
                         "pass yours as name_collectives(model, ddp_hook=your_hook) instead of registering it")
    names = {id(p): n for n, p in ddp.module.named_parameters()}
    group = ddp.process_group

    def named_bucket(state, bucket):
        detail = _names(names.get(id(p), "?") for p in bucket.parameters())
        with operations.about(f"DDP bucket {bucket.index()}", detail):
            return hook(state, bucket) if hook is not None else default_hooks.allreduce_hook(group, bucket)

    ddp.register_comm_hook(None, named_bucket)
    ddp._iris_named = True


# -- FSDP2 -------------------------------------------------------------------------------------------------------------

def _fsdp_modules(model: nn.Module) -> dict:
    """The modules ``fully_shard`` made FSDP modules, by qualified name ("" for the model itself)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch without FSDP2
        return {}
    return {name: module for name, module in model.named_modules() if isinstance(module, FSDPModule)}


def _own_parameters(module: nn.Module, name: str, sharded: dict) -> str:
    """The names of the parameters ``module``'s FSDP group holds: its own, less those of FSDP modules inside it."""
    inner = [n for n in sharded if n != name and (name == "" or n.startswith(name + "."))]
    return _names(n for n, _ in module.named_parameters(prefix=name)
                  if not any(n.startswith(i + ".") for i in inner))


def _name_fsdp(module, name: str, detail: str) -> None:
    try:
        all_gather, reduce_scatter = _named_comms()
    except ImportError:  # a torch whose FSDP2 takes no communication objects of ours (before 2.8)
        warnings.warn(f"name_collectives: this torch's FSDP2 ({torch.__version__}) takes no custom all-gather or "
                      f"reduce-scatter, so the collectives of FSDP module {name or 'root'!r} are named by operation "
                      "only", stacklevel=3)
        return
    about = f"FSDP {name or 'root'}"
    module.set_custom_all_gather(all_gather(about, detail))
    module.set_custom_reduce_scatter(reduce_scatter(about, detail))


@functools.cache
def _named_comms():
    """FSDP's default all-gather and reduce-scatter, each called inside its module's name (the classes are made at
    first use: FSDP's interfaces live in torch modules that a program without FSDP never imports)."""
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather, DefaultReduceScatter

    class NamedAllGather(AllGather):
        def __init__(self, about: str, detail: str):
            self.about, self.detail, self.inner = about, detail, DefaultAllGather()

        def allocate(self, size, *, dtype, device):
            return self.inner.allocate(size, dtype=dtype, device=device)

        def __call__(self, output_tensor, input_tensor, group, async_op=False):
            # In backward, FSDP gathers a module's parameters again (they were freed after its forward).
            phase = " (backward)" if _in_backward() else ""
            with operations.about(self.about + phase, self.detail):
                return self.inner(output_tensor, input_tensor, group, async_op)

    class NamedReduceScatter(ReduceScatter):
        def __init__(self, about: str, detail: str):
            self.about, self.detail, self.inner = about, detail, DefaultReduceScatter()

        def allocate(self, size, *, dtype, device):
            return self.inner.allocate(size, dtype=dtype, device=device)

        def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
            with operations.about(self.about, self.detail):
                return self.inner(output_tensor, input_tensor, group, op, async_op)

    return NamedAllGather, NamedReduceScatter


def _in_backward() -> bool:
    """Whether autograd is running a backward pass on this thread now."""
    task = getattr(torch._C, "_current_graph_task_id", None)
    return task is not None and task() != -1


# -- a module's forward and backward (tensor parallelism) --------------------------------------------------------------

def _name_passes(module: nn.Module, about: str, detail: str) -> None:
    """The collectives of ``module``'s forward carry ``about (forward)``; those between its output's gradient arriving
    and its input's gradient leaving (or the end of the backward pass) carry ``about (backward)``."""
    if getattr(module, "_iris_named", None) == about:
        return  # named already
    forward_tokens: list[int] = []

    def before(mod, args, kwargs):
        forward_tokens.append(operations.push_about(f"{about} (forward)", detail))
        backward = {}
        for tensor in _tensors((args, kwargs)):  # its gradient leaving: this module's backward has ended
            tensor.register_hook(lambda grad, backward=backward: _end(backward))
        mod._iris_backward = backward  # handed to the forward hook, which sees the outputs

    def after(mod, args, kwargs, output):
        operations.pop_about(forward_tokens.pop())
        backward = mod.__dict__.pop("_iris_backward", {})
        for tensor in _tensors(output):  # its gradient arriving: this module's backward begins
            tensor.register_hook(lambda grad, backward=backward: _begin(backward, f"{about} (backward)", detail))

    # First of the pre-hooks and last of the hooks: around those of parallelize_module, which call the collectives.
    module.register_forward_pre_hook(before, prepend=True, with_kwargs=True)
    module.register_forward_hook(after, with_kwargs=True, always_call=True)  # a forward that raises pops too
    module._iris_named = about


def _tensors(tree) -> list[torch.Tensor]:
    """The tensors in ``tree`` (tuples, lists, dicts) whose gradients autograd computes."""
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor) and t.requires_grad]


def _begin(backward: dict, about: str, detail: str) -> None:
    if "token" in backward:
        return  # a second output's gradient: begun already
    backward["token"] = operations.push_about(about, detail)
    # An input that needs no gradient never says the backward ended: the end of the pass does.
    torch.autograd.Variable._execution_engine.queue_callback(lambda: _end(backward))


def _end(backward: dict) -> None:
    token = backward.pop("token", None)
    if token is not None:
        operations.pop_about(token)


# -- helpers -----------------------------------------------------------------------------------------------------------

def _is_dtensor(tensor) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:
        return False
    return isinstance(tensor, DTensor)


def _names(names) -> str:
    """Parameter names as a detail: the first :data:`DETAIL_NAMES`, then how many more."""
    names = list(names)
    shown = ", ".join(names[:DETAIL_NAMES])
    return shown + (f" and {len(names) - DETAIL_NAMES} more" if len(names) > DETAIL_NAMES else "")
