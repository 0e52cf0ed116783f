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
from . import versions as _versions
from .backend import choose_backend as _choose_backend

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

# bench: upstream Iris's benchmark API; perf: timing against the GPU's roofs; traffic: bytes per rank and heap
from . import bench, ccl, experimental, hip, ops, perf, tensor_creation, traffic, upstream_layout  # noqa: E402
from . import launch_options as _launch_options  # noqa: E402
from . import warp_width as _warp_width  # noqa: E402
from .checking import Race, RaceWarning  # noqa: E402
from .context import GluonContext, Iris, TritonContext, iris  # noqa: E402
from .device import (  # noqa: E402
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
from .heap import AllocationDivergence  # noqa: E402
from .hip import get_device_id_for_rank  # noqa: E402
from .logging import DEBUG, ERROR, INFO, WARNING, logger, set_logger_level  # noqa: E402
from .tiles import AllReduceConfig, TensorView, Tile, TileView, make_tensor_view  # noqa: E402
from .timing import do_bench  # noqa: E402
from .tracing import TraceEvent  # noqa: E402

upstream_layout.install()  # upstream's module paths (iris.host.iris, iris.device.utils, ...) as our modules
_launch_options.install()  # AMD-only launch options (waves_per_eu, ...) dropped with a warning (GPU launches;
#                             the interpreter's: iris.interpret.activate)
_warp_width.install()  # Gluon layouts for AMD's 64-wide warps compiled for NVIDIA's 32-wide ones

__all__ = [
    "DEBUG", "ERROR", "INFO", "WARNING", "AllocationDivergence", "Iris", "ccl", "iris", "logger", "ops",
    "set_logger_level", "tensor_creation", "TraceEvent", "Race", "RaceWarning", "do_bench", "hip", "experimental",
    "get_device_id_for_rank", "bench", "traffic", "perf",
    # device API (iris.device); the Gluon context is iris.gluon.IrisDeviceCtx; upstream's names for the two
    "GluonContext", "TritonContext",
    "Context", "DeviceContext", "IrisDebugError", "atomic_add", "atomic_and", "atomic_cas", "atomic_max", "atomic_min",
    "atomic_or", "atomic_sub", "atomic_xchg", "atomic_xor", "copy", "get", "load", "put", "store",
    # where tiles live, for the tile-level collectives of DeviceContext (iris.tiles, iris.tile_collectives)
    "Tile", "TileView", "TensorView", "AllReduceConfig", "make_tensor_view",
]
