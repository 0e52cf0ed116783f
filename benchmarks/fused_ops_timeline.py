"""Where a fused op's time goes: one call of ``ctx.ops.<op>`` as each rank's GPU ran it, kernel by kernel and
copy by copy on each stream (torch.profiler), beside the GEMM alone and the SM clock while each ran.

Run with one rank per GPU::

    torchrun --nproc_per_node=2 benchmarks/fused_ops_timeline.py --ops all_gather_matmul --shapes 8192x8192x8192
    torchrun --nproc_per_node=2 benchmarks/fused_ops_timeline.py --ops matmul_all_gather --shapes 8192x8192x28672 \\
        --chunks 2 --growth 1 --traces /tmp/traces

For each op and shape it prints, per rank, the call's GPU events in start order (stream, what, start and end
in µs from the call's first event, grid) and the time spent outside cuBLAS's kernels, once for an eager call and
once for a replay of a CUDA graph of calls (as the benchmark times them), and the GEMM alone event by event;
then G, the GEMM in pieces, T and S replayed, each with the median SM clock (NVML) while it ran. (The ranks start
an eager call apart: read the rank that started last, whose opening barrier did not wait.) Nothing is
written to RESULTS.md: this is for reading why a row of ``benchmarks/fused_ops.py`` misses its goal.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import iris  # noqa: E402
from benchmarks.allreduce import measure  # noqa: E402
from benchmarks.fused_ops import CALLS, OPS, operands  # noqa: E402
from iris.instruments.replay import capture  # noqa: E402

NVML_CLOCK_SM = 1


class SmClock:
    """The SM clock (MHz) of one GPU sampled every ``period`` seconds on a thread, while a ``with`` block runs."""

    def __init__(self, device: int, period: float = 0.002):
        self.period, self.samples = period, []
        self._lib = ctypes.CDLL("libnvidia-ml.so.1")
        self._lib.nvmlInit_v2()
        self._handle = ctypes.c_void_p()
        # NVML counts GPUs in PCI order, as CUDA does for identical GPUs (CUDA_VISIBLE_DEVICES unset here)
        self._lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(device), ctypes.byref(self._handle))

    def __enter__(self):
        self.samples, self._stop = [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self):
        clock = ctypes.c_uint()
        while not self._stop.is_set():
            if self._lib.nvmlDeviceGetClockInfo(self._handle, NVML_CLOCK_SM, ctypes.byref(clock)) == 0:
                self.samples.append(clock.value)
            time.sleep(self.period)

    def close(self) -> None:
        self._lib.nvmlShutdown()

    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")


def profile_one_call(fn, trace_path: Path) -> list[dict]:
    """GPU events (kernels and copies) of one call of ``fn``, after a warm call, ranks in step."""
    fn()
    torch.cuda.synchronize()
    dist.barrier()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return gpu_events(prof, trace_path)


def profile_replay(fn, trace_path: Path, calls: int = CALLS, warm: int = 20) -> list[dict]:
    """GPU events of one replay of a CUDA graph of ``calls`` calls of ``fn``, after ``warm`` replays, ranks in
    step: as the benchmark times it, call after call (a single eager call starts from an idle GPU and ranks that
    did not just wait for each other)."""
    run, why = capture(fn, calls)
    if run is None:
        raise RuntimeError(f"rank {dist.get_rank()}: the call could not be captured in a CUDA graph ({why})")
    for _ in range(warm):
        run()
    torch.cuda.synchronize()
    dist.barrier()
    for _ in range(warm):  # the ranks in step, as in the benchmark's replays
        run()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return gpu_events(prof, trace_path)


def gpu_events(prof, trace_path: Path) -> list[dict]:
    """The kernels, copies and memsets of a finished profile, in start order (the trace is written to
    ``trace_path`` on the way)."""
    prof.export_chrome_trace(str(trace_path))
    events = [e for e in json.loads(trace_path.read_text())["traceEvents"]
              if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]
    return sorted(events, key=lambda e: e["ts"])


GEMM_NAMES = ("nvjet", "gemm", "cutlass", "xmma")  # cuBLAS's kernels on Hopper and before


def describe(events: list[dict]) -> list[str]:
    """One line per event, times from the first event; then how long the GEMM kernels ran (cuBLAS's, by name)
    against the span: what the call spent outside its GEMMs. (Streams are CUPTI's numbers; in a replayed CUDA
    graph one stream's work may show under several.)"""
    if not events:
        return ["(no GPU events)"]
    t0 = events[0]["ts"]
    lines = []
    for e in events:
        args = e.get("args", {})
        grid = args.get("grid")
        name = e["name"].replace("void ", "")[:70]
        lines.append(f"  stream {args.get('stream')!s:>4} {e['cat']:>10} {e['ts'] - t0:9.1f} "
                     f"{e['ts'] - t0 + e['dur']:9.1f} {e['dur']:8.1f}  {name}{'  grid ' + str(grid) if grid else ''}")
    gemms = [e for e in events if e["cat"] == "kernel" and any(word in e["name"].lower() for word in GEMM_NAMES)]
    span = max(e["ts"] + e["dur"] for e in events) - t0
    busy = sum(e["dur"] for e in gemms)
    first = gemms[0]["ts"] - t0 if gemms else float("nan")
    lines.append(f"  span {span:.1f} µs; GEMMs {busy:.1f} µs ({len(gemms)} kernels, the first from {first:.1f} µs); "
                 f"outside them {span - busy:.1f} µs")
    return lines


def examine(ctx, op: str, shape: str, config, clock: SmClock, folder: Path) -> list[str]:
    """This rank's report on one op and shape: one call of T and of G event by event, and the replayed times of
    G, the GEMM in pieces, T and S with the SM clock during each."""
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    m, n, k = (int(d) for d in shape.split("x"))
    case = operands(op, m, n, k, rank, world, ctx, torch.bfloat16)
    workspace = case.ours(config)
    ours = functools.partial(case.ours, config)
    label = f"{op} {shape} ({workspace.path}, {workspace.pieces} pieces x{workspace.growth:g})"
    one_t = profile_one_call(ours, folder / f"{op}_{shape}_T_rank{rank}.json")
    replayed_t = profile_replay(ours, folder / f"{op}_{shape}_T_replay_rank{rank}.json")
    one_g = profile_one_call(case.gemm, folder / f"{op}_{shape}_G_rank{rank}.json")
    clocks = {}
    for key, fn in (("G", case.gemm), ("GEMM pieces", functools.partial(case.pieces, workspace.pieces,
                                                                         workspace.growth)),
                    ("T", ours), ("S", case.sequence)):
        with clock:
            us, _ = measure(fn, CALLS)
        clocks[key] = (us, clock.median())
    return [f"== rank {rank}: {label}", "T, one call:", *describe(one_t),
            f"T, one replay of a graph of {CALLS} calls:", *describe(replayed_t), "G alone:", *describe(one_g),
            "replayed (µs per call, median SM MHz): " + "; ".join(
                f"{key} {us:.0f} µs at {mhz:.0f} MHz" for key, (us, mhz) in clocks.items())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", default="all_gather_matmul", help="comma-separated, of " + ", ".join(OPS))
    parser.add_argument("--shapes", default="8192x8192x8192", help="MxNxK, comma-separated")
    parser.add_argument("--chunks", type=int, help="cut the chunked path into this many pieces (default: its rule)")
    parser.add_argument("--growth", type=float, default=None, help="with --chunks: each piece's rows over the last's")
    parser.add_argument("--traces", default=None, help="keep each rank's chrome trace in this folder")
    args = parser.parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    ctx = iris.iris("8GiB", backend="cuda")
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    clock = SmClock(local_rank)
    scratch = None if args.traces else tempfile.TemporaryDirectory(prefix="iris-timeline-")  # gone at the end
    folder = Path(args.traces or scratch.name)
    folder.mkdir(parents=True, exist_ok=True)
    config = (iris.ops.FusedConfig(variant="chunked", chunks=args.chunks, growth=args.growth or 1.0)
              if args.chunks else None)
    for shape in args.shapes.split(","):
        for op in args.ops.split(","):
            report = examine(ctx, op, shape, config, clock, folder)
            for source in range(world):  # rank by rank, in order
                if source == rank:
                    print("\n".join(report), flush=True)
                dist.barrier()
            ctx.ops.release_workspaces()
            ctx.barrier()
    clock.close()
    if scratch is not None:
        scratch.cleanup()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
