"""iris.interpret.atomic_adds: float atomic adds on the CPU interpreter give the bits an NVIDIA GPU gives.

A GPU's ``atom.add.f32`` flushes subnormal operands and a subnormal sum to a zero of the same sign (PTX ISA; seen on
an H200 by tests/gpu/test_device_diff_cuda.py); float64 and float16 adds keep subnormals. The expected bits here are
worked out by hand from those rules; the returned old value is the word as it was. Atomicity across processes is
tested with bf16, fp16 and fp32 in tests/test_interpret_bf16.py.
"""

import pytest
import torch

from iris.interpret import atomic_adds

from . import interpret_kernels as k


def _bits(t):
    return t.view({torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16}[t.dtype])


def _add(target, value):
    old = torch.empty_like(target)
    before = target.clone()
    k.add_lane_by_lane[(1,)](target, value, old, target.numel(), BLOCK=16)
    assert torch.equal(_bits(old), _bits(before)), "each lane finds the word as it was, unflushed"
    return target


def test_float32_atomic_add_flushes_subnormals_as_a_gpu_does():
    tiny = torch.finfo(torch.float32).smallest_normal  # 2^-126
    rows = [  # (in memory, added, what atom.add.f32 leaves)
        (0.0, tiny / 4, 0.0),  # a subnormal operand counts as +0
        (0.0, -tiny / 4, 0.0),  # ... -0 here: +0 + -0 = +0
        (-0.0, -tiny / 4, -0.0),  # -0 + -0 = -0
        (-tiny / 2, -tiny / 2, -0.0),  # both flushed: not the normal -2^-126 the CPU would give (seen on an H200)
        (tiny / 4, 1.0, 1.0),  # a subnormal in memory counts as 0 too
        (1.5 * tiny, -tiny, 0.0),  # the exact sum 2^-127 is subnormal: flushed to +0
        (-1.5 * tiny, tiny, -0.0),  # ... -2^-127: to -0
        (tiny, tiny, 2 * tiny),  # normal numbers add as ever
        (3.0, 1.0, 4.0),
        (float("inf"), -tiny / 4, float("inf")),
    ]
    target = torch.tensor([r[0] for r in rows], dtype=torch.float32)
    _add(target, torch.tensor([r[1] for r in rows], dtype=torch.float32))
    expected = torch.tensor([r[2] for r in rows], dtype=torch.float32)
    assert torch.equal(_bits(target), _bits(expected)), (target.tolist(), expected.tolist())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_float64_and_float16_atomic_adds_keep_subnormals(dtype):
    tiny = torch.finfo(dtype).smallest_normal
    target = torch.tensor([0.0, -tiny / 2, 1.5 * tiny], dtype=dtype)
    _add(target, torch.tensor([tiny / 4, -tiny / 2, -tiny], dtype=dtype))
    expected = torch.tensor([tiny / 4, -tiny, tiny / 2], dtype=dtype)
    assert torch.equal(_bits(target), _bits(expected)), target.tolist()


def test_many_lanes_on_one_float32_word_each_see_the_sum_before_them():
    counter = torch.zeros(1)
    values = torch.arange(1.0, 65.0)
    old = torch.full((64,), -1.0)
    k.add_lane_by_lane[(1,)](counter, values, old, 64, BLOCK=64, ONE_WORD=True)
    assert counter.item() == 64 * 65 / 2
    assert old.tolist() == (torch.cumsum(values, 0) - values).tolist()  # the interpreter runs lanes in order


def test_the_interpreter_needs_the_flush():
    # A Triton whose own float32 add flushed would make this module's float32 path unnecessary (it would still
    # agree); the check is what install() asks.
    assert atomic_adds.native_add_keeps_subnormals()
