"""Upstream Iris's Gluon host class, ``iris.iris_gluon.IrisGluon``, on the CPU backend with 2 and 3 real ranks.

The rank cases (tests/rank_cases_gluon_host.py) call every method upstream's documentation lists and check
each result in the rank; these tests add the public surface and what can only be judged across ranks.
"""

from __future__ import annotations

import inspect

import iris.experimental.iris_gluon
import iris.gluon
import iris.iris_gluon
import pytest

import iris

from .multirank import run_ranks

# What upstream's Gluon reference pages document on IrisGluon (docs/reference/api-gluon.md, gluon/class.md).
DOCUMENTED = ("get_device_context", "get_backend", "get_heap_bases", "get_rank", "get_num_ranks", "get_device",
              "get_cu_count", "barrier", "broadcast", "zeros", "ones", "full", "zeros_like", "is_symmetric",
              "debug", "info", "warning", "error")

pytestmark = pytest.mark.usefixtures("no_heap_files_left_behind")


def test_both_module_paths_have_upstreams_names():
    for module in (iris.iris_gluon, iris.experimental.iris_gluon):
        assert module.IrisGluon is iris.iris_gluon.IrisGluon and module.iris is iris.iris_gluon.iris
        assert module.IrisDeviceCtx is module.IrisBackend is iris.gluon.IrisDeviceCtx  # upstream's older name
    assert issubclass(iris.iris_gluon.IrisGluon, iris.Iris)  # one context for Triton and Gluon kernels


def test_documented_methods_with_upstreams_signatures():
    cls = iris.iris_gluon.IrisGluon
    assert all(callable(getattr(cls, name)) for name in DOCUMENTED)
    assert all(callable(getattr(cls.CCL, name)) for name in ("all_to_all", "all_gather", "reduce_scatter"))
    assert str(inspect.signature(cls.broadcast)) == "(self, data, src_rank: 'int' = 0)"
    assert str(inspect.signature(cls.barrier)) == "(self, group=None) -> 'None'"
    assert list(inspect.signature(cls.get_backend).parameters) == ["self"]
    factory = inspect.signature(iris.iris_gluon.iris).parameters
    assert list(factory)[0] == "heap_size" and factory["heap_size"].default == 1 << 30


@pytest.mark.parametrize("world", [2, 3])
def test_every_documented_method_and_a_gluon_kernel(world):
    results = run_ranks(world, "tests.rank_cases_gluon_host:every_documented_method")
    assert [r["rank"] for r in results] == list(range(world)) and all(r["world"] == world for r in results)
    assert all(r["seed"] == 1235 for r in results)  # rank 1's value, everywhere
    # every rank maps every rank's heap, each at an address of its own
    assert all(len(set(r["bases"])) == world for r in results)
