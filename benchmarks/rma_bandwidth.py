"""Remote put/get bandwidth and small-message latency between two ranks, against torch's peer copy.

Run on a machine with 2 GPUs (one rank each)::

    torchrun --nproc_per_node=2 benchmarks/rma_bandwidth.py            # cross-GPU, NVLink
    torchrun --nproc_per_node=2 benchmarks/rma_bandwidth.py --shared   # both ranks on GPU 0

Rank 0 moves data to or from rank 1's heap with every flavour of the device API (functional, DeviceContext,
Gluon IrisDeviceCtx, device-side as_remote, host-side as_remote handed to a plain kernel); the baselines, in
the same run, are torch's device-to-device copy between the two GPUs (``Tensor.copy_``, copy engines over
NVLink), a plain local copy kernel, and the NVLink line rate. It also reads the generated PTX to report how
wide the remote accesses are. The table goes to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import iris  # noqa: E402
from benchmarks.results import environment, write_section  # noqa: E402
from iris.language.gluon import IrisDeviceCtx  # noqa: E402

NVLINK_GBPS = 450.0  # H200 NVLink 4, per direction
SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30]
BLOCK = 4096
WARPS = 8


@triton.jit
def put_functional(src, dst, n, cur, peer, heap_bases, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    iris.put(src + offs, dst + offs, cur, peer, heap_bases, mask=offs < n, hint=16)


@triton.jit
def get_functional(remote_src, dst, n, cur, peer, heap_bases, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    iris.get(remote_src + offs, dst + offs, cur, peer, heap_bases, mask=offs < n, hint=16)


@triton.jit
def put_context(context, src, dst, n, cur: tl.constexpr, world: tl.constexpr, peer, BLOCK: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, cur, world)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ctx.put(src + offs, dst + offs, peer, mask=offs < n, hint=16)


@triton.jit
def put_as_remote(context, src, dst, n, cur: tl.constexpr, world: tl.constexpr, peer, BLOCK: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, cur, world)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    remote = ctx.as_remote(dst + offs, peer, hint=16)  # translate once, then plain tl.store
    tl.store(remote, tl.load(src + offs, mask=offs < n), mask=offs < n)


@gluon.jit
def put_gluon(IrisDeviceCtx: gl.constexpr, context, src, dst, n, peer, BLOCK: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context)
    layout: gl.constexpr = gl.BlockedLayout([4], [32], [8], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    ctx.put(src + offs, dst + offs, peer, mask=offs < n, hint=16)


@triton.jit
def copy_plain(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


TUNING = [(4096, 8), (8192, 8), (8192, 16), (16384, 16), (2048, 4)]


def tune_put(src, dst, rank, peer, bases) -> tuple:
    """Best (GB/s, BLOCK, num_warps) of the functional put at the largest size over a few launch shapes."""
    n = max(SIZES) // 4
    best = (0.0, 0, 0)
    for block, warps in TUNING:
        grid = (triton.cdiv(n, block),)
        ms = bench(lambda: put_functional[grid](src, dst, n, rank, peer, bases, BLOCK=block, num_warps=warps))  # noqa: B023
        best = max(best, (max(SIZES) / (ms * 1e-3) / 1e9, block, warps))
    return best


def vector_width(kernel) -> str:
    """Widest global store and load in the PTX, e.g. 'st v4 / ld v4' (v4 x b32 = 16 bytes)."""
    ptx = kernel.asm["ptx"]
    def widest(op):
        widths = [int(w) for w in re.findall(rf"{op}\.global(?:\.\w+)*\.v(\d)", ptx)]
        return f"v{max(widths)}" if widths else ("v1" if re.search(rf"{op}\.global", ptx) else "-")
    return f"st {widest('st')} / ld {widest('ld')}"


def bench(fn) -> float:
    """Median milliseconds."""
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def transfers(n, rank, peer, world, src, dst, out, remote_dst, torch_dst, context, bases) -> dict:
    """Every way of moving ``n`` fp32 values, as zero-argument launchers (the launch returns the compiled kernel)."""
    grid = (triton.cdiv(n, BLOCK),)
    opts = dict(BLOCK=BLOCK, num_warps=WARPS)
    return {
        "put (functional)": lambda: put_functional[grid](src, dst, n, rank, peer, bases, **opts),
        "get (functional)": lambda: get_functional[grid](dst, out, n, rank, peer, bases, **opts),
        "put (DeviceContext)": lambda: put_context[grid](context, src, dst, n, rank, world, peer, **opts),
        "put (Gluon)": lambda: put_gluon[grid](IrisDeviceCtx, context, src, dst, n, peer, **opts),
        "put (as_remote, device)": lambda: put_as_remote[grid](context, src, dst, n, rank, world, peer, **opts),
        "put (as_remote, host)": lambda: copy_plain[grid](src, remote_dst, n, **opts),
        "local copy kernel": lambda: copy_plain[grid](src, out, n, **opts),
        "torch peer copy": lambda: torch_dst[:n].copy_(src[:n]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shared", action="store_true", help="both ranks on GPU 0 (as_remote vs local pointers)")
    args = parser.parse_args()
    if args.shared:
        os.environ["CUDA_VISIBLE_DEVICES"] = "0"
    ctx = iris.iris(2 * max(SIZES) + (64 << 20), backend="cuda")
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    assert world == 2, "run with torchrun --nproc_per_node=2"
    peer = 1 - rank
    n_max = max(SIZES) // 4
    src = ctx.randn(n_max, dtype=torch.float32)
    dst = ctx.zeros(n_max, dtype=torch.float32)
    out = torch.empty(n_max, dtype=torch.float32, device=ctx.device)
    context, bases = ctx.get_device_context(), ctx.get_heap_bases()
    ctx.barrier()
    rows, widths = [], {}
    if rank == 0:
        remote_dst = ctx.as_remote(dst, peer)
        torch_dst = torch.empty(n_max, dtype=torch.float32, device="cuda:0" if args.shared else "cuda:1")
        for nbytes in SIZES:
            variants = transfers(nbytes // 4, rank, peer, world, src, dst, out, remote_dst, torch_dst, context, bases)
            times = {}
            for name, fn in variants.items():
                compiled = fn()
                if name not in widths and hasattr(compiled, "asm"):
                    widths[name] = vector_width(compiled)
                times[name] = bench(fn)
            rows.append((nbytes, times))
            # correctness of the last put: rank 1's copy holds src
            torch.cuda.synchronize()
            n = nbytes // 4
            assert torch.equal(remote_dst[:n], src[:n]), f"remote put wrong at {nbytes} bytes"
        tuned = None if args.shared else tune_put(src, dst, rank, peer, bases)
        report(rows, widths, args.shared, tuned)
    ctx.barrier()


def _size(nbytes: int) -> str:
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if nbytes >= 1 << shift:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def report(rows, widths, shared: bool, tuned) -> None:
    names = list(rows[0][1])
    lines = ["| size | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for nbytes, times in rows:
        if nbytes <= 64 << 10:  # latency regime: microseconds per transfer
            cells = [f"{times[k] * 1e3:.1f} µs" for k in names]
        else:
            cells = [f"{nbytes / (times[k] * 1e-3) / 1e9:.0f} GB/s" for k in names]
        lines.append(f"| {_size(nbytes)} | " + " | ".join(cells) + " |")
    largest, big = rows[-1]
    gbps = {k: largest / (t * 1e-3) / 1e9 for k, t in big.items()}
    if shared:
        summary = [
            f"At {_size(largest)}: host as_remote runs at "
            f"{gbps['put (as_remote, host)'] / gbps['local copy kernel']:.1%} and device as_remote at "
            f"{gbps['put (as_remote, device)'] / gbps['local copy kernel']:.1%} of the "
            "speed of the same kernel on plain local pointers.",
        ]
    else:
        summary = [
            f"At {_size(largest)}: functional put "
            f"{gbps['put (functional)'] / gbps['torch peer copy']:.0%} of torch's peer copy and "
            f"{gbps['put (functional)'] / NVLINK_GBPS:.0%} of the {NVLINK_GBPS:.0f} GB/s NVLink line rate "
            f"(torch's copy engines reach {gbps['torch peer copy'] / NVLINK_GBPS:.0%}). Best launch shape of "
            f"{TUNING}: BLOCK={tuned[1]}, num_warps={tuned[2]}: {tuned[0]:.0f} GB/s = "
            f"{tuned[0] / gbps['torch peer copy']:.0%} of torch, {tuned[0] / NVLINK_GBPS:.0%} of line rate.",
        ]
    summary += [
        "Widest global accesses in the PTX: " + "; ".join(f"{k}: {v}" for k, v in widths.items()) + ".",
    ]
    mode = "both ranks on GPU 0" if shared else "one rank per GPU"
    body = (f"{environment()}; {mode}; rank 0 moves fp32 data to/from rank 1, BLOCK={BLOCK}, num_warps={WARPS}, "
            "median of do_bench. Small sizes in µs per transfer, large in GB/s.\n\n"
            + "\n".join(lines) + "\n\n" + "\n".join(summary))
    title = "rma_bandwidth (shared GPU)" if shared else "rma_bandwidth (GPU to GPU)"
    print(f"## {title}\n\n{body}")
    write_section(title, body)


if __name__ == "__main__":
    main()
