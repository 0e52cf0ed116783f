"""Upstream Iris's ``iris.upstream.hip`` device queries, answered for the backend this process uses.

Upstream's programs ask these to size grids and to convert device timestamps: ``get_num_xcc()`` (AMD's
chiplets, "XCCs"; programs divide their SMs among them) and ``get_wall_clock_rate(device_id)`` (kHz of the
clock that :func:`iris.device.utils.read_realtime` reads: ``cycles / rate`` is milliseconds). Here the answers
describe this machine, whichever backend runs:

============================  ==========================================  ====================================
query                         ``cuda``                                    ``cpu`` (the Triton interpreter)
============================  ==========================================  ====================================
``get_num_xcc``               1 (an NVIDIA GPU is one die to programs)     1
``get_wall_clock_rate``       1_000_000 kHz: ``%globaltimer`` counts ns    1_000_000 kHz: ``time.monotonic_ns``
``get_cu_count``              the device's SM count                        the CPU's core count
``count_devices``             visible CUDA devices                         0
``get_device_id``             the current CUDA device                      0 (the one CPU "device")
``get_arch_string``           ``"sm_90"`` and the like                     ``"cpu"``
``get_rocm_version``          ``(-1, -1)`` (no ROCm), as upstream          ``(-1, -1)``
``get_device_id_for_rank(r)`` ``r % count``: the GPU rank r's heap is on   0
============================  ==========================================  ====================================

``get_device_id_for_rank`` is upstream's ``iris.get_device_id_for_rank``: upstream wraps the rank around the
GPUs only when ``IRIS_SIMULATION`` is set (:func:`is_simulation_env`); here ranks always share GPUs when they
outnumber them, so the answer is always a valid device, the one iris puts that rank's heap on.

Upstream's CUDA branch of ``get_wall_clock_rate`` answers the SM clock (``cudaDevAttrClockRate``), which is
not the rate of any clock its kernels read; here it is the rate of the clock ``read_realtime`` reads, so the
conversion upstream's programs make is right.

Examples
--------
>>> import iris
>>> iris.upstream.hip.get_num_xcc()
1
>>> iris.upstream.hip.get_wall_clock_rate(0)          # kHz: read_realtime() counts nanoseconds
1000000
"""

from __future__ import annotations

import operator
import os

import torch

from ..base.backend import gpu_for_rank
from ..interpret import kernels_run_on_gpu

# kHz of the device clock read_realtime reads: %globaltimer on NVIDIA GPUs and time.monotonic_ns() on the
# interpreter both count nanoseconds (iris.language.tracing.device_clock).
DEVICE_CLOCK_RATE_KHZ = 1_000_000


def _checked_device(device_id: int | None) -> int:
    """The CUDA device ``device_id`` names (None: the current one); a clear error for one that does not exist."""
    index = _any_device(device_id)
    if index is None:
        return torch.cuda.current_device()
    count = torch.cuda.device_count()
    if index >= count:
        raise ValueError(f"device_id={device_id}: this machine has {count} CUDA device(s), 0 to {count - 1}")
    return index


def count_devices() -> int:
    """Visible CUDA devices; 0 on the CPU backend."""
    return torch.cuda.device_count() if kernels_run_on_gpu() else 0


def set_device(gpu_id: int) -> None:
    """Make ``gpu_id`` the current CUDA device (``torch.cuda.set_device``); nothing to do on the CPU backend."""
    if kernels_run_on_gpu():
        torch.cuda.set_device(_checked_device(gpu_id))


def get_device_id() -> int:
    """The current CUDA device; 0 on the CPU backend."""
    return torch.cuda.current_device() if kernels_run_on_gpu() else 0


def get_cu_count(device_id: int | None = None) -> int:
    """Streaming multiprocessors of ``device_id`` (default: the current device); CPU cores on the CPU backend."""
    if kernels_run_on_gpu():
        return torch.cuda.get_device_properties(_checked_device(device_id)).multi_processor_count
    _any_device(device_id)  # any rank's index names the one CPU; a nonsense one is refused as on a GPU
    return os.cpu_count() or 1


def get_arch_string(device_id: int | None = None) -> str:
    """``"sm_<major><minor>"`` of ``device_id`` (default: the current device); ``"cpu"`` on the CPU backend."""
    if kernels_run_on_gpu():
        props = torch.cuda.get_device_properties(_checked_device(device_id))
        return f"sm_{props.major}{props.minor}"
    _any_device(device_id)
    return "cpu"


def get_rocm_version() -> tuple[int, int]:
    """``(-1, -1)``: there is no ROCm here (upstream answers the same on CUDA)."""
    return (-1, -1)


def _any_device(device_id) -> int | None:
    """``device_id`` as an index (a Python, numpy or torch integer >= 0), or None; ValueError for anything else.

    Any index is accepted: upstream's programs pass their rank as the device, which with ranks sharing a GPU
    is past the visible devices; the answers that need no device must not fail them.
    """
    if device_id is None:
        return None
    try:
        index = None if isinstance(device_id, bool) else operator.index(device_id)
    except TypeError:
        index = None
    if index is None or index < 0:
        raise ValueError(f"device_id={device_id!r}: use a device index (an integer >= 0) or None")
    return index


def get_num_xcc(device_id: int | None = None) -> int:
    """Chiplets (AMD's XCCs) of a device: 1, as an NVIDIA GPU or the CPU is one to programs."""
    _any_device(device_id)
    return 1


def get_wall_clock_rate(device_id: int | None = None) -> int:
    """kHz of the clock :func:`iris.device.utils.read_realtime` reads (1_000_000: it counts nanoseconds).

    ``timestamp_difference / get_wall_clock_rate(device)`` is milliseconds, as in upstream's programs. Every
    device's clock runs at this rate, so any device index is accepted (upstream's programs pass their rank).
    """
    _any_device(device_id)
    return DEVICE_CLOCK_RATE_KHZ


def get_device_id_for_rank(local_rank: int) -> int:
    """The device a rank with this local rank uses: the GPU iris puts its heap on; 0 on the CPU backend.

    On one machine, where the local rank is the rank (iris places heaps by rank:
    :func:`iris.base.backend.gpu_for_rank`).

    Examples
    --------
    >>> torch.cuda.set_device(iris.hip.get_device_id_for_rank(int(os.environ["LOCAL_RANK"])))   # doctest: +SKIP
    """
    index = _any_device(local_rank)
    if index is None:
        raise ValueError("local_rank=None: give the rank's local rank (an integer >= 0)")
    return gpu_for_rank(index) if kernels_run_on_gpu() else 0


def is_simulation_env() -> bool:
    """Whether ``IRIS_SIMULATION`` is set ("1", "true" or "yes"), as upstream reads it for pre-silicon runs.

    Nothing here changes with it: :func:`get_device_id_for_rank` always wraps ranks around the GPUs.
    """
    return os.environ.get("IRIS_SIMULATION", "").strip().lower() in ("1", "true", "yes")
