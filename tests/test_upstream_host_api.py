"""Upstream Iris's host API runs unchanged: device string, element-count allocation, size forms, out= checks,
arange's errors, memory formats, as_symmetric, uniform, allocator_type, device-barrier state, logging.

Written from upstream's documented behaviour; the multi-rank part runs real processes on the CPU backend at
2 and 3 ranks (tests/rank_cases_upstream_host.py).
"""

from __future__ import annotations

import logging

import pytest
import torch

import iris
from iris import tensor_creation
from iris.runtime.heap_choice import choose_allocator

from .multirank import run_ranks

CASES = "tests.rank_cases_upstream_host"

pytestmark = pytest.mark.usefixtures("no_heap_files_left_behind")


# -- single-process units ------------------------------------------------------------------------

def test_upstreams_names_for_the_device_contexts():
    import iris.runtime.context

    assert iris.TritonContext is iris.runtime.context.TritonContext is iris.DeviceContext
    assert iris.runtime.context.GluonContext is iris.gluon.IrisDeviceCtx
    assert iris.TraceEvent is iris.tracing.TraceEvent


def test_parse_size_takes_every_form_upstream_does():
    assert tensor_creation.parse_size((2, 3)) == ((2, 3), 6)
    assert tensor_creation.parse_size(((2, 3),)) == ((2, 3), 6)
    assert tensor_creation.parse_size(([4, 5],)) == ([4, 5], 20)  # the innermost form comes back as given
    assert tensor_creation.parse_size((((2, 3, 4),),)) == ((2, 3, 4), 24)
    assert tensor_creation.parse_size((torch.Size([2, 3]),)) == (torch.Size([2, 3]), 6)
    assert tensor_creation.parse_size(((),)) == ((), 1) and tensor_creation.parse_size(7) == ((7,), 7)
    with pytest.raises(TypeError, match="rank 3: tensor sizes must be ints"):
        tensor_creation.parse_size((2, 1.5), rank=3)


def test_device_checks_follow_upstream():
    cuda0 = torch.device("cuda", 0)
    assert tensor_creation.is_valid_device(None, cuda0) and tensor_creation.is_valid_device("cuda", cuda0)
    assert tensor_creation.is_valid_device(torch.device("cuda:0"), "cuda:0")
    assert not tensor_creation.is_valid_device("cuda:1", cuda0) and not tensor_creation.is_valid_device("cpu", cuda0)
    assert not tensor_creation.is_valid_device("mps", cuda0)
    assert tensor_creation.is_valid_device("cpu", "cpu")  # the CPU backend's heap
    with pytest.raises(RuntimeError, match="rank 1: device mismatch: the symmetric heap is on cuda:0, not cpu"):
        tensor_creation.throw_if_invalid_device("cpu", cuda0, rank=1)
    tensor_creation.throw_if_invalid_device(None, cuda0)


def test_layouts_and_memory_formats():
    t = torch.zeros(2, 3)
    assert tensor_creation.apply_layout(t, torch.strided) is t
    with pytest.raises(ValueError, match="only torch.strided"):
        tensor_creation.apply_layout(t, torch.sparse_coo)
    strides = tensor_creation.memory_format_strides
    assert strides((2, 3, 4, 5), torch.channels_last) == (60, 1, 15, 3)
    assert strides((2, 3, 4, 5, 6), torch.channels_last_3d) == (360, 1, 90, 18, 3)
    assert strides((3, 3), torch.channels_last) is None and strides((2, 3), torch.contiguous_format) is None
    assert strides((3, 2), torch.preserve_format, like=torch.zeros(2, 3).t()) == (1, 3)
    assert strides((3, 2), torch.preserve_format, like=torch.zeros(3, 2)) is None


def test_allocator_type_torch_or_a_clear_refusal(monkeypatch):
    monkeypatch.delenv("IRIS_ALLOCATOR", raising=False)
    assert choose_allocator(None, "cpu") == "torch" == choose_allocator(" Torch ", "cpu")
    monkeypatch.setenv("IRIS_ALLOCATOR", "vmem")
    with pytest.raises(NotImplementedError, match="upstream Iris's virtual-memory allocator"):
        choose_allocator(None, "cpu")  # the cpu backend's heap does not grow (tests/test_heap_growth.py)
    assert choose_allocator("torch", "cpu") == "torch"  # the argument wins over the environment
    with pytest.raises(ValueError, match="unknown allocator_type 'pool'"):
        choose_allocator("pool", "cpu")


def test_logging_names_and_format():
    assert iris.base.logging.logger is iris.logger and iris.logger.name == "iris"
    assert (iris.DEBUG, iris.INFO, iris.WARNING, iris.ERROR) == (10, 20, 30, 40)
    assert isinstance(iris.logger.handlers[0], logging.StreamHandler)
    formatter = iris.base.logging.IrisFormatter()
    record = logging.LogRecord("iris", logging.INFO, "", 0, "no rank", (), None)
    assert formatter.format(record) == "[Iris] [?/?] no rank"  # upstream's mark of an unknown rank
    record.iris_rank, record.iris_num_ranks = 2, 4
    assert formatter.format(record) == "[Iris] [2/4] no rank"
    record.levelno, record.levelname = logging.WARNING, "WARNING"
    assert formatter.format(record) == "[Iris] [2/4] WARNING: no rank"
    internal = logging.LogRecord("iris", logging.INFO, "iris/ccl/all_gather.py", 0, "launched", (), None)
    internal.iris_internal, internal.iris_rank, internal.iris_num_ranks = True, 0, 4
    assert formatter.format(internal) == "[Iris] [0/4] [all_gather] launched"  # upstream's library lines


# -- multi-rank, real processes ------------------------------------------------------------------

@pytest.mark.parametrize("world, log_level", [(2, ""), (3, "warning")])
def test_upstream_host_api_on_every_rank(world, log_level):
    results = run_ranks(world, f"{CASES}:upstream_host_api", env={"IRIS_LOG_LEVEL": log_level})
    assert {r["initial_level"] for r in results} == {iris.INFO if not log_level else iris.WARNING}
    assert len({r["symmetric_offset"] for r in results}) == 1  # as_symmetric allocates collectively
    for rank, r in enumerate(results):
        assert r["out_messages"][1].startswith(f"rank {rank}: ") and "ctx.empty" in r["out_messages"][2]
        assert r["as_remote_messages"] == [
            f"rank {rank}: as_remote rank {bad} is out of range: the valid ranks are 0 to {world - 1}"
            for bad in (world, -1)
        ]
        assert r["log"] == [
            f"[Iris] [{rank}/{world}] an info line", f"[Iris] [{rank}/{world}] a debug line",
            f"[Iris] [{rank}/{world}] ERROR: an error line", "[Iris] [?/?] no rank",
        ]
