"""Upstream Iris's device utilities (``iris.device.utils``): the device clock and where a program runs.

Upstream's GEMM examples stamp each tile with ``read_realtime()`` and convert with
``iris.upstream.hip.get_wall_clock_rate``. Here the clock is the one device tracing reads
(:func:`iris.language.tracing.device_clock`): the GPU's ``%globaltimer`` in nanoseconds on NVIDIA, the host's
monotonic clock on the CPU interpreter; its rate is :data:`iris.upstream.hip.DEVICE_CLOCK_RATE_KHZ`.

Examples
--------
>>> from iris.device.utils import read_realtime
>>> @triton.jit
... def stamp(out):
...     tl.store(out + tl.program_id(0), read_realtime())      # doctest: +SKIP
"""

import triton
import triton.language as tl

from ..language.tracing import device_clock, device_sm_id

read_realtime = device_clock  # int64 nanoseconds (AMD: a 100 MHz counter; the rate converts either)
get_cu_id = device_sm_id  # the SM running this program; 0 on the CPU


@triton.jit
def get_xcc_id():
    """The chiplet (AMD's XCC) running this program: 0, as an NVIDIA GPU or the CPU is one to programs."""
    return tl.cast(0, tl.int32)


__all__ = ["get_cu_id", "get_xcc_id", "read_realtime"]
