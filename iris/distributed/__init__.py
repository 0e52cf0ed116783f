"""torch.distributed's door into our kernels: the ``"iris"`` backend.

``import iris`` registers it; ``dist.init_process_group("iris")`` (or ``"cpu:iris,cuda:iris"``) then runs every
operation torch.distributed offers, and DDP, FSDP, DTensor and the functional collectives built on them, on
:mod:`iris.ccl`'s kernels over the symmetric heap, where the workbench's traffic matrix, timeline, race checker
and stepper see them: each operation by name (:mod:`iris.instruments.operations`), and with
:func:`name_collectives` what it carries (a DDP bucket, an FSDP module, a tensor-parallel module).

Examples
--------
>>> import iris, torch, torch.distributed as dist
>>> dist.init_process_group("iris")                  # torchrun's variables         # doctest: +SKIP
>>> t = torch.ones(4); dist.all_reduce(t)            # our all_reduce kernel
>>> model = torch.nn.parallel.DistributedDataParallel(net)   # its buckets too
>>> iris.distributed.name_collectives(model)                  # all_reduce · DDP bucket 0, ... in the views
"""

from .naming import name_collectives
from .process_group import IrisProcessGroup
from .registration import Backend, Options, context, group_of, register
from .work import IrisWork

__all__ = ["Backend", "IrisProcessGroup", "IrisWork", "Options", "context", "group_of", "name_collectives", "register"]
