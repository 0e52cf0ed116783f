"""iris: symmetric heaps and remote memory access for Triton and Gluon kernels, on NVIDIA GPUs and on the CPU.

On a machine without a GPU (or with ``IRIS_BACKEND=cpu``) importing iris switches Triton to its CPU
interpreter, so kernels defined *after* ``import iris`` run on the CPU over /dev/shm heaps.

Examples
--------
>>> import iris, torch
>>> ctx = iris.iris("64MiB")                        # doctest: +SKIP
>>> buf = ctx.zeros(1024, dtype=torch.float32)       # doctest: +SKIP
"""

from . import interpret as _interpret
from .base import versions as _versions
from .base.backend import choose_backend as _choose_backend

_versions.check_versions()  # silent on supported releases; names the supported range otherwise


def _activate_interpreter_if_cpu() -> None:
    # Triton reads TRITON_INTERPRET when @triton.jit decorates, so it must be set before any kernel of the
    # user's is defined: that is, now. A bad IRIS_BACKEND is reported when the context is created.
    try:
        backend = _choose_backend(None)
    except (ValueError, RuntimeError):
        return
    if backend == "cpu":
        _interpret.activate()


_activate_interpreter_if_cpu()

# The layers, bottom up (docs/architecture.md): base, heap, interpret, language (the device API), instruments,
# ccl and ops (the library), runtime (the host API), bench and perf; upstream's names live in one room, upstream.
from . import bench, ccl, distributed, instruments, language, ops, perf, runtime, upstream  # noqa: E402
from .base import launch_options as _launch_options  # noqa: E402
from .base import module_paths as _module_paths  # noqa: E402
from .base.logging import DEBUG, ERROR, INFO, WARNING, logger, set_logger_level  # noqa: E402
from .heap import AllocationDivergence  # noqa: E402
from .instruments import checking, tracing, traffic  # noqa: E402  (iris.traffic... as the lessons spell them)
from .instruments.checking import Race, RaceWarning  # noqa: E402
from .instruments.tracing import TraceEvent  # noqa: E402
from .language import flags, tiles  # noqa: E402
from .language import warp_width as _warp_width  # noqa: E402
from .language.core import (  # noqa: E402
    Context,
    DeviceContext,
    IrisDebugError,
    atomic_add,
    atomic_and,
    atomic_cas,
    atomic_max,
    atomic_min,
    atomic_or,
    atomic_sub,
    atomic_xchg,
    atomic_xor,
    copy,
    get,
    load,
    put,
    store,
)
from .language.tiles import AllReduceConfig, TensorView, Tile, TileView, make_tensor_view  # noqa: E402
from .runtime.context import GluonContext, Iris, TritonContext, iris  # noqa: E402
from .runtime.timing import do_bench  # noqa: E402

# The short paths the lessons and docs use, as module paths too (``import iris.traffic``, ``from iris.tracing.timeline
# import Timeline``): each the module object of its layer's path, submodules included (iris.base.module_paths).
SHORT_PATHS = {
    "iris.tracing": "iris.instruments.tracing",
    "iris.traffic": "iris.instruments.traffic",
    "iris.checking": "iris.instruments.checking",
    "iris.stepping": "iris.instruments.stepping",
    "iris.flags": "iris.language.flags",
    "iris.tiles": "iris.language.tiles",
    "iris.topology": "iris.heap.topology",
}
_module_paths.install(SHORT_PATHS)
distributed.register()  # dist.init_process_group("iris"): torch.distributed's operations on our kernels
from .heap import topology  # noqa: E402  (ctx.topology's classes: iris.topology.TopologyMap)

upstream.install()  # upstream's module paths (iris.hip, iris.gluon, iris.host.iris, iris.device.utils, ...)
from .upstream.hip import get_device_id_for_rank  # noqa: E402

_launch_options.install()  # AMD-only launch options (waves_per_eu, ...) dropped with a warning (GPU launches;
#                             the interpreter's: iris.interpret.activate)
_warp_width.install()  # Gluon layouts for AMD's 64-wide warps compiled for NVIDIA's 32-wide ones

__all__ = [
    "DEBUG", "ERROR", "INFO", "WARNING", "AllocationDivergence", "Iris", "ccl", "iris", "logger", "ops",
    "set_logger_level", "tensor_creation", "TraceEvent", "Race", "RaceWarning", "do_bench", "hip", "experimental",
    "get_device_id_for_rank", "bench", "traffic", "perf", "checking", "tracing", "flags", "tiles", "topology",
    "SHORT_PATHS",
    # the layers of our own (docs/architecture.md); upstream's paths are installed by iris.upstream
    "instruments", "language", "runtime",
    # device API (iris.language.core); the Gluon context is iris.gluon.IrisDeviceCtx; upstream's names for the two
    "GluonContext", "TritonContext",
    "Context", "DeviceContext", "IrisDebugError", "atomic_add", "atomic_and", "atomic_cas", "atomic_max", "atomic_min",
    "atomic_or", "atomic_sub", "atomic_xchg", "atomic_xor", "copy", "get", "load", "put", "store",
    # where tiles live, for the tile-level collectives of DeviceContext (iris.language.tiles, .tile_collectives)
    "Tile", "TileView", "TensorView", "AllReduceConfig", "make_tensor_view",
]
