"""Let upstream Iris's examples share a machine: ranks share GPUs, and several examples run at once.

Put on ``PYTHONPATH`` by ``tests/gpu/run_upstream_examples.py``; Python imports it at start-up in every process
(``mp.spawn``'s and ``torchrun``'s children too). It changes torch only, never the example or iris, and only
what the runner asks for through two environment variables:

``IRIS_EXAMPLES_SHARE_GPUS=1`` (an example asks for more ranks than the machine has GPUs):

* ``torch.cuda.set_device(i)`` selects GPU ``i % device_count`` (iris already puts rank r on that GPU);
* ``torch.cuda.get_device_properties(i)`` describes GPU ``i % device_count`` (the GEMM examples size their
  grids with ``get_device_properties(rank)``);
* ``torch.distributed.init_process_group(device_id=cuda:i)`` binds to GPU ``i % device_count``;
* ``init_process_group(backend="nccl")`` becomes ``"gloo"``: NCCL refuses two ranks on one GPU ("Duplicate
  GPU detected"), gloo does not; the examples' own ``dist`` calls then go through gloo.

A tensor placed with ``torch.device(f"cuda:{rank}")`` is not redirected (torch's device type cannot be
wrapped): an example that does so needs one GPU per rank, and the runner says so.

``IRIS_EXAMPLES_PORT_OFFSET=N`` (the runner's ``--jobs``: examples run side by side): an
``init_process_group(init_method="tcp://host:PORT")`` rendezvous uses ``PORT + N``. Upstream's examples spawn
their ranks with a fixed port (29500 for most), so two at once would meet at the same one.
"""

import importlib.machinery
import importlib.util
import os
import sys

import torch
import torch.distributed as dist


def _shared(index):
    count = torch.cuda.device_count()
    return index % count if count and isinstance(index, int) else index


def _share_gpus():
    set_device, get_device_properties = torch.cuda.set_device, torch.cuda.get_device_properties

    def shared_set_device(device):
        device = torch.device(device) if isinstance(device, str) else device
        if isinstance(device, torch.device) and device.type == "cuda" and device.index is not None:
            device = torch.device("cuda", _shared(device.index))
        return set_device(_shared(device) if isinstance(device, int) else device)

    def shared_get_device_properties(device=None):
        return get_device_properties(_shared(device) if isinstance(device, int) else device)

    torch.cuda.set_device, torch.cuda.get_device_properties = shared_set_device, shared_get_device_properties


def _adapt_init_process_group(share_gpus: bool, port_offset: int):
    init_process_group = dist.init_process_group

    def adapted(backend=None, init_method=None, *args, device_id=None, **kwargs):
        if share_gpus:
            if isinstance(device_id, torch.device) and device_id.type == "cuda" and device_id.index is not None:
                device_id = torch.device("cuda", _shared(device_id.index))
            if isinstance(backend, str) and backend.lower() == "nccl":
                backend = "gloo"
        if port_offset and isinstance(init_method, str) and init_method.startswith("tcp://"):
            host, _, port = init_method[len("tcp://"):].rpartition(":")
            init_method = f"tcp://{host}:{int(port) + port_offset}"
        return init_process_group(backend, init_method, *args, device_id=device_id, **kwargs)

    dist.init_process_group = adapted


def _run_shadowed_sitecustomize():
    # This file hides any sitecustomize later on sys.path (Debian's installs apport's hook): run that one too.
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.machinery.PathFinder.find_spec(
        "sitecustomize", [path for path in sys.path if os.path.abspath(path or ".") != here])
    if spec is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


_share = os.environ.get("IRIS_EXAMPLES_SHARE_GPUS") == "1"
_offset = int(os.environ.get("IRIS_EXAMPLES_PORT_OFFSET", "0"))
if _share:
    _share_gpus()
if _share or _offset:
    _adapt_init_process_group(_share, _offset)
_run_shadowed_sitecustomize()
