"""What tests/bf16_kernels.py's kernels compute from fixed inputs, on this process's backend, saved for comparing.

tests/gpu/test_bf16_cuda.py runs it twice on a GPU machine, once compiled for the GPU and once on the CPU
interpreter (``IRIS_BACKEND=cpu``), and compares the two: a bf16 kernel must give the same numbers on a laptop as
on a GPU.

    IRIS_BACKEND=cpu python3 -m tests.gpu.bf16_outputs cpu.pt     # the CPU interpreter
    python3 -m tests.gpu.bf16_outputs gpu.pt                      # the GPU
"""

from __future__ import annotations

import sys

import torch

import iris  # before the kernels: with IRIS_BACKEND=cpu this switches Triton to the interpreter
from tests import bf16_kernels as k
from tests.test_interpret_bf16 import _operands, _randn


def outputs(device: str) -> dict[str, torch.Tensor]:
    """Every kernel's outputs (on the CPU), keyed ``kernel.output``; inputs made on the CPU, then moved."""
    def on(*tensors):
        return [t.to(device) for t in tensors]

    found = {}
    x, y, z = on(*_operands())
    (f,) = on(torch.randn(64, generator=torch.Generator().manual_seed(4)))
    out = torch.empty(len(k.BINARY_OPS), 64, dtype=torch.bfloat16, device=device)
    compared = torch.empty(len(k.COMPARISONS), 64, dtype=torch.int8, device=device)
    k.elementwise[(1,)](x, y, z, f, out, compared, BLOCK=64)
    found.update({f"elementwise.{name}": out[row] for row, name in enumerate(k.BINARY_OPS)})
    found.update({f"elementwise.{name}": compared[row] for row, name in enumerate(k.COMPARISONS)})

    (positive,) = on(_randn(64, 5).abs() + 0.25)
    out = torch.empty(len(k.UNARY_OPS), 64, dtype=torch.bfloat16, device=device)
    k.unary[(1,)](positive, out, BLOCK=64)
    found.update({f"unary.{name}": out[row] for row, name in enumerate(k.UNARY_OPS)})

    f32 = torch.randn(64, generator=torch.Generator().manual_seed(6)) * 100
    i32 = torch.randint(-(2 ** 24), 2 ** 24, (64,), dtype=torch.int32, generator=torch.Generator().manual_seed(7))
    inputs = on(f32, f32.double(), i32, i32.long(), _randn(64, 8, scale=50.0))
    out_bf = torch.empty(5, 64, dtype=torch.bfloat16, device=device)
    out_f32, out_i32, out_f16 = on(torch.empty(64), torch.empty(64, dtype=torch.int32), torch.empty(64).half())
    k.casts[(1,)](*inputs, out_bf, out_f32, out_i32, out_f16, BLOCK=64)
    found.update({f"casts.{name}": out_bf[row] for row, name in enumerate(("fp32", "fp64", "int32", "int64", "rtz"))})
    found.update({"casts.to_fp32": out_f32, "casts.to_int32": out_i32, "casts.to_fp16": out_f16})

    M, N = 8, 16
    (tile,) = on(_randn(M * N, 9).reshape(M, N))
    total, row_sum, row_max, col_min, argmax, cumsum = on(
        torch.empty(1, dtype=torch.bfloat16), torch.empty(M, dtype=torch.bfloat16),
        torch.empty(M, dtype=torch.bfloat16), torch.empty(N, dtype=torch.bfloat16),
        torch.empty(M, dtype=torch.int32), torch.empty(M, N, dtype=torch.bfloat16))
    k.reductions[(1,)](tile, total, row_sum, row_max, col_min, argmax, cumsum, M=M, N=N)
    found.update({"reductions.sum": total, "reductions.row_sum": row_sum, "reductions.row_max": row_max,
                  "reductions.col_min": col_min, "reductions.argmax": argmax, "reductions.cumsum": cumsum})

    a, b = on(_randn(32 * 32, 10).reshape(32, 32), _randn(32 * 32, 11).reshape(32, 32))
    c, c_bf = on(torch.empty(32, 32), torch.empty(32, 32, dtype=torch.bfloat16))
    k.matmul[(1,)](a, b, c, c_bf, M=32, N=32, K=32)
    found.update({"matmul.fp32": c, "matmul.bf16": c_bf})

    gx, gy = on(_randn(128, 12), _randn(128, 13))
    axpy, dot = on(torch.empty(128, dtype=torch.bfloat16), torch.empty(1, dtype=torch.bfloat16))
    k.gluon_axpy[(1,)](gx, gy, axpy, dot, 0.75, BLOCK=128)
    found.update({"gluon_axpy.out": axpy, "gluon_axpy.sum": dot})

    counter, values, old = on(torch.zeros(1, dtype=torch.bfloat16), torch.full((64,), 0.5, dtype=torch.bfloat16),
                              torch.empty(64, dtype=torch.bfloat16))
    values[:16] = 2.0
    k.add_everywhere[(1,)](counter, values, old, BLOCK=64)
    for _ in range(3):
        k.add_scalar_constant[(1,)](counter)
    found["atomics.counter"] = counter
    return {name: tensor.cpu() for name, tensor in found.items()}


if __name__ == "__main__":
    device = "cpu" if iris.interpret.is_active() else "cuda"
    torch.save({"device": device, "outputs": outputs(device)}, sys.argv[1])
