"""How fast, and how far from the hardware: timing callables on every rank in step, against the GPU's roofs.

- :func:`compare` times candidates (label -> callable) on every rank in step, CUDA-graph timed where they can
  be captured, the slowest rank's time, with achieved TFLOP/s and GB/s and their share of the roofs;
- :mod:`specs`: the spec sheet of the common data-centre GPUs (:func:`specs.find`);
- :mod:`ceilings`: what this machine reaches now (:func:`ceilings.measure`: cuBLAS matmul, device copy, peer copy);
- :mod:`roofline`: ``attainable = min(peak, intensity x bandwidth)``;
- :func:`replay_time`: the CUDA-graph timer the benchmarks and :func:`compare` share;
- :func:`as_benchmark` / :func:`run_benchmark`: the same candidates as an :mod:`iris.bench` benchmark;
- :func:`sweep`: one collective over sizes beside torch.distributed's, with what ``ctx.ccl`` chose and why.

The workbench draws what this package measures (``workbench.bench``).

Examples
--------
>>> report = iris.perf.compare(ctx, {"mine": lambda: mine(out, inp), "NCCL": lambda: nccl(out, inp)},
...                            bytes=2 * inp.nbytes)                        # doctest: +SKIP
>>> iris.base.gpu_specs.find("NVIDIA H200").peak("bf16")
989.5
"""

from ..base import gpu_specs as specs
from ..base.gpu_specs import GpuSpec
from ..instruments.replay import ReplayTiming, replay_time
from . import ceilings, roofline
from .benchmark import as_benchmark, run_benchmark
from .ceilings import Ceilings
from .compare import CandidateResult, PerfReport, compare
from .errors import PerfError
from .roofline import Roof
from .sweep import SweepPoint, SweepReport, sweep

__all__ = ["CandidateResult", "Ceilings", "GpuSpec", "PerfError", "PerfReport", "ReplayTiming", "Roof",
           "SweepPoint", "SweepReport", "as_benchmark", "ceilings", "compare", "replay_time", "roofline",
           "run_benchmark", "specs", "sweep"]
