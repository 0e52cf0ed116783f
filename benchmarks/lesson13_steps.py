"""Lesson 13's all-gather + GEMM and GEMM + reduce-scatter, step by step, against torch + NCCL and the library.

Run with one rank per GPU::

    torchrun --nproc_per_node=2 benchmarks/lesson13_steps.py             # the lesson's steps
    torchrun --nproc_per_node=2 benchmarks/lesson13_steps.py --sweep     # and every launch configuration tried
    torchrun --nproc_per_node=2 benchmarks/lesson13_steps.py --write     # and the table into RESULTS.md

The kernels are the lesson's own: notebooks/13_sequence_parallel_ag_gemm_rs.ipynb's ``%%writefile
sequence_parallel.py`` cells (:func:`benchmarks.lesson_modules.write_lesson_modules`) and its exercise's solution,
``ag_gemm_local_first``. The shape is the lesson's GPU cell's: 2048 tokens, hidden size 2048, MLP width 8192,
bf16, this rank's ``width / world`` columns of ``W1`` and rows of ``W2``. Each callable is captured ``CALLS`` times
in a CUDA graph and replayed (:func:`benchmarks.allreduce.measure`), the slowest rank's time; each of our kernels
is followed by ``ctx.device_barrier()`` in the graph (the next call must not overwrite what a slow peer still
reads), and every result is checked against torch + NCCL's before a time is reported. Beside the steps:
``torch.matmul`` alone and the lesson's ``matmul`` (its fused kernels' tiles, no communication) alone, which
bound what the fused kernels can reach.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off, for NCCL too

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.allreduce import measure  # noqa: E402
from benchmarks.lesson_modules import lesson_directory  # noqa: E402
from benchmarks.lesson_ranks import gpu_rank  # noqa: E402
from benchmarks.results import environment, write_lesson_block  # noqa: E402

LESSON = ROOT / "notebooks" / "13_sequence_parallel_ag_gemm_rs.ipynb"
TOKENS, HIDDEN, WIDTH = 2048, 2048, 8192
FIRST_BLOCKS = dict(block_m=128, block_n=128, block_k=64, num_warps=8)  # the first kernels' GPU launch
CALLS = 5  # calls per captured graph
TIMED_MS = 40.0  # replays per measurement: about this long


def lesson_modules():
    """(sequence_parallel, the exercise's ag_gemm_local_first), written from the lesson's cells and imported."""
    folder = lesson_directory(LESSON)
    header = "%%iris_kernel --trace\nfrom sequence_parallel import multiply_tile, send_my_tile\n"
    cells = json.loads(LESSON.read_text())["cells"]
    (cell,) = ["".join(c["source"]) for c in cells if "".join(c["source"]).startswith(header)]
    kernel = cell[len("%%iris_kernel --trace\n"):cell.index("\n\n\nall_gather_gemm(")]  # the solution's kernel
    (folder / "local_first.py").write_text(
        "import triton\nimport triton.language as tl\nfrom iris import DeviceContext\n" + kernel + "\n")
    return __import__("sequence_parallel"), __import__("local_first").ag_gemm_local_first


def sweep_configs(kind: str) -> dict:
    """{name: keywords}: the launch configurations a measurement chooses among, for "ag" or "rs"."""
    blocks = [dict(block_m=128, block_n=256, block_k=64, num_stages=3, num_warps=8),
              dict(block_m=128, block_n=128, block_k=64, num_stages=4, num_warps=8),
              dict(block_m=128, block_n=128, block_k=64, num_stages=3, num_warps=4),
              dict(block_m=256, block_n=128, block_k=64, num_stages=3, num_warps=8)]
    configs = {}
    for b in blocks:
        name = f"{b['block_m']}x{b['block_n']}x{b['block_k']} s{b['num_stages']} w{b['num_warps']}"
        if kind == "rs":
            configs[name] = b
            continue
        for senders, send_rows in itertools.product((8, 16, 32), (16, 32)):
            configs[f"{name} senders {senders}x{send_rows}"] = dict(b, senders=senders, send_rows=send_rows,
                                                                    send_cols=256)
    return configs


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", action="store_true", help="also time every configuration of sweep_configs()")
    parser.add_argument("--write", action="store_true", help="write the steps' table into benchmarks/RESULTS.md")
    args = parser.parse_args()
    ctx = gpu_rank("1GiB")
    sp, ag_gemm_local_first = lesson_modules()
    world, rank = ctx.num_ranks, ctx.cur_rank
    m_local, w_local = TOKENS // world, WIDTH // world
    bf16 = dict(device=ctx.device, dtype=torch.bfloat16)
    generator = torch.Generator(device=ctx.device).manual_seed(rank)
    X_mine = ctx.randn(m_local, HIDDEN, dtype=torch.bfloat16)
    W1 = torch.randn(HIDDEN, w_local, generator=generator, **bf16) / HIDDEN ** 0.5
    W2 = torch.randn(w_local, HIDDEN, generator=generator, **bf16) / w_local ** 0.5
    X_all, X_ccl = torch.empty(TOKENS, HIDDEN, **bf16), ctx.zeros(TOKENS, HIDDEN, dtype=torch.bfloat16)
    Y_want, P, Z_want = (torch.empty(TOKENS, w_local, **bf16), torch.empty(TOKENS, HIDDEN, **bf16),
                         torch.empty(m_local, HIDDEN, **bf16))
    Y_out, Z_out = torch.empty(TOKENS, w_local, **bf16), torch.empty(m_local, HIDDEN, **bf16)
    W2t, Zt = W2.T.contiguous(), torch.empty(HIDDEN, m_local, **bf16)

    def nccl_ag():
        dist.all_gather_into_tensor(X_all, X_mine)
        torch.matmul(X_all, W1, out=Y_want)

    def ccl_ag():
        ctx.ccl.all_gather(X_ccl, X_mine)
        torch.matmul(X_ccl, W1, out=Y_out)

    def nccl_rs():
        torch.matmul(Y_want, W2, out=P)
        dist.reduce_scatter_tensor(Z_want, P)

    nccl_ag()
    Yt = Y_want.T.contiguous()                        # ctx.ops' layout, made once (a model would keep it)
    nccl_rs()
    torch.cuda.synchronize()

    ag_first = sp.AllGatherGemm(ctx, TOKENS, HIDDEN, w_local, torch.bfloat16, **FIRST_BLOCKS)
    ag_steps = {
        "1 ag_gemm (the first kernel)": lambda out: ag_first(out, X_mine, W1, trace=False, barrier=False),
        "2 ag_gemm_local_first (the exercise)": lambda out: ag_first(out, X_mine, W1, ag_gemm_local_first,
                                                                    trace=False, barrier=False)}
    ag_configs = {"3 ag_gemm_senders, the first kernel's blocks": dict(
        FIRST_BLOCKS, num_stages=3, senders=8, send_rows=32, send_cols=256),
        "4 ag_gemm_senders, blocks chosen by measurement": sp.GPU_CONFIGS["ag_gemm_senders"]}
    rs_first = sp.GemmReduceScatter(ctx, TOKENS, HIDDEN, torch.bfloat16, **FIRST_BLOCKS)
    rs_steps = {"1 gemm_rs (the first kernel)": lambda out: rs_first(out, Y_want, W2, trace=False, barrier=False)}
    rs_configs = {"2 gemm_rs_peers_first, the first kernel's blocks": dict(FIRST_BLOCKS, num_stages=3),
                  "3 gemm_rs_peers_first, blocks chosen by measurement": sp.GPU_CONFIGS["gemm_rs_peers_first"]}
    if args.sweep:
        ag_configs |= {f"sweep {k}": v for k, v in sweep_configs("ag").items()}
        rs_configs |= {f"sweep {k}": v for k, v in sweep_configs("rs").items()}
    for name, config in ag_configs.items():
        kernel = sp.AllGatherGemmSenders(ctx, TOKENS, HIDDEN, w_local, torch.bfloat16, **config)
        ag_steps[name] = lambda out, kernel=kernel: kernel(out, X_mine, W1, barrier=False)
    for name, config in rs_configs.items():
        kernel = sp.GemmReduceScatterPeersFirst(ctx, TOKENS, HIDDEN, torch.bfloat16, **config)
        rs_steps[name] = lambda out, kernel=kernel: kernel(out, Y_want, W2, barrier=False)

    def timed_steps(steps: dict, out: torch.Tensor, want: torch.Tensor, label: str) -> dict:
        row = {}
        for name, call in steps.items():
            out.fill_(float("nan"))                   # every element must be written by the checked call
            call(out)
            ctx.device_barrier()
            torch.cuda.synchronize()
            error = relative_error(out, want)
            assert error < 1e-2, f"{label}, rank {rank}: {name} differs from torch + NCCL by {error:.1e}"

            def step(call=call):
                call(out)
                ctx.device_barrier()

            row[name] = measure(step, CALLS, TIMED_MS)[0]
            if rank == 0:
                print(f"{label}: {name} {row[name]:.1f} µs (error {error:.1e})", flush=True)
        return row

    def gemm_alone(A, W, out, config):
        b = {k: config[k] for k in ("block_m", "block_n", "block_k")}
        grid = (A.shape[0] // b["block_m"] * (W.shape[1] // b["block_n"]),)
        return lambda: sp.matmul[grid](A, W, out, A.shape[1], W.shape[1], b["block_m"], b["block_n"], b["block_k"],
                                       num_warps=config["num_warps"], num_stages=config["num_stages"])

    ag = {"NCCL all_gather + torch.matmul": measure(nccl_ag, CALLS, TIMED_MS)[0],
          "ctx.ccl.all_gather + torch.matmul": measure(ccl_ag, CALLS, TIMED_MS)[0],
          "torch.matmul alone": measure(lambda: torch.matmul(X_all, W1, out=Y_out), CALLS, TIMED_MS)[0]}
    ccl_ag()
    torch.cuda.synchronize()
    assert relative_error(Y_out, Y_want) < 1e-2, "ctx.ccl.all_gather + matmul differs from NCCL's"
    rs = {"torch.matmul + NCCL reduce_scatter": measure(nccl_rs, CALLS, TIMED_MS)[0],
          "ctx.ops.matmul_reduce_scatter": measure(lambda: ctx.ops.matmul_reduce_scatter(Zt, W2t, Yt),
                                                   CALLS, TIMED_MS)[0],
          "torch.matmul alone": measure(lambda: torch.matmul(Y_want, W2, out=P), CALLS, TIMED_MS)[0]}
    ctx.ops.matmul_reduce_scatter(Zt, W2t, Yt)
    torch.cuda.synchronize()
    assert relative_error(Zt.T, Z_want) < 1e-2, "ctx.ops.matmul_reduce_scatter differs from NCCL's"
    gemm_configs = {"the final ag config": sp.GPU_CONFIGS["ag_gemm_senders"],
                    "the final rs config": sp.GPU_CONFIGS["gemm_rs_peers_first"]}
    if args.sweep:
        gemm_configs |= {f"sweep {k}": v for k, v in sweep_configs("rs").items()}
    for name, config in gemm_configs.items():
        label = f"sweep matmul alone, {name[len('sweep '):]}" if name.startswith("sweep") else f"matmul alone, {name}"
        ag[label] = measure(gemm_alone(X_all, W1, Y_out, config), CALLS, TIMED_MS)[0]
        rs[label] = measure(gemm_alone(Y_want, W2, P, config), CALLS, TIMED_MS)[0]
    sp.matmul[(TOKENS // 128 * (w_local // 128),)](X_all, W1, Y_out, HIDDEN, w_local, 128, 128, 64)
    torch.cuda.synchronize()
    assert relative_error(Y_out, Y_want) < 1e-2, "the lesson's matmul differs from torch.matmul"
    ag |= timed_steps(ag_steps, Y_out, Y_want, "all-gather + GEMM")
    rs |= timed_steps(rs_steps, Z_out, Z_want, "GEMM + reduce-scatter")
    if rank == 0:
        lines = table({"all-gather + GEMM": ag, "GEMM + reduce-scatter": rs}, world)
        print("\n".join(lines), flush=True)
        if args.write:
            write_lesson_block("13", "benchmarks/lesson13_steps.py", lines, world)
    ctx.barrier()
    dist.destroy_process_group()


def table(halves: dict, world: int) -> list:
    """One row per step and baseline: µs per call and the ratio to torch + NCCL (the goal: at most 1.10)."""
    lines = [f"{environment()}; {world} ranks, one per GPU; NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}; "
             f"{TOKENS} tokens, hidden {HIDDEN}, width {WIDTH} (each rank {WIDTH // world} of it), bf16; CUDA graphs "
             f"of {CALLS} calls, slowest rank.", "", "| lesson 13 | step or baseline | µs | / torch + NCCL |",
             "|---|---|---|---|"]
    for half, row in halves.items():
        base = next(v for k, v in row.items() if k.startswith(("NCCL", "torch.matmul + NCCL")))
        for name, us in row.items():
            if not name.startswith("sweep"):
                lines.append(f"| {half} | {name} | {us:.1f} | {us / base:.2f} |")
    sweeps = [(half, name, us) for half, row in halves.items() for name, us in row.items() if name.startswith("sweep")]
    if sweeps:
        lines += ["", "| sweep | configuration | µs |", "|---|---|---|"]
        lines += [f"| {half} | {name[len('sweep '):]} | {us:.1f} |" for half, name, us in sweeps]
    return lines


if __name__ == "__main__":
    main()
