"""torch.ops.iris's collectives for torch.compile (iris.distributed.compiled; upstream's path
iris.compile.functional_collectives) on 2 CPU ranks, against torch.distributed's functional collectives on gloo (the
checks run inside each rank: tests/rank_cases_compiled.py), and their fake-tensor rules in this process.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import iris
from iris.distributed import compiled

from .multirank import run_ranks

CASES = "tests.rank_cases_compiled"


@pytest.fixture(autouse=True)
def _no_heap_files(no_heap_files_left_behind):
    yield


def test_upstreams_paths_are_this_module():
    from iris.compile import functional_collectives

    assert functional_collectives is compiled and iris.compile.functional is compiled
    assert {"IrisCompileContext", "setup", "all_reduce", "all_gather", "reduce_scatter", "set_context",
            "get_context"} <= set(dir(iris.compile))
    assert iris.compile.setup is compiled.setup


def test_fake_rules_give_shapes_without_a_context():
    with FakeTensorMode():
        x = torch.empty(128, 64, dtype=torch.bfloat16)
        assert torch.ops.iris.all_reduce(x).shape == (128, 64)
        assert torch.ops.iris.all_reduce(x, "max").dtype == torch.bfloat16
        assert torch.ops.iris.all_gather(x, 8).shape == (1024, 64)
        assert torch.ops.iris.reduce_scatter(x, 8).shape == (16, 64)
        assert torch.ops.iris.wait_tensor(x).shape == (128, 64)
        with pytest.raises(ValueError, match="cuts dim 0 into 3 equal blocks"):
            torch.ops.iris.reduce_scatter(x, 3)
        with pytest.raises(ValueError, match="op='median'"):
            torch.ops.iris.all_reduce(x, "median")
        with pytest.raises(RuntimeError, match=r"iris.compile.setup\(ctx\)"):  # the world size is the context's
            torch.ops.iris.all_gather(x)


def test_eager_and_compiled_against_gloo_on_2_ranks():
    results = run_ranks(2, f"{CASES}:against_gloo", timeout=240)
    assert results[0]["no context"].startswith("torch.ops.iris")  # nothing initialised yet: no rank to name
    assert all(said["compiled reduce_scatter rows"].count(f"rank {r}:") for r, said in enumerate(results))


def test_the_iris_backends_context_is_the_default_on_2_ranks():
    run_ranks(2, f"{CASES}:on_the_iris_backend", timeout=180, env={"IRIS_HEAP_SIZE": "64MiB"})
